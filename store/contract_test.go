package store_test

import (
	"github.com/fenceproxy/fenceproxy/control"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/pool"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/store"
)

// The consumers' store interfaces stay subsets of the contract.
var (
	_ lease.Store            = store.Store(nil)
	_ pool.Store             = store.Store(nil)
	_ proxy.MultipartRecords = store.Store(nil)
	_ control.Store          = store.Store(nil)
)
