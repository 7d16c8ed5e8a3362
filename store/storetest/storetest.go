// Package storetest is the conformance suite of fenceproxy's storage
// contract, store.Store: per-resource fencing-token maxima, lease records,
// shard-pool records, S3 multipart upload records, the start-up view and the
// clean-stop mark. Every implementation (store/badger, store/etcd, and
// store/mem in memory for tests) must pass Run.
//
// Errors: the suite asserts only that an error is returned where one is due
// (see package store).
package storetest

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/store"
)

// Opener opens the storage it was made for and returns a new Store on it. The
// suite calls it again only after closing the Store it returned last (a
// restart), and each Store must see what the previous ones made durable.
type Opener func() (store.Store, error)

// Run runs the conformance suite. newStorage returns an Opener over new,
// empty storage that lives until t ends (e.g. a t.TempDir() directory); the
// suite calls it once per subtest and closes every Store it opened.
func Run(t *testing.T, newStorage func(t *testing.T) Opener) {
	groups := []struct {
		name  string
		tests []subtest
	}{
		{"Raise", raiseTests},
		{"Lease", leaseTests},
		{"LeasePage", leasePageTests},
		{"LeaseSweep", leaseSweepTests},
		{"List", listTests},
		{"Prefixes", prefixesTests},
		{"Reset", resetTests},
		{"Upload", uploadTests},
		{"Pool", poolTests},
		{"StartView", startViewTests},
		{"CleanStop", cleanStopTests},
		{"Lifecycle", lifecycleTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, st := range g.tests {
				t.Run(st.name, func(t *testing.T) { st.fn(newRig(t, newStorage)) })
			}
		})
	}
}

// subtest is one leaf of the suite; it gets storage of its own.
type subtest struct {
	name string
	fn   func(r *rig)
}

// rig is one subtest's storage and the Store open on it.
type rig struct {
	t    *testing.T
	open Opener
	s    store.Store // nil between a Close and the next open

	newStorage func(t *testing.T) Opener // for a subtest's rig of its own
}

// newRigOn returns a rig on new storage of r's kind, for t (a subtest of r's).
func newRigOn(t *testing.T, r *rig) *rig { return newRig(t, r.newStorage) }

func newRig(t *testing.T, newStorage func(t *testing.T) Opener) *rig {
	t.Helper()
	r := &rig{t: t, open: newStorage(t), newStorage: newStorage}
	r.s = r.mustOpen()
	// Registered after newStorage's cleanups, so it runs before them.
	t.Cleanup(func() {
		if r.s != nil {
			_ = r.s.Close()
		}
	})
	return r
}

func (r *rig) mustOpen() store.Store {
	r.t.Helper()
	s, err := r.open()
	if err != nil {
		r.t.Fatalf("open: %v", err)
	}
	if err := s.Ready(); err != nil {
		r.t.Fatalf("Ready after open: %v", err)
	}
	return s
}

// restart closes the store and opens its storage again.
func (r *rig) restart() {
	r.t.Helper()
	if err := r.s.Close(); err != nil {
		r.t.Fatalf("Close: %v", err)
	}
	r.s = nil
	r.s = r.mustOpen()
}

func (r *rig) max(resource string) uint64 {
	r.t.Helper()
	m, err := r.s.Max(resource)
	if err != nil {
		r.t.Fatalf("Max(%q): %v", resource, err)
	}
	return m
}

func (r *rig) raise(resource string, t uint64) uint64 {
	r.t.Helper()
	m, err := r.s.Raise(resource, t)
	if err != nil {
		r.t.Fatalf("Raise(%q, %d): %v", resource, t, err)
	}
	return m
}

func (r *rig) mark(resource string) {
	r.t.Helper()
	if err := r.s.MarkWritten(resource); err != nil {
		r.t.Fatalf("MarkWritten(%q): %v", resource, err)
	}
}

func (r *rig) atOpen(resource string) (uint64, bool) {
	r.t.Helper()
	m, found, err := r.s.MaxAtOpen(resource)
	if err != nil {
		r.t.Fatalf("MaxAtOpen(%q): %v", resource, err)
	}
	return m, found
}

func (r *rig) lease(name string) []byte {
	r.t.Helper()
	rec, err := r.s.Lease(name)
	if err != nil {
		r.t.Fatalf("Lease(%q): %v", name, err)
	}
	return rec
}

// setLease stores rec as name's lease record and raises its fence to raise.
func (r *rig) setLease(name string, rec []byte, raise uint64) {
	r.t.Helper()
	if err := r.s.UpdateLease(name, func([]byte, uint64) ([]byte, uint64, error) { return rec, raise, nil }); err != nil {
		r.t.Fatalf("UpdateLease(%q): %v", name, err)
	}
}

func (r *rig) list(prefix, after string, limit int) []fence.Record {
	r.t.Helper()
	page, err := r.s.List(prefix, after, limit)
	if err != nil {
		r.t.Fatalf("List(%q, %q, %d): %v", prefix, after, limit, err)
	}
	return page
}

func (r *rig) prefixes(after string, limit int) []fence.Record {
	r.t.Helper()
	page, err := r.s.Prefixes(after, limit)
	if err != nil {
		r.t.Fatalf("Prefixes(%q, %d): %v", after, limit, err)
	}
	return page
}

func (r *rig) leases() map[string]string {
	r.t.Helper()
	out := map[string]string{}
	var names []string
	err := r.s.EachLease(func(name string, rec []byte) error {
		names = append(names, name)
		out[name] = string(rec)
		return nil
	})
	if err != nil {
		r.t.Fatalf("EachLease: %v", err)
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			r.t.Fatalf("EachLease out of name order: %q then %q", names[i-1], names[i])
		}
	}
	return out
}
