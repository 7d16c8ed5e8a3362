package cluster

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/control"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/shard"
	"github.com/fenceproxy/fenceproxy/wire"
)

// A pool lease call run on the owner maps the owner's answer back: the
// lease, lease_held and lease_lost as the lease package's errors, a 503 or
// a refused secret as control.ErrShardUnavailable; the call carries the
// peer secret, the control target and the lease API's token.
func TestLeasesRemote(t *testing.T) {
	var status int
	var body string
	var header http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != control.LeasePrefix+"p/3" || r.Header.Get(headerPeerSecret) != "s-0123456789abcdef" ||
			r.Header.Get(headerPeerTarget) != "control" || r.Header.Get("Authorization") != "Bearer lease-token" {
			t.Errorf("the owner got %s %s %v", r.Method, r.URL.Path, r.Header)
		}
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	defer srv.Close()
	c := testCluster(t, false, "s-0123456789abcdef")
	l := NewLeases(c, nil, "lease-token")
	rt := placement{shards: []int{1}, forward: shard.Member{ID: "owner", Addr: strings.TrimPrefix(srv.URL, "http://")}}
	acquire := func() (lease.Lease, error) {
		return l.remote(context.Background(), rt, http.MethodPost, "p/3", wire.LeaseRequest{Holder: "h", TTL: "30s"})
	}

	status, body = http.StatusCreated, `{"holder":"h","token":"7","ttl":"30s","state":"held"}`
	if got, err := acquire(); err != nil || got.Token != 7 || got.Holder != "h" || got.TTL != 30*time.Second || got.Name != "p/3" {
		t.Fatalf("acquire: %+v %v", got, err)
	}
	for _, tc := range []struct {
		status int
		body   string
		header http.Header
		want   error
	}{
		{http.StatusConflict, `{"reason":"lease_held"}`, nil, lease.ErrHeld},
		{http.StatusConflict, `{"reason":"lease_lost"}`, nil, lease.ErrLost},
		{http.StatusServiceUnavailable, `{"reason":"shard_unavailable"}`, nil, control.ErrShardUnavailable},
		{http.StatusForbidden, `{"reason":"forbidden"}`, http.Header{headerPeerRefused: {"secret"}}, control.ErrShardUnavailable},
	} {
		status, body, header = tc.status, tc.body, tc.header
		if _, err := acquire(); !errors.Is(err, tc.want) {
			t.Fatalf("%d %s: %v, want %v", tc.status, tc.body, err, tc.want)
		}
	}
	rt.forward, rt.why = shard.Member{}, "no owner"
	if _, err := acquire(); !errors.Is(err, control.ErrShardUnavailable) {
		t.Fatalf("no owner: %v", err)
	}
}
