package badger

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	badgerdb "github.com/dgraph-io/badger/v4"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/store/internal/keys"
)

// rawUpdate runs fn on the Badger database in dir, opened without the
// store, as a directory written by an earlier version is.
func rawUpdate(t *testing.T, dir string, fn func(db *badgerdb.DB) error) {
	t.Helper()
	db, err := badgerdb.Open(badgerOptions(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(db); err != nil {
		_ = db.Close()
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// marker returns the value of the index's marker, nil when absent.
func marker(t *testing.T, s *Store) []byte {
	t.Helper()
	v, err := s.record(prefixIndexMarker, "")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func prefixesAll(t *testing.T, s *Store) []fence.Record {
	t.Helper()
	got, err := s.Prefixes("", 1<<20)
	if err != nil {
		t.Fatalf("Prefixes: %v", err)
	}
	return got
}

// A directory written before the index (fence records, no index entries,
// no marker) gets its index built at open: every prefix fence with a
// maximum above 0, stale entries dropped, then the marker. Once marked, an
// open reads the index as it is and builds nothing.
func TestPrefixIndexBuiltAtOpen(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	for res, tok := range map[string]uint64{"a/": 3, "b/c/": 4, "x": 5, "x/y": 6, "ü/": 8} {
		if _, err := s.Raise(res, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.UpdateLease("held/", func([]byte, uint64) ([]byte, uint64, error) { return []byte("rec"), 7, nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkWritten("marked/"); err != nil {
		t.Fatal(err)
	}
	if string(marker(t, s)) != keys.PrefixIndexVersion {
		t.Fatalf("marker of a new directory = %q, want %q", marker(t, s), keys.PrefixIndexVersion)
	}
	want := []fence.Record{{Resource: "a/", Token: 3}, {Resource: "b/c/", Token: 4}, {Resource: "held/", Token: 7}, {Resource: "ü/", Token: 8}}
	if got := prefixesAll(t, s); !slices.Equal(got, want) {
		t.Fatalf("Prefixes = %v, want %v", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// As an earlier version left it: no index, no marker; and entries
	// that are wrong (a stale maximum, one with no fence).
	rawUpdate(t, dir, func(db *badgerdb.DB) error {
		return db.Update(func(txn *badgerdb.Txn) error {
			for _, rec := range want {
				if err := txn.Delete(prefixKey(rec.Resource)); err != nil {
					return err
				}
			}
			if err := txn.Set(prefixKey("a/"), encode(1)); err != nil {
				return err
			}
			if err := txn.Set(prefixKey("stale/"), encode(9)); err != nil {
				return err
			}
			return txn.Delete([]byte(prefixIndexMarker))
		})
	})
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := prefixesAll(t, s); !slices.Equal(got, want) {
		t.Errorf("Prefixes after the build at open = %v, want %v", got, want)
	}
	if string(marker(t, s)) != keys.PrefixIndexVersion {
		t.Errorf("marker after the build = %q, want %q", marker(t, s), keys.PrefixIndexVersion)
	}
	if s.EmptyAtOpen() {
		t.Errorf("EmptyAtOpen of a directory with fences = true")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Marked: an entry written beside the store stays, no scan undoes it.
	rawUpdate(t, dir, func(db *badgerdb.DB) error {
		return db.Update(func(txn *badgerdb.Txn) error { return txn.Set(prefixKey("beside/"), encode(2)) })
	})
	s = openT(t, dir)
	want = append(want, fence.Record{Resource: "beside/", Token: 2})
	slices.SortFunc(want, func(x, y fence.Record) int { return strings.Compare(x.Resource, y.Resource) })
	if got := prefixesAll(t, s); !slices.Equal(got, want) {
		t.Errorf("Prefixes of a marked directory = %v, want %v (built again)", got, want)
	}
}

// The build writes more entries than one Badger transaction holds, and
// reads every fence record of an earlier version's directory.
func TestPrefixIndexBuildLarge(t *testing.T) {
	dir := t.TempDir()
	const n = 30000
	rawUpdate(t, dir, func(db *badgerdb.DB) error {
		wb := db.NewWriteBatch()
		defer wb.Cancel()
		for i := range n {
			res := fmt.Sprintf("bkt/%06d", i)
			if i%3 != 0 {
				res += "/" // two in three are prefix fences
			}
			if err := wb.Set(key(res), encode(uint64(i))); err != nil { // i = 0: a maximum of 0
				return err
			}
		}
		return wb.Flush()
	})
	s := openT(t, dir)
	var got []fence.Record
	after := ""
	for {
		page, err := s.Prefixes(after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Resource
	}
	if want := n / 3 * 2; len(got) != want {
		t.Fatalf("Prefixes listed %d prefix fences, want %d", len(got), want)
	}
	for _, rec := range got {
		var i int
		if _, err := fmt.Sscanf(rec.Resource, "bkt/%06d/", &i); err != nil || uint64(i) != rec.Token || i%3 == 0 {
			t.Fatalf("Prefixes listed %+v", rec)
		}
	}
}
