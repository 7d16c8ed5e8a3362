package cluster

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// New retries while etcd cannot be reached, until stop ends: then it fails
// with stop's cause, naming FENCEPROXY_ETCD_ENDPOINTS, and leaves the peer
// listener closed.
func TestNewStops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := ln.Addr().String()
	ln.Close()
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	peer := ln.Addr().String()
	ln.Close()
	stop, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	start := time.Now()
	c, err := New(stop, Options{
		Etcd:   clientv3.Config{Endpoints: []string{"http://" + nobody}, DialTimeout: time.Second},
		Prefix: "/test/", Shards: 4, ReplicaID: "r", PeerListen: peer, PeerSecrets: []string{"s"},
		Logger: slog.New(slog.DiscardHandler),
	})
	took := time.Since(start)
	if err == nil {
		c.Store().Close()
		c.Listener().Close()
		t.Fatal("New with no etcd succeeded")
	}
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "FENCEPROXY_ETCD_ENDPOINTS: ") || took > 8*time.Second {
		t.Fatalf("New returned after %v: %v; want context.Canceled within 8s", took, err)
	}
	if ln, err := net.Listen("tcp", peer); err != nil {
		t.Fatalf("the peer listener stayed bound: %v", err)
	} else {
		ln.Close()
	}
}

// etcdBefore reads etcd's Status version: 3.4 is before 3.5, 3.5 and later
// and 4.0 are not, and what does not parse is reported as such.
func TestEtcdBefore(t *testing.T) {
	for _, c := range []struct {
		version    string
		before, ok bool
	}{
		{"3.4.23", true, true}, {"3.5.0", false, true}, {"3.7.3", false, true},
		{"2.3.8", true, true}, {"4.0.0", false, true}, {"", false, false}, {"v3.4", false, false},
	} {
		before, ok := etcdBefore(c.version, 3, minEtcdMinor)
		if before != c.before || ok != c.ok {
			t.Errorf("etcdBefore(%q) = %v, %v; want %v, %v", c.version, before, ok, c.before, c.ok)
		}
	}
}
