package badger

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	badgerdb "github.com/dgraph-io/badger/v4"
)

func openBench(b *testing.B) *Store {
	b.Helper()
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkMaxCached is the hot path of every admitted write: a maximum
// already in memory.
func BenchmarkMaxCached(b *testing.B) {
	s := openBench(b)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("bkt/obj-%d", i)
		if _, err := s.Raise(keys[i], 7); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := s.Max(keys[i%len(keys)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkRaise is one durable raise at a time: one fsync each.
func BenchmarkRaise(b *testing.B) {
	s := openBench(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Raise(fmt.Sprintf("bkt/obj-%d", i%1000), uint64(i+1)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRaiseParallel is many takeovers at once on different resources:
// Badger's writer batches concurrent commits, so they share fsyncs. Compare
// its ns/op with BenchmarkRaise's in the same run.
func BenchmarkRaiseParallel(b *testing.B) {
	s := openBench(b)
	var n atomic.Uint64
	b.ReportAllocs()
	b.SetParallelism(32) // 32 goroutines per GOMAXPROCS, like concurrent connections
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			if _, err := s.Raise(fmt.Sprintf("bkt/obj-%d", i%1000), i); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFillDistinct writes fillResources distinct resources once each,
// token 1, from many goroutines the way the proxy admits first writes (Max,
// then Raise), and reports the memory that stays: heap in use after a GC
// (heap-inuse-MiB) and the process's peak RSS (VmHWM, peak-rss-MiB). The
// per-op time is one whole fill. Run it alone: -run '^$' -benchtime 1x.
func BenchmarkFillDistinct(b *testing.B) {
	const fillResources = 1_000_000
	const workers = 64
	s := openBench(b)
	// The proxy drops the start-up view after its grace (seconds); held,
	// it would keep every committed transaction's conflict keys.
	s.ReleaseOpenSnapshot()
	var round int
	for b.Loop() {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= fillResources {
						return
					}
					r := fmt.Sprintf("bkt/r%d/obj-%d", round, i)
					if _, err := s.Max(r); err != nil {
						b.Error(err)
						return
					}
					if _, err := s.Raise(r, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		round++
	}
	b.StopTimer()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
	b.ReportMetric(float64(ms.Sys)/(1<<20), "go-sys-MiB")
	if hwm, ok := vmHWM(); ok {
		b.ReportMetric(float64(hwm)/(1<<20), "peak-rss-MiB")
	}
}

// vmHWM returns this process's peak resident set size in bytes, from
// /proc/self/status (Linux only).
func vmHWM() (uint64, bool) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// BenchmarkLeasesFromPage reads a page of 100 lease records at a position
// among 100,000: the iterator seeks, so the cost does not grow with the
// position (issue 29: a page after 90,000 took 144 ms when List walked
// from the first record).
func BenchmarkLeasesFromPage(b *testing.B) {
	s := openBench(b)
	const n = 100_000
	name := func(i int) string { return fmt.Sprintf("atk/%07d", i) }
	err := s.withDB(func(db *badgerdb.DB) error {
		wb := db.NewWriteBatch()
		defer wb.Cancel()
		for i := range n {
			if err := wb.Set([]byte(leasePrefix+name(i)), []byte(`{"holder":"atk","token":1,"ttl":1000000000}`)); err != nil {
				return err
			}
		}
		return wb.Flush()
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, at := range []int{0, n / 2, n * 9 / 10, n - 100} {
		b.Run(fmt.Sprint("after-", at), func(b *testing.B) {
			after := ""
			if at > 0 {
				after = name(at - 1)
			}
			for b.Loop() {
				got := 0
				err := s.LeasesFrom("atk/", after, 100, func(name string, _ []byte) error {
					got++
					return nil
				})
				if err != nil || got != 100 {
					b.Fatalf("LeasesFrom: %d records, %v", got, err)
				}
			}
		})
	}
}
