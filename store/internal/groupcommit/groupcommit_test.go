package groupcommit

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

// Raises queued while a batch commits go together in the next one, within
// take's bound, and each raiser gets its own answer.
func TestBatches(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	first := true
	g := New(Upto(3), func(batch []*Request) {
		mu.Lock()
		sizes = append(sizes, len(batch))
		wait := first
		first = false
		mu.Unlock()
		if wait {
			<-release
		}
		for _, r := range batch {
			if r.Resource == "bad" {
				r.Err = errors.New("refused")
				continue
			}
			r.Result = r.Token + 1
		}
	})
	var wg sync.WaitGroup
	wg.Go(func() {
		if m, err := g.Raise("lead", 1); m != 2 || err != nil {
			t.Errorf("Raise(lead, 1) = %d, %v; want 2", m, err)
		}
	})
	for g.Batches() < 1 { // the leader is committing
	}
	for i := range 5 {
		wg.Go(func() {
			m, err := g.Raise(fmt.Sprint(i), uint64(10*i))
			if m != uint64(10*i)+1 || err != nil {
				t.Errorf("Raise(%d) = %d, %v", i, m, err)
			}
		})
	}
	wg.Go(func() {
		if _, err := g.Raise("bad", 1); err == nil {
			t.Errorf("Raise(bad) succeeded")
		}
	})
	for {
		g.mu.Lock()
		n := len(g.queue)
		g.mu.Unlock()
		if n == 6 {
			break
		}
	}
	close(release)
	wg.Wait()
	if want := []int{1, 3, 3}; fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Errorf("batch sizes %v, want %v", sizes, want)
	}
	if g.Batches() != 3 {
		t.Errorf("Batches() = %d, want 3", g.Batches())
	}
}

// A take of 0 still commits the head of the queue.
func TestTakeAtLeastOne(t *testing.T) {
	g := New(func([]*Request) int { return 0 }, func(batch []*Request) {
		for _, r := range batch {
			r.Result = r.Token
		}
	})
	if m, err := g.Raise("r", 7); m != 7 || err != nil {
		t.Fatalf("Raise = %d, %v; want 7", m, err)
	}
}
