package badger

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

func TestConcurrentRaise(t *testing.T) {
	cases := []struct {
		name           string
		keys           int
		writers        int
		perWriter      int
		readers        int
		coldReadsFirst bool
	}{
		{name: "one key", keys: 1, writers: 16, perWriter: 25, readers: 4},
		{name: "one key, cold loads racing raises", keys: 1, writers: 16, perWriter: 10, readers: 8, coldReadsFirst: true},
		{name: "eight keys", keys: 8, writers: 16, perWriter: 20, readers: 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openT(t, t.TempDir())
			keys := make([]string, tc.keys)
			for i := range keys {
				keys[i] = fmt.Sprintf("bkt/obj-%d", i)
			}
			// Writer w owns tokens w+1, w+1+writers, ...: all distinct.
			want := make(map[string]uint64)
			tokens := make([][]uint64, tc.writers)
			for w := range tokens {
				for i := range tc.perWriter {
					tok := uint64(w + 1 + i*tc.writers)
					tokens[w] = append(tokens[w], tok)
					k := keys[(w+i)%len(keys)]
					want[k] = max(want[k], tok)
				}
				// Shuffled so some raises are below the current max.
				rand.Shuffle(len(tokens[w]), func(i, j int) { tokens[w][i], tokens[w][j] = tokens[w][j], tokens[w][i] })
			}
			tokenKey := func(w int, tok uint64) string {
				i := (int(tok) - w - 1) / tc.writers
				return keys[(w+i)%len(keys)]
			}

			var done atomic.Bool
			start := make(chan struct{})
			var readers, writers sync.WaitGroup
			var reads atomic.Int64
			for r := range tc.readers {
				readers.Go(func() {
					<-start
					last := make(map[string]uint64)
					for n := 0; !done.Load() || n < 2; n++ {
						for _, k := range keys {
							m, err := s.Max(k)
							if err != nil {
								t.Errorf("reader %d Max(%s): %v", r, k, err)
								return
							}
							if m < last[k] {
								t.Errorf("reader %d saw Max(%s) go down: %d -> %d", r, k, last[k], m)
								return
							}
							last[k] = m
							reads.Add(1)
						}
					}
				})
			}
			if tc.coldReadsFirst {
				close(start) // readers' first loads race the writers
			}
			for w := range tc.writers {
				writers.Go(func() {
					if !tc.coldReadsFirst {
						<-start
					}
					last := make(map[string]uint64)
					for _, tok := range tokens[w] {
						k := tokenKey(w, tok)
						got, err := s.Raise(k, tok)
						if err != nil {
							t.Errorf("writer %d Raise(%s, %d): %v", w, k, tok, err)
							return
						}
						if got < tok {
							t.Errorf("Raise(%s, %d) = %d, below its token", k, tok, got)
						}
						if got < last[k] {
							t.Errorf("writer %d saw Raise(%s) result go down: %d -> %d", w, k, last[k], got)
						}
						last[k] = got
					}
				})
			}
			if !tc.coldReadsFirst {
				close(start)
			}
			writers.Wait()
			done.Store(true)
			readers.Wait()

			if tc.readers > 0 && reads.Load() == 0 {
				t.Fatal("readers made no observations")
			}
			for _, k := range keys {
				if got := mustMax(t, s, k); got != want[k] {
					t.Errorf("final Max(%s) = %d, want %d", k, got, want[k])
				}
			}
			// The durable value, not only the cache, must be the largest.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := openT(t, s.dir)
			for _, k := range keys {
				if got := mustMax(t, s2, k); got != want[k] {
					t.Errorf("after reopen Max(%s) = %d, want %d", k, got, want[k])
				}
			}
		})
	}
}

// Raises of many resources at once are committed in shared transactions
// (group commit), while lease updates write the same keys: every raise
// returns at least its token, every acknowledged maximum survives a reopen,
// and conflicting lease transactions only cause retries.
func TestGroupCommitRaisesAndLeases(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const (
		raisers   = 48
		perRaiser = 40
		resources = 30
	)
	var mu sync.Mutex
	acked := map[string]uint64{}
	ack := func(res string, m uint64) {
		mu.Lock()
		acked[res] = max(acked[res], m)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := range raisers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for range perRaiser {
				res := fmt.Sprintf("bkt/r%d", rng.IntN(resources))
				tok := rng.Uint64N(1 << 40)
				m, err := s.Raise(res, tok)
				if err != nil {
					t.Errorf("Raise(%s, %d): %v", res, tok, err)
					return
				}
				if m < tok {
					t.Errorf("Raise(%s, %d) = %d, below the token", res, tok, m)
				}
				ack(res, m)
			}
		}()
	}
	for w := range 4 { // lease transactions on the same fence keys
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				res := fmt.Sprintf("bkt/r%d", (w*7+i)%resources)
				err := s.UpdateLease(res, func(_ []byte, fenceMax uint64) ([]byte, uint64, error) {
					return []byte("holder"), fenceMax + 1, nil
				})
				if err != nil {
					t.Errorf("UpdateLease(%s): %v", res, err)
					return
				}
				m, _ := s.Max(res)
				ack(res, m)
			}
		}()
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for res, want := range acked {
		if got, err := s.Max(res); err != nil || got < want {
			t.Errorf("%s: %d after reopen (%v), acknowledged %d", res, got, err, want)
		}
	}
	if len(acked) != resources {
		t.Fatalf("%d resources raised, want %d", len(acked), resources)
	}
}
