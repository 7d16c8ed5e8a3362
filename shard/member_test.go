package shard

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
)

type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The member key deleted while the replica's lease lives is put back on
// that lease.
func TestMemberKeyDeletedIsRegisteredAgain(t *testing.T) {
	e := etcdtest.Start(t)
	cli := newClient(t, e.Endpoints())
	ctx := context.Background()
	a, err := Start(ctx, cli, Options{Prefix: "/mem/", Shards: 4, ID: "a", TTL: testTTL, LockDelay: testLockDelay, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	waitFor(t, 5*time.Second, "a holds its 4 shards", func() bool { return len(a.Owned()) == 4 })
	if _, err := cli.Delete(ctx, "/mem/members/a"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	d := waitFor(t, 3*time.Second, "the member key back on a's lease", func() bool {
		resp, err := cli.Get(ctx, "/mem/members/a")
		return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Lease == int64(a.sess.Load().lease)
	})
	t.Logf("member key back %v after its deletion (%v)", d.Round(time.Millisecond), time.Since(deleted).Round(time.Millisecond))
	if st := a.Stats(); st.MemberReregistered != 1 || len(a.Owned()) != 4 {
		t.Errorf("want 1 re-registration and the 4 shards kept: %+v", st)
	}
}

// Two replicas with one ID: the second Start fails, naming the ID, while
// the first runs; a member key with the ID put on another lease under a
// running replica makes it log an error and take no shard until that key
// is gone.
func TestDuplicateID(t *testing.T) {
	e := etcdtest.Start(t)
	cli := newClient(t, e.Endpoints())
	ctx := context.Background()
	logs := &logBuffer{}
	opts := Options{Prefix: "/dup/", Shards: 4, ID: "x", TTL: testTTL, LockDelay: testLockDelay, RequestTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}
	a, err := Start(ctx, cli, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	waitFor(t, 5*time.Second, "a holds its 4 shards", func() bool { return len(a.Owned()) == 4 })

	begin := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	b, err := Start(sctx, newClient(t, e.Endpoints()), Options{Prefix: "/dup/", Shards: 4, ID: "x", TTL: testTTL})
	cancel()
	if err == nil {
		b.Close(ctx)
		t.Fatal("a second replica with the ID x started beside a live one")
	}
	var de *DuplicateIDError
	if !errors.Is(err, ErrDuplicateID) || !errors.As(err, &de) || de.ID != "x" || de.Lease != int64(a.sess.Load().lease) || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("Start with a live replica's ID: %v, want a DuplicateIDError naming x and a's lease", err)
	}
	t.Logf("refused after %v: %v", time.Since(begin).Round(time.Millisecond), err)
	if resp, err := cli.Get(ctx, "/dup/members/x"); err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != int64(a.sess.Load().lease) {
		t.Fatalf("a's member key after the refused Start: %v %v", resp, err)
	}

	// Another replica with the ID registers under the running one (after a
	// deletion, or an older version's plain put), and one of a's shards
	// becomes free.
	other, err := cli.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	kctx, stopKeepAlive := context.WithCancel(ctx)
	defer stopKeepAlive()
	ka, err := cli.KeepAlive(kctx, other.ID)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range ka {
		}
	}()
	if _, err := cli.Put(ctx, "/dup/members/x", `{"id":"x","addr":"other:7000"}`, clientv3.WithLease(other.ID)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "a reports the duplicate", func() bool { return a.Stats().DuplicateID })
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "ANOTHER REPLICA RUNS WITH THIS REPLICA'S ID") {
		t.Errorf("no error logged for the duplicate ID:\n%s", logs.String())
	}
	if _, err := cli.Delete(ctx, "/dup/shards/1/owner"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // asserting nothing happens: a does not take shard 1
	if resp, err := cli.Get(ctx, "/dup/shards/1/owner"); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("a took shard 1 while another replica used its ID: %v %v", resp, err)
	}
	if _, ok := a.State(1); ok {
		t.Error("a holds shard 1 while another replica used its ID")
	}

	// The other one goes: a registers again and takes shard 1 back.
	stopKeepAlive()
	if _, err := cli.Revoke(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "a registered again", func() bool { return !a.Stats().DuplicateID })
	waitFor(t, 3*(testTTL+testLockDelay), "a admits shard 1 again", func() bool {
		_, ok := a.MayAdmit(1)
		return ok
	})
	if resp, err := cli.Get(ctx, "/dup/members/x"); err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != int64(a.sess.Load().lease) {
		t.Errorf("a's member key at the end: %v %v", resp, err)
	}
}
