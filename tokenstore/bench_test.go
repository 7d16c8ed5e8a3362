package tokenstore

import (
	"fmt"
	"sync/atomic"
	"testing"
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
