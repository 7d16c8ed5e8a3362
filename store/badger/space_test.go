package badger

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fenceproxy/fenceproxy/config"
)

// fakeDisk is an injected statfs: the free space is whatever the test sets
// (or the real free space minus a pretend filler file), or an error.
type fakeDisk struct {
	free   atomic.Uint64
	filler atomic.Uint64 // with real: bytes taken off the real free space
	real   bool
	fail   atomic.Pointer[error]
	calls  atomic.Int64
}

func (d *fakeDisk) statfs(dir string) (uint64, error) {
	d.calls.Add(1)
	if p := d.fail.Load(); p != nil {
		return 0, *p
	}
	if !d.real {
		return d.free.Load(), nil
	}
	free, err := freeSpace(dir)
	if err != nil {
		return 0, err
	}
	return free - min(free, d.filler.Load()), nil
}

// openSpace opens a store in dir with reserve min over disk, logging to h.
func openSpace(t *testing.T, dir string, min uint64, disk *fakeDisk, h *recordHandler) *Store {
	t.Helper()
	opts := Options{MinFreeSpace: min}
	if disk != nil {
		opts.statfs = disk.statfs
	}
	if h != nil {
		opts.Logger = slog.New(h)
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%q): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// spaceLogs counts the store's low-space records (Badger's own are left out).
func spaceLogs(h *recordHandler) (entered, left int) {
	for _, r := range h.snapshot() {
		switch {
		case strings.HasPrefix(r.Message, "low on disk space"):
			entered++
		case strings.HasPrefix(r.Message, "disk space back above the reserve"):
			left++
		}
	}
	return entered, left
}

// Every write path refuses below the reserve before writing anything, names
// the free and required bytes, and works again once space returns.
func TestSpaceReserveRefusesWrites(t *testing.T) {
	const reserve = 64 << 20
	ops := []struct {
		name    string
		op      func(s *Store) error
		written func(t *testing.T, s *Store, v0 uint64) bool // whether op left a trace; v0: r's version before
	}{
		{"raise", func(s *Store) error {
			_, err := s.Raise("r", 20)
			return err
		}, func(t *testing.T, s *Store, v0 uint64) bool {
			return mustMax(t, s, "r") != 10 || rawVersion(t, s, "r") != v0
		}},
		{"lease with fence raise", func(s *Store) error {
			return s.UpdateLease("r", func([]byte, uint64) ([]byte, uint64, error) { return []byte("rec"), 20, nil })
		}, func(t *testing.T, s *Store, v0 uint64) bool {
			rec, err := s.Lease("r")
			if err != nil {
				t.Fatal(err)
			}
			return rec != nil || mustMax(t, s, "r") != 10 || rawVersion(t, s, "r") != v0
		}},
		{"lease renew without raise", func(s *Store) error {
			return s.UpdateLease("r", func([]byte, uint64) ([]byte, uint64, error) { return []byte("rec"), 0, nil })
		}, func(t *testing.T, s *Store, _ uint64) bool {
			rec, err := s.Lease("r")
			if err != nil {
				t.Fatal(err)
			}
			return rec != nil
		}},
		{"ready", func(s *Store) error { return s.Ready() }, func(*testing.T, *Store, uint64) bool { return false }},
	}
	for _, tc := range ops {
		t.Run(tc.name, func(t *testing.T) {
			disk := &fakeDisk{}
			disk.free.Store(1 << 40)
			s := openSpace(t, t.TempDir(), reserve, disk, nil)
			if _, err := s.Raise("r", 10); err != nil {
				t.Fatal(err)
			}
			v0 := rawVersion(t, s, "r")
			free := uint64(reserve - 1)
			disk.free.Store(free)
			err := tc.op(s)
			if !errors.Is(err, ErrNoSpace) {
				t.Fatalf("below the reserve: %v, want ErrNoSpace", err)
			}
			for _, n := range []uint64{free, reserve} {
				if !strings.Contains(err.Error(), strconv.FormatUint(n, 10)) {
					t.Errorf("error %q does not name %d bytes", err, n)
				}
			}
			if tc.written(t, s, v0) {
				t.Fatal("a refused call wrote to the store")
			}
			// Known maxima still answer, and a raise they cover needs no write.
			if m, err := s.Raise("r", 10); err != nil || m != 10 {
				t.Fatalf("covered raise while low: %d, %v; want 10, nil", m, err)
			}
			disk.free.Store(reserve) // exactly the reserve is enough
			if err := tc.op(s); err != nil {
				t.Fatalf("after space returned: %v", err)
			}
		})
	}
}

// One line when the store enters the low-space state and one when it leaves
// it, however many calls were refused in between; a later episode logs again.
func TestSpaceLogsTransitionsOnce(t *testing.T) {
	disk := &fakeDisk{}
	disk.free.Store(1 << 40)
	h := &recordHandler{}
	s := openSpace(t, t.TempDir(), 1<<30, disk, h)
	want := func(entered, left int) {
		t.Helper()
		if e, l := spaceLogs(h); e != entered || l != left {
			t.Fatalf("low-space log lines: %d entering, %d leaving; want %d, %d", e, l, entered, left)
		}
	}
	want(0, 0)
	for episode := 1; episode <= 2; episode++ {
		disk.free.Store(1 << 20)
		for i := range 20 {
			if _, err := s.Raise("r", uint64(episode*100+i)); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("raise: %v, want ErrNoSpace", err)
			}
			if err := s.Ready(); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("Ready: %v, want ErrNoSpace", err)
			}
		}
		want(episode, episode-1)
		disk.free.Store(2 << 30)
		for range 5 {
			if err := s.Ready(); err != nil {
				t.Fatalf("Ready after space returned: %v", err)
			}
		}
		want(episode, episode)
	}
	for _, r := range h.snapshot() {
		if strings.HasPrefix(r.Message, "low on disk space") && r.Level != slog.LevelWarn {
			t.Errorf("entering line at %v, want Warn", r.Level)
		}
	}
}

// A store opened below its reserve says so at once, before any request.
func TestSpaceLowAtOpenLogged(t *testing.T) {
	disk := &fakeDisk{}
	disk.free.Store(512 << 20) // above Badger's own headroom, below the reserve
	h := &recordHandler{}
	s := openSpace(t, t.TempDir(), 1<<30, disk, h)
	if e, _ := spaceLogs(h); e != 1 {
		t.Fatalf("%d low-space lines after Open, want 1", e)
	}
	if err := s.Ready(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Ready: %v, want ErrNoSpace", err)
	}
}

// A failing statfs fails closed: nothing is written, and it is not mistaken
// for a full disk.
func TestSpaceStatfsErrorFailsClosed(t *testing.T) {
	disk := &fakeDisk{}
	disk.free.Store(1 << 40)
	s := openSpace(t, t.TempDir(), 1<<20, disk, nil)
	boom := errors.New("statfs: input/output error")
	disk.fail.Store(&boom)
	if _, err := s.Raise("r", 5); !errors.Is(err, boom) || errors.Is(err, ErrNoSpace) {
		t.Fatalf("raise: %v, want the statfs error", err)
	}
	if err := s.Ready(); !errors.Is(err, boom) {
		t.Fatalf("Ready: %v, want the statfs error", err)
	}
	disk.fail.Store(nil)
	if m := mustMax(t, s, "r"); m != 0 {
		t.Fatalf("max %d after a refused raise, want 0", m)
	}
	if _, err := s.Raise("r", 5); err != nil {
		t.Fatal(err)
	}
}

// MinFreeSpace 0 turns the check off: statfs is never called.
func TestSpaceZeroReserveNoCheck(t *testing.T) {
	disk := &fakeDisk{} // 0 bytes free
	s := openSpace(t, t.TempDir(), 0, disk, nil)
	if _, err := s.Raise("r", 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	if n := disk.calls.Load(); n != 0 {
		t.Fatalf("statfs called %d times with the check off", n)
	}
}

// The real statfs on the test's own file system: a reserve above the real
// free space refuses, and nothing refused is found after reopening.
func TestSpaceRealStatfs(t *testing.T) {
	dir := t.TempDir()
	free, err := freeSpace(dir)
	if err != nil {
		t.Fatal(err)
	}
	if free == 0 {
		t.Fatalf("statfs reports 0 bytes free in %s", dir)
	}
	s, err := Open(dir, Options{MinFreeSpace: free + 1<<30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Raise("r", 7); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("raise with a reserve above the real free space: %v, want ErrNoSpace", err)
	}
	if err := s.Ready(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Ready: %v, want ErrNoSpace", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openSpace(t, dir, 1<<20, nil, nil)
	if m := mustMax(t, s, "r"); m != 0 {
		t.Fatalf("max %d after reopening, want 0: the refused raise was written", m)
	}
	if m, err := s.Raise("r", 3); err != nil || m != 3 {
		t.Fatalf("raise after reopening with a small reserve: %d, %v", m, err)
	}
}

// The real free space less a pretend filler file: the same behaviour as a
// filled disk, where mounting a small file system is not possible. Space
// returns when the filler is "deleted", with no reopen.
func TestSpaceFillerOnRealStatfs(t *testing.T) {
	dir := t.TempDir()
	disk := &fakeDisk{real: true}
	const reserve = 128 << 20
	s := openSpace(t, dir, reserve, disk, nil)
	if _, err := s.Raise("r", 1); err != nil {
		t.Fatal(err)
	}
	free, err := freeSpace(dir)
	if err != nil {
		t.Fatal(err)
	}
	disk.filler.Store(free - reserve/2) // leaves half the reserve
	if _, err := s.Raise("r", 2); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("raise with the filler: %v, want ErrNoSpace", err)
	}
	disk.filler.Store(0)
	if m, err := s.Raise("r", 2); err != nil || m != 2 {
		t.Fatalf("raise after the filler went: %d, %v", m, err)
	}
}

// Raises racing with the disk going low and back: every raise that returned
// nil is durable, and no refused raise left anything behind (checked after
// reopening, so from disk).
func TestSpaceConcurrentRaisesDuringFault(t *testing.T) {
	dir := t.TempDir()
	disk := &fakeDisk{}
	disk.free.Store(1 << 40)
	s, err := Open(dir, Options{MinFreeSpace: 1 << 30, statfs: disk.statfs})
	if err != nil {
		t.Fatal(err)
	}
	const workers, raises, resources = 8, 60, 4
	var mu sync.Mutex
	durable := map[string]uint64{} // largest token a raise returned nil for
	var refused atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range raises {
				if w == 0 && i%10 == 0 { // flip the disk every few raises
					if (i/10)%2 == 0 {
						disk.free.Store(1 << 20)
					} else {
						disk.free.Store(1 << 40)
					}
				}
				r := fmt.Sprintf("r%d", (w+i)%resources)
				tok := uint64(i*workers + w + 1)
				m, err := s.Raise(r, tok)
				switch {
				case errors.Is(err, ErrNoSpace):
					refused.Add(1)
				case err != nil:
					t.Errorf("raise %s to %d: %v", r, tok, err)
				default:
					mu.Lock()
					durable[r] = max(durable[r], m)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if refused.Load() == 0 || len(durable) == 0 {
		t.Fatalf("%d refused and %d resources raised: the fault did not interleave", refused.Load(), len(durable))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openSpace(t, dir, 0, nil, nil)
	for i := range resources {
		r := fmt.Sprintf("r%d", i)
		if got := mustMax(t, s, r); got != durable[r] {
			t.Errorf("%s: %d on disk, want %d (the largest raise that succeeded)", r, got, durable[r])
		}
	}
}

// fenceproxy's default reserve covers what Badger may still write after
// raises stop, with a margin of two; a smaller reserve is warned about.
func TestDefaultReserveCoversBadger(t *testing.T) {
	cfg, _, err := config.Parse(map[string]string{
		"FENCEPROXY_UPSTREAM": "http://127.0.0.1:1", "FENCEPROXY_DATA_DIR": t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	o := badgerOptions(t.TempDir(), nil)
	need := badgerHeadroom(o)
	if need < uint64(o.NumMemtables)*uint64(o.MemTableSize) {
		t.Fatalf("headroom %d does not even cover flushing the memtables", need)
	}
	if def := uint64(cfg.MinFreeSpace); def < 2*need {
		t.Fatalf("default FENCEPROXY_MIN_FREE_SPACE %d is below twice Badger's headroom %d", def, need)
	}
	for _, tc := range []struct {
		reserve uint64
		warned  bool
	}{{uint64(cfg.MinFreeSpace), false}, {need - 1, true}, {0, false}} {
		t.Run(strconv.FormatUint(tc.reserve, 10), func(t *testing.T) {
			h := &recordHandler{}
			openSpace(t, t.TempDir(), tc.reserve, nil, h)
			warned := false
			for _, r := range h.snapshot() {
				warned = warned || strings.Contains(r.Message, "smaller than what Badger may still write")
			}
			if warned != tc.warned {
				t.Fatalf("warned=%v, want %v", warned, tc.warned)
			}
		})
	}
}

// Open refuses, with ErrNoSpace and before Badger writes anything, a file
// system with less free space than Badger may write on its own; with more
// than that but less than the reserve it opens, and raises fail.
func TestOpenRefusesNearlyFullDisk(t *testing.T) {
	need := badgerHeadroom(badgerOptions(t.TempDir(), nil))
	for _, tc := range []struct {
		name      string
		free      uint64
		opens     bool
		raiseFail bool
	}{
		{"below Badger's own headroom", need - 1, false, false},
		{"between headroom and reserve", need + 1, true, true},
		{"above the reserve", 4 * need, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			free := tc.free
			s, err := Open(dir, Options{MinFreeSpace: 2 * need, statfs: func(string) (uint64, error) { return free, nil }})
			if !tc.opens {
				if !errors.Is(err, ErrNoSpace) {
					t.Fatalf("Open: %v, want ErrNoSpace", err)
				}
				if entries, _ := os.ReadDir(dir); len(entries) > 1 { // the lock file only
					t.Fatalf("Open wrote %d entries before refusing", len(entries))
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			_, err = s.Raise("bkt/k", 1)
			if got := errors.Is(err, ErrNoSpace); got != tc.raiseFail {
				t.Fatalf("Raise: %v, want ErrNoSpace %v", err, tc.raiseFail)
			}
		})
	}
}
