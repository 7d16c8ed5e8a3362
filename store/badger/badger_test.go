package badger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	badgerdb "github.com/dgraph-io/badger/v4"
)

// openT opens a store in dir and closes it when the test ends.
func openT(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open(%q): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustMax(t *testing.T, s *Store, r string) uint64 {
	t.Helper()
	m, err := s.Max(r)
	if err != nil {
		t.Fatalf("Max(%q): %v", r, err)
	}
	return m
}

// rawVersion returns the Badger version of resource's record, or 0 when absent;
// a write nobody should have made shows up as a new version.
func rawVersion(t *testing.T, s *Store, r string) uint64 {
	t.Helper()
	var v uint64
	err := s.db.View(func(txn *badgerdb.Txn) error {
		item, err := txn.Get(key(r))
		if errors.Is(err, badgerdb.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v = item.Version()
		return nil
	})
	if err != nil {
		t.Fatalf("raw read %q: %v", r, err)
	}
	return v
}

// Tokens above 2^63-1 fail with ErrRange, from Raise and from a lease's
// raise, and leave no record (the suite checks the same without the sentinel).
func TestErrRangeWritesNothing(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	for _, tok := range []uint64{math.MaxInt64 + 1, math.MaxUint64} {
		if _, err := s.Raise("r", tok); !errors.Is(err, ErrRange) {
			t.Fatalf("Raise(%d) err = %v, want ErrRange", tok, err)
		}
		err := s.UpdateLease("r", func([]byte, uint64) ([]byte, uint64, error) { return []byte("held"), tok, nil })
		if !errors.Is(err, ErrRange) {
			t.Fatalf("UpdateLease raising to %d: err = %v, want ErrRange", tok, err)
		}
	}
	if v := rawVersion(t, s, "r"); v != 0 {
		t.Fatalf("a record was written for an out-of-range token (version %d)", v)
	}
	if rec, err := s.Lease("r"); err != nil || rec != nil {
		t.Fatalf("a lease record was written beside an out-of-range raise: %q, %v", rec, err)
	}
}

func TestNoWriteWhenNotHigher(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	if _, err := s.Raise("k", 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopen so the cache is cold and Raise must go through the transaction.
	s = openT(t, dir)
	v0 := rawVersion(t, s, "k")
	if v0 == 0 {
		t.Fatal("record missing after reopen")
	}
	for _, tok := range []uint64{3, 5, 0} {
		got, err := s.Raise("k", tok)
		if err != nil || got != 5 {
			t.Fatalf("Raise(k, %d) = %d, %v; want 5, nil", tok, got, err)
		}
		if v := rawVersion(t, s, "k"); v != v0 {
			t.Fatalf("Raise(k, %d) wrote (version %d -> %d) though %d <= 5", tok, v0, v, tok)
		}
	}
	if got, err := s.Raise("k", 6); err != nil || got != 6 {
		t.Fatalf("Raise(k, 6) = %d, %v; want 6, nil", got, err)
	}
	if v := rawVersion(t, s, "k"); v <= v0 {
		t.Fatalf("Raise(k, 6) did not write (version %d -> %d)", v0, v)
	}
}

func TestPersistence(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	want := map[string]uint64{"": 11, "/": 12, "a/b/c": 13, "ünïcödé/☃": 14, strings.Repeat("x", 1000): 15}
	for i := range 300 {
		want[fmt.Sprintf("bkt/part-%d/obj", i)] = uint64(i*7 + 1)
	}
	for r, tok := range want {
		if _, err := s.Raise(r, tok); err != nil {
			t.Fatalf("Raise(%q): %v", r, err)
		}
		// A lower raise afterwards must not be what persists.
		if _, err := s.Raise(r, tok/2); err != nil {
			t.Fatalf("Raise(%q): %v", r, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s2 := openT(t, dir)
	for r, tok := range want {
		if got := mustMax(t, s2, r); got != tok {
			t.Errorf("after reopen Max(%.20q) = %d, want %d", r, got, tok)
		}
	}
	if got := s2.diskLoads.Load(); got != uint64(len(want)) {
		t.Errorf("after reopen %d disk loads for %d resources, want one each", got, len(want))
	}
	if got := mustMax(t, s2, "never"); got != 0 {
		t.Errorf("Max(never) = %d, want 0", got)
	}
}

func TestCacheAvoidsDisk(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)

	// A miss loads once, then is answered (as 0) from memory.
	before := s.diskLoads.Load()
	for range 100 {
		if got := mustMax(t, s, "unknown"); got != 0 {
			t.Fatalf("Max(unknown) = %d", got)
		}
	}
	if d := s.diskLoads.Load() - before; d != 1 {
		t.Fatalf("100 Max calls on a never-raised resource did %d disk loads, want 1", d)
	}

	if _, err := s.Raise("k", 7); err != nil {
		t.Fatal(err)
	}
	before = s.diskLoads.Load()
	for range 100 {
		if got := mustMax(t, s, "k"); got != 7 {
			t.Fatalf("Max(k) = %d, want 7", got)
		}
	}
	// A raise the cache already covers needs no transaction either.
	if got, err := s.Raise("k", 3); err != nil || got != 7 {
		t.Fatalf("Raise(k, 3) = %d, %v", got, err)
	}
	if d := s.diskLoads.Load() - before; d != 0 {
		t.Fatalf("cached Max/Raise did %d disk loads, want 0", d)
	}

	// Second, independent proof: change the record behind the cache's back.
	// Max keeps answering from memory; a fresh Store (cold cache) sees disk.
	if err := s.db.Update(func(txn *badgerdb.Txn) error { return txn.Set(key("k"), encode(1000)) }); err != nil {
		t.Fatal(err)
	}
	if got := mustMax(t, s, "k"); got != 7 {
		t.Fatalf("Max(k) = %d after a direct disk write; the cache should have answered 7", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := mustMax(t, openT(t, dir), "k"); got != 1000 {
		t.Fatalf("cold Max(k) = %d, want 1000 from disk", got)
	}
}

func TestCacheRaiseMonotonic(t *testing.T) {
	s := openT(t, t.TempDir())
	// A disk load that returns an older value after a raise was cached
	// must not lower the cache.
	for _, tc := range []struct{ in, want uint64 }{{10, 10}, {4, 10}, {0, 10}, {11, 11}} {
		if got := s.cache.raise("r", tc.in); got != tc.want {
			t.Fatalf("cache.raise(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
	if got := mustMax(t, s, "r"); got != 11 {
		t.Fatalf("Max = %d, want 11", got)
	}
}

func TestOpenCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "data")
	s := openT(t, dir)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("created dir mode = %o, want 700", perm)
	}
	if _, err := os.Stat(filepath.Join(dir, lockFileName)); err != nil {
		t.Errorf("lock file: %v", err)
	}
	if err := s.Ready(); err != nil {
		t.Errorf("Ready = %v", err)
	}
}

func TestOpenOnFileFails(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(f, Options{})
	if err == nil {
		_ = s.Close()
		t.Fatal("Open on a regular file succeeded")
	}
	if errors.Is(err, ErrLocked) {
		t.Fatalf("err = %v; a non-directory is not a lock conflict", err)
	}
}

func TestLockInProcess(t *testing.T) {
	dir := t.TempDir()
	s1, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, Options{})
	if err == nil {
		_ = s2.Close()
		t.Fatal("second Open on a held dir succeeded")
	}
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("err = %v, want ErrLocked", err)
	}
	for _, want := range []string{dir, "another fenceproxy process"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// The failed Open must not have disturbed the holder.
	if _, err := s1.Raise("k", 3); err != nil {
		t.Fatalf("holder Raise after refused Open: %v", err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	s3 := openT(t, dir)
	if got := mustMax(t, s3, "k"); got != 3 {
		t.Fatalf("Max after reopen = %d, want 3", got)
	}
}

func TestCloseSemantics(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready before Close = %v", err)
	}
	if _, err := s.Raise("cached", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Ready(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ready after Close = %v, want ErrClosed", err)
	}
	for _, r := range []string{"cached", "uncached"} {
		if _, err := s.Max(r); !errors.Is(err, ErrClosed) {
			t.Errorf("Max(%s) after Close err = %v, want ErrClosed", r, err)
		}
		if _, err := s.Raise(r, 10); !errors.Is(err, ErrClosed) {
			t.Errorf("Raise(%s) after Close err = %v, want ErrClosed", r, err)
		}
	}
	// ErrRange is a property of the argument and is reported first.
	if _, err := s.Raise("x", math.MaxUint64); !errors.Is(err, ErrRange) {
		t.Errorf("Raise(MaxUint64) after Close err = %v, want ErrRange", err)
	}
}

// Every call on a closed store fails with ErrClosed (MaxAtOpen with
// ErrSnapshotReleased), also where the cache could still answer and where
// only files are touched. Before the fix MarkWritten answered nil for a
// resource with a cached record, and TakeCleanStop took the mark.
func TestErrClosedAfterClose(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Raise("bkt/raised", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Max("bkt/zero"); err != nil { // cached as 0, then marked
		t.Fatal(err)
	}
	if err := s.MarkWritten("bkt/zero"); err != nil {
		t.Fatal(err)
	}
	if !s.cache.hasRecord("bkt/raised") || !s.cache.hasRecord("bkt/zero") {
		t.Fatal("the records are not cached: the test would not reach the cache")
	}
	if err := s.MarkCleanStop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	is := func(op string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s after Close: %v, want %v", op, err, want)
		}
	}
	for _, r := range []string{"bkt/raised", "bkt/zero", "never"} {
		is("MarkWritten("+r+")", s.MarkWritten(r), ErrClosed)
		_, err := s.Reset(r)
		is("Reset("+r+")", err, ErrClosed)
		_, _, err = s.MaxAtOpen(r)
		is("MaxAtOpen("+r+")", err, ErrSnapshotReleased)
	}
	is("UpdateLease", s.UpdateLease("l", func([]byte, uint64) ([]byte, uint64, error) { return nil, 1, nil }), ErrClosed)
	_, err = s.Lease("l")
	is("Lease", err, ErrClosed)
	is("EachLease", s.EachLease(func(string, []byte) error { return nil }), ErrClosed)
	_, err = s.List("", "", 10)
	is("List", err, ErrClosed)
	_, err = s.TakeCleanStop()
	is("TakeCleanStop", err, ErrClosed)
	is("MarkCleanStop", s.MarkCleanStop(), ErrClosed)
	if _, err := os.Stat(filepath.Join(dir, cleanStopFile)); err != nil {
		t.Fatalf("the clean-stop mark is gone after calls on a closed store: %v", err)
	}
}

func TestCloseConcurrentWithUse(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const workers = 8
	started := make(chan struct{}, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			r := fmt.Sprintf("r%d", w%3)
			for i := uint64(1); ; i++ {
				var err error
				if i%2 == 0 {
					_, err = s.Max(r)
				} else {
					_, err = s.Raise(r, i)
				}
				if i == 4 {
					started <- struct{}{}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range workers {
		<-started
	}
	var cwg sync.WaitGroup
	closeErrs := make([]error, 3)
	for i := range closeErrs {
		cwg.Go(func() { closeErrs[i] = s.Close() })
	}
	cwg.Wait()
	wg.Wait()
	close(errs)
	for i, err := range closeErrs {
		if err != nil {
			t.Errorf("concurrent Close #%d: %v", i, err)
		}
	}
	for err := range errs {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("in-flight call ended with %v, want ErrClosed", err)
		}
	}
	// Every Close has returned, so the lock must be free.
	s2 := openT(t, dir)
	if err := s2.Ready(); err != nil {
		t.Fatal(err)
	}
}

// recordHandler keeps every record it is given.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordHandler) snapshot() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), h.recs...)
}

func component(r slog.Record) string {
	var c string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "component" {
			c = a.Value.String()
		}
		return true
	})
	return c
}

func TestSlogAdapterLevels(t *testing.T) {
	cases := []struct {
		name string
		log  func(a slogAdapter)
		want slog.Level
	}{
		{"error", func(a slogAdapter) { a.Errorf("e %d\n", 1) }, slog.LevelError},
		{"warning", func(a slogAdapter) { a.Warningf("w %d\n", 1) }, slog.LevelWarn},
		{"info as debug", func(a slogAdapter) { a.Infof("i %d\n", 1) }, slog.LevelDebug},
		{"debug below debug", func(a slogAdapter) { a.Debugf("d %d\n", 1) }, slog.LevelDebug - 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &recordHandler{}
			tc.log(slogAdapter{slog.New(h)})
			recs := h.snapshot()
			if len(recs) != 1 {
				t.Fatalf("%d records, want 1", len(recs))
			}
			r := recs[0]
			if r.Level != tc.want {
				t.Errorf("level = %v, want %v", r.Level, tc.want)
			}
			if r.Message != tc.name[:1]+" 1" {
				t.Errorf("message = %q, want formatted without trailing newline", r.Message)
			}
			if c := component(r); c != "badger" {
				t.Errorf("component = %q, want badger", c)
			}
		})
	}
}

func TestBadgerLogsRouted(t *testing.T) {
	h := &recordHandler{}
	s, err := Open(t.TempDir(), Options{Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Raise("k", 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var info int
	for _, r := range h.snapshot() {
		if component(r) != "badger" {
			t.Errorf("record without component=badger: %q", r.Message)
		}
		if r.Level == slog.LevelDebug {
			info++
		}
	}
	if info == 0 {
		t.Fatal("no Badger INFO lines arrived as slog Debug records")
	}
}

func TestBadgerOptions(t *testing.T) {
	o := badgerOptions("/x", nil)
	if !o.SyncWrites {
		t.Error("SyncWrites must be true: raises are fsynced before Raise returns")
	}
	if !o.DetectConflicts {
		t.Error("DetectConflicts must be true: Raise relies on ErrConflict")
	}
	if o.Logger != nil {
		t.Error("nil slog logger must discard Badger logs (Badger's default prints to stderr)")
	}
	if _, ok := badgerOptions("/x", slog.Default()).Logger.(slogAdapter); !ok {
		t.Error("slog logger not wired to Badger")
	}
}

// Removing DATA_DIR under a running store makes raises fail closed and the
// store unready, instead of writing maxima that vanish on restart.
func TestDirRemovedFailsClosed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Raise("r", 10); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Raise("r", 20); !errors.Is(err, ErrDirGone) {
		t.Fatalf("Raise after removal: %v, want ErrDirGone", err)
	}
	if err := s.Ready(); !errors.Is(err, ErrDirGone) {
		t.Fatalf("Ready after removal: %v, want ErrDirGone", err)
	}
	// Known maxima still answer (from memory), and a covered raise needs no disk.
	if m, err := s.Max("r"); err != nil || m != 10 {
		t.Fatalf("Max = %d, %v; want 10", m, err)
	}
	if m, err := s.Raise("r", 10); err != nil || m != 10 {
		t.Fatalf("covered Raise = %d, %v; want 10", m, err)
	}
	// A second store can take the new directory at the same path; the first
	// still refuses raises.
	s2, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open of the recreated path: %v", err)
	}
	defer s2.Close()
	if _, err := s.Raise("r", 30); !errors.Is(err, ErrDirGone) {
		t.Fatalf("Raise by the first store after a second took the path: %v", err)
	}
}

// A SIGKILL between Badger creating a memtable file and sizing it leaves an
// empty .mem file, which makes badgerdb.Open fail once with "Create a new file"
// (dgraph-io/badger#2207); the file never held data, and Open retries.
func TestOpenAfterKillLeftEmptyMemtable(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Raise("bkt/k", 9); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "00099.mem"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open with an empty memtable file: %v", err)
	}
	defer s.Close()
	if m, err := s.Max("bkt/k"); err != nil || m != 9 {
		t.Fatalf("Max after reopen: %d, %v; want 9", m, err)
	}
}
