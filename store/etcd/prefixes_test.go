package etcd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
	"github.com/fenceproxy/fenceproxy/store/internal/keys"
)

func prefixesAll(t *testing.T, s *Store) []fence.Record {
	t.Helper()
	var all []fence.Record
	after := ""
	for {
		page, err := s.Prefixes(after, 100)
		if err != nil {
			t.Fatalf("Prefixes: %v", err)
		}
		all = append(all, page...)
		if len(page) < 100 {
			return all
		}
		after = page[len(page)-1].Resource
	}
}

// A prefix written before the index (fence records, no index entries, no
// marker) gets its index built at Open: every prefix fence with a maximum
// above 0, wrong entries put right or deleted, in Txns within MaxTxnOps,
// then the marker.
func TestPrefixIndexBuiltAtOpen(t *testing.T) {
	const limit = 10
	c := etcdtest.Start(t, "--max-txn-ops", fmt.Sprint(limit))
	opts := Options{Prefix: "/old/", MaxTxnOps: limit}
	s := open(t, c, opts)
	var want []fence.Record
	for i := range 40 {
		res := fmt.Sprintf("p/%02d/", i)
		if _, err := s.Raise(res, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
		want = append(want, fence.Record{Resource: res, Token: uint64(i + 1)})
	}
	if _, err := s.Raise("x/y", 5); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateLease("held/", func([]byte, uint64) ([]byte, uint64, error) { return []byte("rec"), 7, nil }); err != nil {
		t.Fatal(err)
	}
	want = append(want, fence.Record{Resource: "held/", Token: 7})
	if err := s.MarkWritten("marked/"); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(want, func(x, y fence.Record) int { return strings.Compare(x.Resource, y.Resource) })
	if got := prefixesAll(t, s); !slices.Equal(got, want) {
		t.Fatalf("Prefixes = %v, want %v", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// As an earlier version left it: no index, no marker; and entries that
	// are wrong (a stale maximum, one with no fence).
	cli := rawClient(t, c)
	ctx := context.Background()
	for _, op := range []clientv3.Op{
		clientv3.OpDelete("/old/x/", clientv3.WithPrefix()),
		clientv3.OpDelete("/old/m/prefix-index"),
		clientv3.OpPut("/old/x/p/00/", encode(100)),
		clientv3.OpPut("/old/x/stale/", encode(9)),
	} {
		if _, err := cli.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	s = open(t, c, opts)
	if got := prefixesAll(t, s); !slices.Equal(got, want) {
		t.Errorf("Prefixes after the build at Open = %v, want %v", got, want)
	}
	resp, err := cli.Get(ctx, "/old/m/prefix-index")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != keys.PrefixIndexVersion {
		t.Errorf("marker after the build: %v, %v; want %q", resp, err, keys.PrefixIndexVersion)
	}
	if s.EmptyAtOpen() {
		t.Errorf("EmptyAtOpen of a prefix with fences = true")
	}
}
