package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdPut puts 8-byte values (a counter, big-endian, as fenceproxy stores a
// maximum) to n keys under prefix, round-robin, from c goroutines sharing one
// client, for d. Each goroutine waits for its Put's answer before the next,
// as each of wrk's connections waits for its PUT's: the same closed loop.
func etcdPut(endpoints []string, prefix string, c, n int, d time.Duration) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + "obj-" + strconv.Itoa(i)
	}
	// One Put before the clock starts: the connection is up.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err = cli.Put(ctx, keys[0], string(make([]byte, 8)))
	cancel()
	if err != nil {
		return fmt.Errorf("first put: %w", err)
	}
	var next atomic.Uint64
	var failed atomic.Int64
	var firstErr error
	var once sync.Once
	lat := make([][]time.Duration, c)
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for g := range c {
		wg.Go(func() {
			var v [8]byte
			for {
				t := time.Now()
				if !t.Before(end) {
					return
				}
				i := next.Add(1)
				binary.BigEndian.PutUint64(v[:], i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := cli.Put(ctx, keys[i%uint64(n)], string(v[:]))
				cancel()
				if err != nil {
					failed.Add(1)
					once.Do(func() { firstErr = err })
					continue
				}
				lat[g] = append(lat[g], time.Since(t))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) int64 {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(p*float64(len(all))))].Microseconds()
	}
	fmt.Printf("BENCH requests=%d duration_us=%d non2xx=0 connect=0 read=0 write=0 timeout=0 errors=%d p50_us=%d p99_us=%d\n",
		len(all), elapsed.Microseconds(), failed.Load(), pct(0.50), pct(0.99))
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, "load: first error:", firstErr)
	}
	return nil
}
