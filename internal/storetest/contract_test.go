package storetest_test

import (
	"github.com/fenceproxy/fenceproxy/control"
	"github.com/fenceproxy/fenceproxy/internal/storetest"
	"github.com/fenceproxy/fenceproxy/lease"
)

// The consumers' store interfaces stay subsets of the contract.
var (
	_ lease.Store   = storetest.Store(nil)
	_ control.Store = storetest.Store(nil)
)
