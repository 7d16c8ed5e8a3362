package cluster

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fenceproxy/fenceproxy/shard"
	"github.com/fenceproxy/fenceproxy/wire"
)

// testCluster is a cluster that opened nothing: its forwarding and peer
// handler, without etcd.
func testCluster(t *testing.T, s3 bool, secrets ...string) *Cluster {
	t.Helper()
	return newCluster(Options{
		Shards: 4, ReplicaID: "r", PeerSecrets: secrets, S3: s3,
		DialTimeout: time.Second, DrainTimeout: time.Second, ResponseTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler),
	})
}

// seen is what a handler behind the peer listener received.
type seen struct {
	target, uri, host string
	header            http.Header
	fromPeer          bool
}

// owner serves c's peer handler over handlers that record what reaches them.
func owner(t *testing.T, c *Cluster) (addr string, got chan seen) {
	t.Helper()
	got = make(chan seen, 1)
	record := func(target string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got <- seen{target, r.RequestURI, r.Host, r.Header.Clone(), r.Context().Value(fromPeerKey{}) != nil}
			io.WriteString(w, "applied by "+target)
		})
	}
	srv := httptest.NewServer(c.PeerHandler(record("proxy"), record("control")))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), got
}

// forward sends a PUT of rawPath through c to the owner at addr.
func forward(c *Cluster, addr, target, rawPath string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPut, rawPath, strings.NewReader("body"))
	req.Host = "bucket.example"
	req.Header.Set("X-Forwarded-For", "192.0.2.1")
	rec := httptest.NewRecorder()
	c.forwardTo(shard.Member{ID: "owner", Addr: addr}, target, "bkt/x").ServeHTTP(rec, req)
	return rec
}

// A forwarded request reaches the owner's target handler as the client
// sent it (the target's bytes, a path Go would escape and a query
// ReverseProxy would clean included; Host, X-Forwarded-*), without the peer
// headers and marked as coming from a peer; any secret of the owner's list
// is accepted.
func TestForwardReachesOwner(t *testing.T) {
	addr, got := owner(t, testCluster(t, false, "old-secret-0123456789", "new-secret-0123456789"))
	c := testCluster(t, false, "new-secret-0123456789")
	n := 0
	for _, target := range []string{"proxy", "control"} {
		for _, uri := range []string{"/bkt/a%2Fb/../x?q=1", "/bkt/x|y%7e?a;b=1&%zz&&"} {
			rec := forward(c, addr, target, uri)
			if rec.Code != http.StatusOK || rec.Body.String() != "applied by "+target {
				t.Fatalf("%s %s: %d %s", target, uri, rec.Code, rec.Body)
			}
			n++
			s := <-got
			if s.target != target || s.uri != uri || s.host != "bucket.example" || !s.fromPeer {
				t.Fatalf("%s %s: the owner saw %+v", target, uri, s)
			}
			if s.header.Get(headerPeerSecret) != "" || s.header.Get(headerPeerTarget) != "" || s.header.Get("X-Forwarded-For") != "192.0.2.1" {
				t.Fatalf("%s: the owner's handler saw the headers %v", target, s.header)
			}
		}
	}
	if v := testutil.ToFloat64(c.forwards.WithLabelValues("ok")); v != float64(n) {
		t.Fatalf("ok forwards counted %v, want %d", v, n)
	}
}

// The peer listener serves only replicas: without a secret of its list,
// 403, marked as its own refusal, and no handler runs; an unknown target
// is 400.
func TestPeerHandlerNeedsSecret(t *testing.T) {
	c := testCluster(t, false, "the-secret-0123456789")
	ran := false
	h := c.PeerHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }), http.NotFoundHandler())
	for _, secret := range []string{"", "wrong-secret-0123456789", "the-secret-012345678"} {
		req := httptest.NewRequest(http.MethodPut, "/bkt/x", strings.NewReader("x"))
		req.Header.Set(headerPeerTarget, "proxy")
		if secret != "" {
			req.Header.Set(headerPeerSecret, secret)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusForbidden || rec.Header().Get(headerPeerRefused) == "" || ran {
			t.Fatalf("secret %q: %d %v, handler ran %v", secret, rec.Code, rec.Header(), ran)
		}
	}
	req := httptest.NewRequest(http.MethodPut, "/bkt/x", nil)
	req.Header.Set(headerPeerSecret, "the-secret-0123456789")
	req.Header.Set(headerPeerTarget, "other")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || ran {
		t.Fatalf("unknown target: %d, handler ran %v", rec.Code, ran)
	}
}

// An owner that refuses this replica's secret, or cannot be reached, is a
// 503 shard_unavailable with Fencing-Refused and Retry-After (nothing was
// forwarded), counted by result; in S3 mode the proxy's answer is an S3
// <Error>.
func TestForwardRefusals(t *testing.T) {
	addr, got := owner(t, testCluster(t, false, "owner-secret-0123456789"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		name, addr, result, detail string
		s3                         bool
	}{
		{"secret", addr, "refused", "peer secret", false},
		{"unreachable", closed, "unreachable", "could not be reached", false},
		{"s3", closed, "unreachable", "<Code>", true},
	} {
		c := testCluster(t, tc.s3, "other-secret-0123456789")
		rec := forward(c, tc.addr, "proxy", "/bkt/x")
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get(wire.HeaderRefused) != wire.ReasonShardUnavailable ||
			rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), tc.detail) {
			t.Fatalf("%s: %d %v %s", tc.name, rec.Code, rec.Header(), rec.Body)
		}
		if v := testutil.ToFloat64(c.forwards.WithLabelValues(tc.result)); v != 1 {
			t.Fatalf("%s: %s forwards counted %v, want 1", tc.name, tc.result, v)
		}
	}
	select {
	case s := <-got:
		t.Fatalf("a handler of the owner ran: %+v", s)
	default:
	}
}

// A forward follows its client on both ways of the hop (a small body and a
// large one): when the client goes away before the owner answered, the
// forward ends at once, not when the owner's answer or its timeout comes,
// and the owner's request is cancelled.
func TestForwardFollowsClient(t *testing.T) {
	c := testCluster(t, false, "the-secret-0123456789")
	cancelled := make(chan bool, 1)
	srv := httptest.NewServer(c.PeerHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // read whole: the server then watches the connection
		select {
		case <-r.Context().Done():
			cancelled <- true
		case <-time.After(15 * time.Second):
			cancelled <- false
		}
	}), http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	for _, size := range []int{1024, 200 << 10} {
		ctx, cancel := context.WithCancel(context.Background())
		req := httptest.NewRequest(http.MethodPut, "/bkt/x", bytes.NewReader(make([]byte, size))).WithContext(ctx)
		time.AfterFunc(300*time.Millisecond, cancel)
		start := time.Now()
		c.forwardTo(shard.Member{ID: "owner", Addr: strings.TrimPrefix(srv.URL, "http://")}, "proxy", "bkt/x").ServeHTTP(httptest.NewRecorder(), req)
		if took := time.Since(start); took > 3*time.Second { // the owner's answer timeout is 7s
			t.Fatalf("size %d: the forward returned %s after its client went away", size, took)
		}
		if !<-cancelled {
			t.Fatalf("size %d: the owner's request was not cancelled", size)
		}
	}
}

// A small body is read whole before anything is sent to the owner: an
// upload that stalls does not reach the owner, and one the client cuts
// short never does; it is 400 bad_body (the owner did not get it whole),
// not a 502. A large body streams to the owner as it comes.
func TestForwardSmallBodyWhole(t *testing.T) {
	c := testCluster(t, false, "the-secret-0123456789")
	reached := make(chan int64, 2)
	srv := httptest.NewServer(c.PeerHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached <- r.ContentLength
		io.Copy(io.Discard, r.Body)
	}), http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, size := range []int64{1024, 200 << 10} {
		pr, pw := io.Pipe()
		req := httptest.NewRequest(http.MethodPut, "/bkt/x", pr)
		req.ContentLength = size
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.forwardTo(shard.Member{ID: "owner", Addr: addr}, "proxy", "bkt/x").ServeHTTP(rec, req)
		}()
		pw.Write(make([]byte, 512))
		select {
		case n := <-reached:
			if size <= 64<<10 {
				t.Fatalf("size %d: the owner got the request (Content-Length %d) before its body was whole", size, n)
			}
		case <-time.After(300 * time.Millisecond):
			if size > 64<<10 {
				t.Fatalf("size %d: the owner did not get the request while its body streamed", size)
			}
		}
		pw.CloseWithError(io.ErrUnexpectedEOF) // the client cuts its upload short
		<-done
		if size <= 64<<10 {
			if rec.Code != http.StatusBadRequest || rec.Header().Get(wire.HeaderRefused) != wire.ReasonBadBody {
				t.Fatalf("size %d: a cut upload was answered %d %v %s, want 400 bad_body", size, rec.Code, rec.Header(), rec.Body)
			}
			select {
			case n := <-reached:
				t.Fatalf("size %d: the owner got a cut upload (Content-Length %d)", size, n)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// Clients that go away at any moment end their own forwards only: the
// others, sharing the kept-alive connections to the owner, are answered.
func TestForwardCancelsOnlyItsOwn(t *testing.T) {
	c := testCluster(t, false, "the-secret-0123456789")
	srv := httptest.NewServer(c.PeerHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
		io.WriteString(w, "applied")
	}), http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	m := shard.Member{ID: "owner", Addr: strings.TrimPrefix(srv.URL, "http://")}
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				ctx, cancel := context.WithCancel(context.Background())
				if i%3 == 0 {
					time.AfterFunc(time.Duration(rand.IntN(2000))*time.Microsecond, cancel)
				}
				req := httptest.NewRequest(http.MethodPut, "/bkt/x", bytes.NewReader(make([]byte, 1024))).WithContext(ctx)
				rec := httptest.NewRecorder()
				c.forwardTo(m, "proxy", "bkt/x").ServeHTTP(rec, req)
				if ctx.Err() == nil && rec.Code != http.StatusOK {
					t.Errorf("a forward whose client stayed: %d %s", rec.Code, rec.Body)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
}
