package etcd

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
)

// openBench opens a store on a 3-member etcd of its own, as in production
// (each write waits for a quorum's fsync).
func openBench(b *testing.B) *Store {
	b.Helper()
	s, err := Open(config(etcdtest.StartCluster(b, 3)), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkRaise is one takeover at a time: one etcd Txn each, the raise
// ceiling without batching. Compare with BenchmarkRaiseParallel in the
// same run (docs/CLUSTER.md, Scaling): raises/s is the figure.
func BenchmarkRaise(b *testing.B) {
	s := openBench(b)
	for i := 0; b.Loop(); i++ {
		if _, err := s.Raise(fmt.Sprintf("bkt/obj-%d", i%1000), uint64(i+1)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "raises/s")
}

// BenchmarkRaiseParallel is many takeovers at once on different resources
// (64 goroutines per GOMAXPROCS): concurrent raises are group-committed,
// up to MaxTxnOps-2 per Txn.
func BenchmarkRaiseParallel(b *testing.B) {
	s := openBench(b)
	var n atomic.Uint64
	b.SetParallelism(64)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			if _, err := s.Raise(fmt.Sprintf("bkt/obj-%d", i%100000), i); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "raises/s")
}
