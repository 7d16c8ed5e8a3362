package badger_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	badgerdb "github.com/dgraph-io/badger/v4"

	"github.com/fenceproxy/fenceproxy/store/badger"
)

// TestTinyCacheMixedOpsNeverLowerMax: with four cache entries and sixteen
// resources every operation evicts. Raise, lease raises (UpdateLease),
// MarkWritten and Max run side by side; Max must never answer below a
// raise that has returned, and Raise never below its own token.
func TestTinyCacheMixedOpsNeverLowerMax(t *testing.T) {
	s, err := badger.Open(t.TempDir(), badger.Options{CacheBytes: 4 * 200})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const resources = 16
	var next, acked [resources]atomic.Uint64
	name := func(i int) string { return fmt.Sprintf("bkt/r-%d", i) }
	ack := func(i int, m uint64) {
		for a := acked[i].Load(); m > a && !acked[i].CompareAndSwap(a, m); a = acked[i].Load() {
		}
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 150 {
				i := rng.IntN(resources)
				switch rng.IntN(4) {
				case 0: // raise
					tok := next[i].Add(1)
					m, err := s.Raise(name(i), tok)
					if err != nil {
						t.Errorf("Raise: %v", err)
						return
					}
					if m < tok {
						t.Errorf("Raise(%s, %d) = %d", name(i), tok, m)
					}
					ack(i, m)
				case 1: // lease raise
					tok := next[i].Add(1)
					err := s.UpdateLease(name(i), func(_ []byte, fenceMax uint64) ([]byte, uint64, error) {
						return []byte("lease"), max(fenceMax, tok), nil
					})
					if err != nil {
						t.Errorf("UpdateLease: %v", err)
						return
					}
					ack(i, tok)
				case 2:
					// A conflict with a concurrent raise is the bug that
					// TestAttackMarkWrittenConflict pins; this test checks maxima.
					if err := s.MarkWritten(name(i)); err != nil && !errors.Is(err, badgerdb.ErrConflict) {
						t.Errorf("MarkWritten: %v", err)
						return
					}
				default:
					before := acked[i].Load()
					m, err := s.Max(name(i))
					if err != nil {
						t.Errorf("Max: %v", err)
						return
					}
					if m < before {
						t.Errorf("Max(%s) = %d, below the acknowledged raise %d", name(i), m, before)
					}
				}
			}
		})
	}
	wg.Wait()
	for i := range resources {
		if m, _ := s.Max(name(i)); m < acked[i].Load() {
			t.Errorf("final Max(%s) = %d, below %d", name(i), m, acked[i].Load())
		}
	}
}

// TestTinyCacheMarkWrittenSurvivesEviction: a token-0 write's record
// (MarkWritten) is durable whatever the cache evicted, so after a restart
// the resource had a record at open (it waits the start-up grace), and a
// raise after a mark that the cache evicted is kept too.
func TestTinyCacheMarkWrittenSurvivesEviction(t *testing.T) {
	dir := t.TempDir()
	s, err := badger.Open(dir, badger.Options{CacheBytes: 4 * 200})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		if err := s.MarkWritten(fmt.Sprintf("bkt/zero-%d", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Max(fmt.Sprintf("bkt/other-%d", i)); err != nil { // evicts
			t.Fatal(err)
		}
	}
	for i := range n {
		if i%2 == 0 {
			if _, err := s.Raise(fmt.Sprintf("bkt/zero-%d", i), uint64(i+1)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.MarkWritten(fmt.Sprintf("bkt/zero-%d", i)); err != nil { // evicted mark: read again
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = badger.Open(dir, badger.Options{CacheBytes: 4 * 200})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range n {
		r := fmt.Sprintf("bkt/zero-%d", i)
		m, found, err := s.MaxAtOpen(r)
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(0)
		if i%2 == 0 {
			want = uint64(i + 1)
		}
		if !found || m != want {
			t.Errorf("MaxAtOpen(%s) = %d, %v; want %d, true", r, m, found, want)
		}
		if got, _ := s.Max(r); got != want {
			t.Errorf("Max(%s) = %d, want %d", r, got, want)
		}
		if _, found, _ := s.MaxAtOpen(fmt.Sprintf("bkt/other-%d", i)); found {
			t.Errorf("a resource only read (Max) has a record at open")
		}
	}
}

// TestTinyCacheResetThenRaise: Reset and raises race on a resource whose
// entry is constantly evicted. Reset is the one way down, so the check is
// the other direction: once a Reset has returned, a raise that returned
// after it is never lost, and Max never answers above the largest token ever
// raised (no value from nowhere).
func TestTinyCacheResetThenRaise(t *testing.T) {
	s, err := badger.Open(t.TempDir(), badger.Options{CacheBytes: 4 * 200})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const r = "bkt/reset"
	var tok atomic.Uint64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for range 60 {
				if _, err := s.Max(fmt.Sprintf("bkt/noise-%d-%d", w, tok.Load()%8)); err != nil { // evicts
					t.Errorf("Max: %v", err)
				}
				if _, err := s.Raise(r, tok.Add(1)); err != nil {
					t.Errorf("Raise: %v", err)
				}
			}
		})
	}
	wg.Go(func() {
		for range 30 {
			if _, err := s.Reset(r); err != nil && !strings.Contains(err.Error(), "Conflict") {
				t.Errorf("Reset: %v", err)
			}
		}
	})
	wg.Wait()
	// Quiescent: a raise now must be what Max answers.
	final := tok.Add(1)
	if m, err := s.Raise(r, final); err != nil || m != final {
		t.Fatalf("Raise after the race = %d, %v; want %d", m, err, final)
	}
	if m, _ := s.Max(r); m != final {
		t.Fatalf("Max = %d, want %d", m, final)
	}
	if _, err := s.Reset(r); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Raise(r, 3); err != nil || m != 3 {
		t.Fatalf("Raise(3) after Reset = %d, %v; want 3", m, err)
	}
	if m, _ := s.Max(r); m != 3 {
		t.Fatalf("Max after Reset and Raise(3) = %d, want 3", m)
	}
}

// TestAttackMarkWrittenConflict: two token-0 writes on a resource without a
// record (or a token-0 write beside a raise of it) run MarkWritten's
// read-then-set transactions side by side; Badger aborts one with
// ErrConflict, and MarkWritten returns it unretried, so the proxy answers a
// valid token-0 write 503 (store unavailable). Raise and UpdateLease retry
// conflicts; MarkWritten should too.
func TestAttackMarkWrittenConflict(t *testing.T) {
	s, err := badger.Open(t.TempDir(), badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var failed atomic.Int64
	var first error
	var once sync.Once
	for i := range 300 {
		r := fmt.Sprintf("bkt/fresh-%d", i)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				<-start
				if err := s.MarkWritten(r); err != nil {
					failed.Add(1)
					once.Do(func() { first = err })
				}
			})
		}
		close(start)
		wg.Wait()
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of 1200 concurrent MarkWritten calls on 300 fresh resources failed; first: %v", n, first)
	}
}
