package shard

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// Of returns the shard of a resource key among n shards: FNV-1a 64 of the
// key's bytes, modulo n. It never changes: a resource's shard depends only on
// its key and n, which is fixed per prefix (see Start).
func Of(resource string, n int) int {
	if n <= 0 {
		panic("shard.Of: n must be positive")
	}
	return int(fnv1a(fnvOffset, resource) % uint64(n))
}

// Key returns the part of a resource key that decides its shard: the key up
// to its depth-th "/" (not included), the whole key when it has fewer or
// depth is 0. With depth 2, out/part-7/f1, the prefix fence out/part-7/ and
// out/part-7 all have the shard of out/part-7: a prefix fence with at least
// depth segments has the shard of every key below it.
func Key(resource string, depth int) string {
	if depth <= 0 {
		return resource
	}
	for i := 0; i < len(resource); i++ {
		if resource[i] == '/' {
			if depth--; depth == 0 {
				return resource[:i]
			}
		}
	}
	return resource
}

// countValue is the stored shard count's value: "N", or "N depth=D".
func (opts Options) countValue() string {
	if opts.Depth == 0 {
		return strconv.Itoa(opts.Shards)
	}
	return strconv.Itoa(opts.Shards) + " depth=" + strconv.Itoa(opts.Depth)
}

// parseCount reads a stored shard count's value (see countValue).
func parseCount(v string) (shards, depth int, err error) {
	n, d, hasDepth := strings.Cut(v, " depth=")
	if shards, err = strconv.Atoi(n); err != nil {
		return 0, 0, err
	}
	if hasDepth {
		if depth, err = strconv.Atoi(d); err != nil || depth <= 0 {
			return 0, 0, fmt.Errorf("bad depth %q", d)
		}
	}
	return shards, depth, nil
}

func fnv1a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// score is the rendezvous weight of a replica for a shard: FNV-1a over the
// id, a 0 byte and the shard number, then a 64-bit finaliser (splitmix64's),
// since FNV's low bits alone spread short keys poorly.
func score(id string, shard int) uint64 {
	h := fnv1a(fnvOffset, id)
	h = fnv1a(h^0, "\x00"+strconv.Itoa(shard))
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// assign returns, for each of n shards, the replica that should own it among
// members (ids, any order): rendezvous hashing with bounded load. Every
// (replica, shard) pair is ranked by score, highest first, and a shard goes to
// the first replica of its pairs that still has room, where room is
// floor(n/m) shards for every replica and one more for the first n mod m
// replicas that reach it. So every replica owns floor(n/m) or ceil(n/m)
// shards, the same members always give the same answer whatever their order,
// and a replica that leaves and comes back gets back the same shards (its
// pairs rank the same). With no member every entry is "".
func assign(members []string, n int) []string {
	out := make([]string, n)
	m := len(members)
	if m == 0 {
		return out
	}
	ids := slices.Clone(members)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	m = len(ids)
	type pair struct {
		score  uint64
		member int
		shard  int
	}
	pairs := make([]pair, 0, n*m)
	for i, id := range ids {
		for s := range n {
			pairs = append(pairs, pair{score(id, s), i, s})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		if c := cmp.Compare(a.member, b.member); c != 0 {
			return c
		}
		return cmp.Compare(a.shard, b.shard)
	})
	base, extra := n/m, n%m
	count := make([]int, m)
	full, left := 0, n // replicas holding base+1; shards not assigned yet
	for _, p := range pairs {
		if left == 0 {
			break
		}
		if out[p.shard] != "" {
			continue
		}
		c := count[p.member]
		if c < base || (c == base && full < extra) {
			out[p.shard] = ids[p.member]
			count[p.member]++
			left--
			if c == base {
				full++
			}
		}
	}
	return out
}
