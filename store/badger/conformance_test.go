package badger

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/store"
	"github.com/fenceproxy/fenceproxy/store/storetest"
)

// The Badger store passes the storage contract's conformance suite.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		dir := t.TempDir()
		return func() (store.Store, error) {
			s, err := Open(dir, Options{})
			if err != nil {
				return nil, err
			}
			return s, nil
		}
	})
}
