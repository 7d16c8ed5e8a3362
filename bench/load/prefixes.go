package main

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/fenceproxy/fenceproxy/store/badger"
)

// seedPrefixes writes n prefix fences bkt/p0/ .. bkt/p<n-1>/ at token into
// a new Badger data directory, and marks a clean stop, so a fenceproxy
// started on a copy waits out no start-up grace.
func seedPrefixes(dir string, n int, token string) error {
	t, err := strconv.ParseUint(token, 10, 64)
	if err != nil {
		return fmt.Errorf("token %q: %w", token, err)
	}
	s, err := badger.Open(dir, badger.Options{})
	if err != nil {
		return err
	}
	// Concurrent raises share a sync (the store's group commit).
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	next := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				if _, err := s.Raise(fmt.Sprintf("bkt/p%d/", i), t); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := first.Load(); err != nil {
		s.Close()
		return *err
	}
	if err := s.MarkCleanStop(); err != nil {
		s.Close()
		return err
	}
	return s.Close()
}
