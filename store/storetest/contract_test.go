package storetest_test

import (
	"github.com/fenceproxy/fenceproxy/control"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/store/storetest"
)

// The consumers' store interfaces stay subsets of the contract.
var (
	_ lease.Store   = storetest.Store(nil)
	_ control.Store = storetest.Store(nil)
)
