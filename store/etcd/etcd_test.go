package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
	"github.com/fenceproxy/fenceproxy/store/internal/groupcommit"
)

func open(t *testing.T, c *etcdtest.Cluster, opts Options) *Store {
	t.Helper()
	s, err := Open(config(c), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// rawClient is a plain client to c, to look at the keys the store wrote.
func rawClient(t *testing.T, c *etcdtest.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(config(c))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func txnCount(t *testing.T, c *etcdtest.Cluster) float64 {
	t.Helper()
	v, err := c.Members[0].Metric("grpc_server_handled_total", `grpc_method="Txn"`)
	if err != nil {
		return 0 // no Txn handled yet
	}
	return v
}

// Many concurrent raises of distinct resources are committed in fewer Txns
// than raises, as etcd itself counts them, and each is durable.
func TestGroupCommit(t *testing.T) {
	c := etcdtest.Start(t)
	s := open(t, c, Options{})
	const raisers = 400
	before := txnCount(t, c)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range raisers {
		wg.Go(func() {
			<-start
			res := fmt.Sprintf("gc/%d", i)
			if m, err := s.Raise(res, uint64(i+1)); err != nil || m != uint64(i+1) {
				t.Errorf("Raise(%s, %d) = %d, %v", res, i+1, m, err)
			}
		})
	}
	close(start)
	wg.Wait()
	txns := txnCount(t, c) - before
	t.Logf("%d concurrent raises of distinct resources: %v Txns handled by etcd, %d raise Txns sent", raisers, txns, s.raises.Batches())
	if txns >= raisers/2 {
		t.Errorf("%d raises took %v Txns, want fewer than half as many: no group commit", raisers, txns)
	}
	if int64(txns) != s.raises.Batches() {
		t.Errorf("etcd handled %v Txns, the store sent %d raise Txns", txns, s.raises.Batches())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, c, Options{})
	for i := range raisers {
		if m, err := s.Max(fmt.Sprintf("gc/%d", i)); err != nil || m != uint64(i+1) {
			t.Fatalf("after reopen Max(gc/%d) = %d, %v; want %d", i, m, err, i+1)
		}
	}
}

// A batch of MaxTxnOps-2 resources is the largest etcd takes in one Txn:
// etcd counts each level of the nested raise Txns against --max-txn-ops.
func TestRaiseBatchWithinMaxTxnOps(t *testing.T) {
	const limit = 10
	c := etcdtest.Start(t, "--max-txn-ops", fmt.Sprint(limit))
	batch := func(s *Store, n int, tag string) error {
		var reqs []*groupcommit.Request
		for i := range n {
			reqs = append(reqs, &groupcommit.Request{Resource: fmt.Sprintf("%s/%d", tag, i), Token: 7})
		}
		s.commitRaises(reqs)
		return reqs[0].Err
	}
	s := open(t, c, Options{MaxTxnOps: limit})
	if s.maxBatch != limit-2 {
		t.Fatalf("maxBatch = %d, want %d", s.maxBatch, limit-2)
	}
	if err := batch(s, s.maxBatch, "full"); err != nil {
		t.Fatalf("a full batch of %d raises: %v", s.maxBatch, err)
	}
	// One more resource is refused by etcd: the bound is exact.
	if err := batch(s, s.maxBatch+1, "over"); !errors.Is(err, rpctypes.ErrTooManyOps) {
		t.Fatalf("a batch of %d raises with --max-txn-ops %d: %v, want %v", s.maxBatch+1, limit, err, rpctypes.ErrTooManyOps)
	}
	// Through Raise, many concurrent raises stay within the bound.
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			if _, err := s.Raise(fmt.Sprintf("many/%d", i), 3); err != nil {
				t.Errorf("Raise: %v", err)
			}
		})
	}
	wg.Wait()
}

// Concurrent raises of ONE resource never lower its maximum: each returns at
// least its token and every maximum returned before it began, a goroutine
// never sees the maximum go down, and the end is the largest token, in
// memory, in etcd and after a reopen.
func TestRaiseOneResourceNeverLowers(t *testing.T) {
	c := etcdtest.Start(t)
	s := open(t, c, Options{})
	const (
		workers = 24
		ops     = 60
		res     = "hot/one"
	)
	var acked, asked atomic.Uint64
	lift := func(a *atomic.Uint64, v uint64) {
		for cur := a.Load(); v > cur && !a.CompareAndSwap(cur, v); cur = a.Load() {
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var seen uint64
			for range ops {
				tok := 1 + rng.Uint64N(1<<30)
				floor := acked.Load()
				lift(&asked, tok)
				m, err := s.Raise(res, tok)
				if err != nil {
					t.Errorf("Raise(%d): %v", tok, err)
					return
				}
				if m < tok || m < floor || m < seen {
					t.Errorf("Raise(%d) = %d; want >= the token, >= %d returned before it began, >= %d seen by this goroutine", tok, m, floor, seen)
				}
				seen = m
				lift(&acked, m)
				if got, err := s.Max(res); err != nil || got < m {
					t.Errorf("Max = %d, %v after Raise returned %d", got, err, m)
				}
			}
		})
	}
	wg.Wait()
	want := asked.Load()
	if m, err := s.Max(res); err != nil || m != want {
		t.Fatalf("Max = %d, %v; want %d, the largest token", m, err, want)
	}
	resp, err := rawClient(t, c).Get(context.Background(), DefaultPrefix+"f/"+res)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("etcd Get: %v, %v", resp, err)
	}
	if m, err := decode(resp.Kvs[0].Value); err != nil || m != want {
		t.Fatalf("etcd holds %d, %v; want %d", m, err, want)
	}
}

// The keys in etcd are the documented ones, and no resource name, however
// odd, lands in another kind's range or on another resource's key.
func TestKeys(t *testing.T) {
	c := etcdtest.Start(t)
	s := open(t, c, Options{Prefix: "/p/"})
	names := []string{"", "/", "f/x", "l/x", "u/x", "m/clean-stop", "a//b", "ü/☃", "x\x00y"}
	for i, n := range names {
		if _, err := s.Raise(n, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
		if err := s.UpdateLease(n, func([]byte, uint64) ([]byte, uint64, error) { return []byte("rec"), 0, nil }); err != nil {
			t.Fatal(err)
		}
		if err := s.PutUpload(n, "id", 5, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkCleanStop(); err != nil {
		t.Fatal(err)
	}
	resp, err := rawClient(t, c).Get(context.Background(), "/p/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), "/p/")
		kinds[k[:2]]++
	}
	// "/" is the one prefix fence: an index entry; m/ holds the clean-stop
	// mark and the index's marker.
	if kinds["f/"] != len(names) || kinds["l/"] != len(names) || kinds["u/"] != len(names) || kinds["x/"] != 1 || kinds["m/"] != 2 || len(resp.Kvs) != 3*len(names)+3 {
		t.Fatalf("keys by kind %v (%d keys), want %d fences, leases and uploads, one index entry, the mark and the marker", kinds, len(resp.Kvs), len(names))
	}
	if got, err := s.Prefixes("", 100); err != nil || len(got) != 1 || got[0].Resource != "/" {
		t.Errorf("Prefixes = %v, %v; want \"/\" alone", got, err)
	}
	for i, n := range names {
		if m, err := s.Max(n); err != nil || m != uint64(i+1) {
			t.Errorf("Max(%q) = %d, %v; want %d", n, m, err, i+1)
		}
	}
	if got, err := s.List("", "", 100); err != nil || len(got) != len(names) {
		t.Errorf("List = %v, %v; want %d records", got, err, len(names))
	}
	if clean, err := s.TakeCleanStop(); err != nil || !clean {
		t.Errorf("TakeCleanStop = %v, %v; want the mark, not a resource named m/clean-stop", clean, err)
	}
}

// MaxAtOpen reads the revision at open; once etcd compacted it, it fails
// (closed) with ErrCompacted, and everything else works on.
func TestMaxAtOpenCompacted(t *testing.T) {
	c := etcdtest.Start(t)
	s := open(t, c, Options{})
	if _, err := s.Raise("a", 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, c, Options{})
	if m, found, err := s.MaxAtOpen("a"); err != nil || !found || m != 5 {
		t.Fatalf("MaxAtOpen = %d, %v, %v; want 5, true", m, found, err)
	}
	if _, err := s.Raise("a", 9); err != nil {
		t.Fatal(err)
	}
	cli := rawClient(t, c)
	resp, err := cli.Get(context.Background(), "any")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(context.Background(), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	m, found, err := s.MaxAtOpen("a")
	if !errors.Is(err, ErrCompacted) || !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("MaxAtOpen after compaction = %d, %v, %v; want ErrCompacted", m, found, err)
	}
	if m, err := s.Raise("a", 10); err != nil || m != 10 {
		t.Fatalf("Raise after compaction = %d, %v", m, err)
	}
}

// With etcd gone, calls that need it fail within RequestTimeout (fail
// closed), none hangs; a maximum this process holds is still answered.
func TestEtcdDown(t *testing.T) {
	c := etcdtest.Start(t)
	s := open(t, c, Options{RequestTimeout: time.Second})
	if _, err := s.Raise("known", 4); err != nil {
		t.Fatal(err)
	}
	c.Members[0].Kill()
	begin := time.Now()
	if m, err := s.Raise("known", 5); err == nil {
		t.Errorf("Raise with etcd down = %d, nil; want an error", m)
	}
	if m, err := s.Max("unknown"); err == nil {
		t.Errorf("Max of an unknown resource with etcd down = %d, nil; want an error", m)
	}
	if err := s.UpdateLease("known", func(r []byte, m uint64) ([]byte, uint64, error) { return []byte("x"), m + 1, nil }); err == nil {
		t.Errorf("UpdateLease with etcd down succeeded")
	}
	if err := s.MarkWritten("unknown"); err == nil {
		t.Errorf("MarkWritten with etcd down succeeded")
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("four calls with etcd down took %v, want each within its 1s timeout", d)
	}
	if m, err := s.Max("known"); err != nil || m != 4 {
		t.Errorf("Max of a resource this process raised = %d, %v; want 4 from memory", m, err)
	}
	if _, err := Open(config(c), Options{RequestTimeout: time.Second}); err == nil {
		t.Errorf("Open with etcd down succeeded")
	}
}

// Concurrent raises of long names are batched within etcd's request size
// limit (--max-request-bytes, 1.5 MiB by default), not only its ops limit.
func TestRaiseBatchWithinRequestBytes(t *testing.T) {
	c := etcdtest.Start(t)
	s := open(t, c, Options{})
	long := strings.Repeat("k", 6<<10)
	const raisers = 200 // 200 raises of 6 KiB names: 6 MiB of keys
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range raisers {
		wg.Go(func() {
			<-start
			res := fmt.Sprintf("%s/%d", long, i)
			if i%2 == 0 {
				res += "/" // a prefix fence: its index entry too
			}
			if _, err := s.Raise(res, 2); err != nil {
				t.Errorf("Raise of a 6 KiB name: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	t.Logf("%d raises of 6 KiB names in %d Txns", raisers, s.raises.Batches())
}

// A maximum another process raised while this one did not own the resource
// is seen once this one forgets it (a replica that becomes a shard's owner);
// before, the cache answers the old value. Forget of other resources keeps
// them cached.
func TestForget(t *testing.T) {
	c := etcdtest.Start(t)
	a, b := open(t, c, Options{}), open(t, c, Options{})
	for _, r := range []string{"mine/x", "other/y"} {
		if _, err := a.Raise(r, 5); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Raise(r, 9); err != nil {
			t.Fatal(err)
		}
	}
	if m, _ := a.Max("mine/x"); m != 5 {
		t.Fatalf("Max before Forget = %d, want the cached 5 (else this test shows nothing)", m)
	}
	a.Forget(func(r string) bool { return strings.HasPrefix(r, "mine/") })
	if m, err := a.Max("mine/x"); err != nil || m != 9 {
		t.Fatalf("Max after Forget = %d, %v; want 9", m, err)
	}
	if m, _ := a.Max("other/y"); m != 5 {
		t.Fatalf("Max of a resource not forgotten = %d, want the cached 5", m)
	}
}

// With Options.Guard, raises, lease updates and resets commit only while the
// guard key has the CreateRevision the guard names: once it was re-created
// (the shard changed owner), each fails with ErrNotOwner and etcd keeps the
// other owner's values. A guard that refuses fails before any request.
func TestGuard(t *testing.T) {
	c := etcdtest.Start(t)
	cli := rawClient(t, c)
	ctx := context.Background()
	const ownerKey = "/guard-test/shards/0/owner"
	put, err := cli.Put(ctx, ownerKey, "a")
	if err != nil {
		t.Fatal(err)
	}
	epoch := put.Header.Revision
	var refuse atomic.Bool
	a := open(t, c, Options{Guard: func(string) (string, int64, error) {
		if refuse.Load() {
			return "", 0, errors.New("not held")
		}
		return ownerKey, epoch, nil
	}})
	b := open(t, c, Options{})
	if m, err := a.Raise("r", 5); err != nil || m != 5 {
		t.Fatalf("Raise under the guard = %d, %v", m, err)
	}
	// Another replica becomes the owner: the key is re-created.
	if _, err := cli.Delete(ctx, ownerKey); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, ownerKey, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Raise("r", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Raise("r", 1000); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Raise after the owner changed: %v, want ErrNotOwner", err)
	}
	err = a.UpdateLease("r", func(rec []byte, max uint64) ([]byte, uint64, error) { return []byte("stale"), 2000, nil })
	if !errors.Is(err, ErrNotOwner) {
		t.Fatalf("UpdateLease after the owner changed: %v, want ErrNotOwner", err)
	}
	if _, err := a.Reset("r"); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Reset after the owner changed: %v, want ErrNotOwner", err)
	}
	if m, err := b.Max("r"); err != nil || m != 7 {
		t.Fatalf("the new owner's maximum = %d, %v; want 7 (the stale replica committed nothing)", m, err)
	}
	if rec, err := b.Lease("r"); err != nil || rec != nil {
		t.Fatalf("lease record %q, %v; want none", rec, err)
	}
	refuse.Store(true)
	if _, err := a.Raise("r2", 3); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Raise with a refusing guard: %v, want ErrNotOwner", err)
	}
	if m, _ := b.Max("r2"); m != 0 {
		t.Fatalf("a refused raise wrote %d", m)
	}
}

// MarkWritten of a resource that already has a maximum (raised by another
// process, not cached here) leaves Max answering that maximum, not 0.
func TestMarkWrittenKeepsMax(t *testing.T) {
	c := etcdtest.Start(t)
	a, b := open(t, c, Options{}), open(t, c, Options{})
	if _, err := b.Raise("r", 9); err != nil {
		t.Fatal(err)
	}
	if err := a.MarkWritten("r"); err != nil {
		t.Fatal(err)
	}
	if m, err := a.Max("r"); err != nil || m != 9 {
		t.Fatalf("Max after MarkWritten = %d, %v; want 9", m, err)
	}
}
