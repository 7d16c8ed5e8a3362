package main

import (
	"log/slog"
	"math"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryLimitRatio is the share of the container's memory limit that Go's
// heap may grow to before its garbage collector works harder (GOMEMLIMIT).
// The rest is for what the Go heap does not count: the runtime itself,
// goroutine stacks and the pages of Badger's memory-mapped tables.
const memoryLimitRatio = 0.7

// setMemoryLimit sets Go's soft memory limit (GOMEMLIMIT) to
// memoryLimitRatio of the cgroup memory limit of the container fenceproxy
// runs in, and logs it. Without it Go lets the heap grow to twice what is
// live, which in a 256Mi container is the difference between running and
// being killed. A GOMEMLIMIT set in the environment wins (AUTOMEMLIMIT=off
// or a ratio such as AUTOMEMLIMIT=0.8 are the library's own switches);
// without a cgroup limit nothing changes.
func setMemoryLimit(log *slog.Logger) {
	limit, err := memlimit.Set(memlimit.WithRatio(memoryLimitRatio), memlimit.WithProvider(memlimit.FromCgroup))
	switch {
	case err != nil:
		log.Warn("Go memory limit not set from the container's limit", "error", err.Error())
	case limit <= 0 || limit == math.MaxInt64:
		log.Debug("Go memory limit: none (no container memory limit, no GOMEMLIMIT)")
	default:
		log.Info("Go memory limit", "bytes", limit)
	}
}
