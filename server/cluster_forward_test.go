package server_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// seenRequest is a request as a backend received it.
type seenRequest struct {
	Method, URI, Host string
	Header            http.Header
	ContentLength     int64
	TransferEncoding  []string
	Body              string // its SHA-256
}

// echoBackend records every request and answers it with its own headers, a
// streamed (chunked) body naming the request, and a trailer.
type echoBackend struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen map[string]seenRequest // by X-Request-Id
}

func newEchoBackend(t *testing.T) *echoBackend {
	b := &echoBackend{seen: map[string]seenRequest{}}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sum := sha256.Sum256(body)
		h := r.Header.Clone()
		b.mu.Lock()
		b.seen[r.Header.Get("X-Request-Id")] = seenRequest{r.Method, r.RequestURI, r.Host, h, r.ContentLength,
			r.TransferEncoding, hex.EncodeToString(sum[:])}
		b.mu.Unlock()
		w.Header().Set("Trailer", "X-Body-Sum")
		w.Header().Set("X-Backend", "echo")
		w.Header()["x_raw_name"] = []string{"kept"}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "stored %s %d bytes", r.RequestURI, len(body))
		w.(http.Flusher).Flush()
		io.WriteString(w, " (streamed)")
		w.Header().Set("X-Body-Sum", hex.EncodeToString(sum[:]))
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *echoBackend) request(id string) (seenRequest, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.seen[id]
	return s, ok
}

// ownerAndOther are the replica that owns the single shard and the other.
func ownerAndOther(t *testing.T, client *http.Client, reps []*servertest.Instance) (owner, other *servertest.Instance) {
	t.Helper()
	if metric(t, client, reps[0].Control, "fenceproxy_shards_owned") == 1 {
		return reps[0], reps[1]
	}
	return reps[1], reps[0]
}

// answer is a response as a client received it.
type answer struct {
	Status           int
	Header, Trailer  http.Header
	Body             string
	TransferEncoding []string
}

// A write forwarded to the owner reaches the backend exactly as it does
// when sent to the owner itself, over both ways of the peer hop (small
// bodies through fasthttp, the rest through net/http's Transport): the
// request target's bytes (a path Go would re-escape, a query
// ReverseProxy would drop parts of), Host, header names and values
// (repeated, empty, unusual names, cookies, X-Forwarded-*), the body and its
// framing; and the client gets the owner's answer exactly as the owner
// gives it: status, headers, a streamed body and its trailer.
func TestClusterForwardIsTransparent(t *testing.T) {
	c := etcdtest.Start(t)
	backend := newEchoBackend(t)
	reps := startReplicas(t, c, backend.srv.URL, 2, map[string]string{"FENCEPROXY_SHARDS": "1"})
	client := servertest.NewClient(t)
	settle(t, client, reps, []string{"/bkt/settle"})
	owner, other := ownerAndOther(t, client, reps)
	before := metric(t, client, other.Control, `fenceproxy_peer_forwards_total{result="ok"}`)

	expect := &http.Client{Transport: &http.Transport{Proxy: nil, ExpectContinueTimeout: 5 * time.Second}, Timeout: 20 * time.Second}
	t.Cleanup(expect.CloseIdleConnections)
	small, large := bytes.Repeat([]byte("s"), 1024), bytes.Repeat([]byte("L"), 300<<10)
	cases := []struct {
		name, opaque, query string
		body                []byte
		chunked, expect     bool
	}{
		{name: "small", opaque: "/bkt/small", query: "v=1&x=a%2Fb", body: small},
		{name: "escapes", opaque: "/bkt/a%2Fb/%7e%41", query: "a;b=1&%zz&&=", body: small},
		{name: "verbatim-path", opaque: "/bkt/x|y\"z", query: "q", body: small},
		{name: "empty-body", opaque: "/bkt/empty", body: nil},
		{name: "large", opaque: "/bkt/large", body: large},
		{name: "chunked", opaque: "/bkt/chunked", body: small, chunked: true},
		{name: "expect", opaque: "/bkt/expect", body: small, expect: true},
	}
	send := func(base, id string, tc struct {
		name, opaque, query string
		body                []byte
		chunked, expect     bool
	}) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, base+"/", bytes.NewReader(tc.body))
		req.URL.Opaque, req.URL.RawQuery = tc.opaque, tc.query
		req.Host = "bucket.example:9000"
		if tc.chunked {
			req.ContentLength = -1
			req.Body = io.NopCloser(io.MultiReader(bytes.NewReader(tc.body[:100]), bytes.NewReader(tc.body[100:])))
		}
		if tc.expect {
			req.Header.Set("Expect", "100-continue")
		}
		req.Header.Set("X-Fencing-Token", "1")
		req.Header.Set("X-Request-Id", id)
		req.Header["X-Amz-Meta-Repeated"] = []string{"one", "two", "three"}
		req.Header["X-Empty"] = []string{""}
		req.Header["x_raw_name"] = []string{"a  b"}
		req.Header["Cookie"] = []string{"a=1;b=2;  c", "d=4"}
		req.Header["X-Forwarded-For"] = []string{"192.0.2.1, 198.51.100.2"}
		req.Header["X-Forwarded-Proto"] = []string{"https"}
		req.Header["Forwarded"] = []string{`for="[2001:db8::1]";proto=https`}
		req.Header["User-Agent"] = []string{"a client/1.0"}
		hc := client
		if tc.expect {
			hc = expect
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s: reading the answer: %v", id, err)
		}
		resp.Header.Del("Date")
		return answer{resp.StatusCode, resp.Header, resp.Trailer, string(b), resp.TransferEncoding}
	}
	for _, tc := range cases {
		direct := send(owner.ProxyURL(), tc.name+"-direct", tc)
		forwarded := send(other.ProxyURL(), tc.name+"-forwarded", tc)
		if direct.Status != http.StatusCreated || direct.Trailer.Get("X-Body-Sum") == "" || direct.Header.Get("x_raw_name") != "kept" {
			t.Fatalf("%s: the owner answered %+v", tc.name, direct)
		}
		if !reflect.DeepEqual(direct, forwarded) {
			t.Errorf("%s: the client got from the owner\n%+v\nand through the other replica\n%+v", tc.name, direct, forwarded)
		}
		d, ok1 := backend.request(tc.name + "-direct")
		f, ok2 := backend.request(tc.name + "-forwarded")
		if !ok1 || !ok2 {
			t.Fatalf("%s: the backend saw direct %v, forwarded %v", tc.name, ok1, ok2)
		}
		want := tc.opaque
		if tc.query != "" {
			want += "?" + tc.query
		}
		if d.URI != want || d.Host != "bucket.example:9000" {
			t.Errorf("%s: the backend saw %s (Host %s), want %s", tc.name, d.URI, d.Host, want)
		}
		f.Header.Set("X-Request-Id", tc.name+"-direct")
		if !reflect.DeepEqual(d, f) {
			t.Errorf("%s: the backend saw from the owner\n%+v\nand through the other replica\n%+v", tc.name, d, f)
		}
	}
	if got := metric(t, client, other.Control, `fenceproxy_peer_forwards_total{result="ok"}`) - before; got != float64(len(cases)) {
		t.Errorf("ok forwards counted %v, want %d", got, len(cases))
	}
}
