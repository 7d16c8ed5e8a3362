package proxy

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/wire"
)

// s3WantCodes are the S3 error codes of the proxy's answers in S3 mode, by
// refusal reason, and by status for the answers without one.
var s3WantCodes = map[string]string{
	wire.ReasonStale: "StaleFencingToken", wire.ReasonMissing: "MissingFencingToken",
	wire.ReasonMalformed: "InvalidFencingToken", wire.ReasonBadResource: "InvalidURI",
	wire.ReasonHopByHop: "InvalidRequest", wire.ReasonUnsupported: "NotImplemented",
	wire.ReasonBadBody: "IncompleteBody", wire.ReasonMalformedXML: "MalformedXML", wire.ReasonSignature: "InvalidFencingTokenSignature",
	wire.ReasonForbidden: "AccessDenied", wire.ReasonJump: "FencingTokenTooFarAhead",
	wire.ReasonDrainTimeout: "FencingDrainTimeout", wire.ReasonStoreError: "ServiceUnavailable",
	wire.ReasonClientGone: "RequestCanceled", wire.ReasonInternal: "InternalError",
	"408": "RequestTimeout", "502": "BadGateway", "504": "GatewayTimeout",
}

type s3TestError struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource"`
	RequestID string   `xml:"RequestId"`
}

// s3CheckXML checks an answer of the proxy in S3 mode: application/xml, the
// S3 <Error> body with code, Resource path and the request id also in
// X-Amz-Request-Id; it returns the decoded body.
func s3CheckXML(t *testing.T, header http.Header, body, code, path string) s3TestError {
	t.Helper()
	if ct := header.Get("Content-Type"); ct != "application/xml" {
		t.Fatalf("Content-Type %q, body %s; want application/xml", ct, body)
	}
	if !strings.HasPrefix(body, `<?xml version="1.0" encoding="UTF-8"?><Error>`) {
		t.Errorf("body %s: want the XML declaration, then <Error>", body)
	}
	var e s3TestError
	if err := xml.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if e.Code != code || e.Resource != path || e.Message == "" || e.RequestID == "" || header.Get("X-Amz-Request-Id") != e.RequestID {
		t.Errorf("body %s, X-Amz-Request-Id %q; want code %s, Resource %s, a message and the request id in both",
			body, header.Get("X-Amz-Request-Id"), code, path)
	}
	return e
}

// TestS3ErrorEveryReason: each class of the proxy's errors (refuse's table,
// and forbidden from an Authenticate hook) answers, over HTTP, in S3 mode an
// S3 <Error> with its code and in off mode the problem, with the same status
// and the same Fencing-* and Retry-After headers in both.
func TestS3ErrorEveryReason(t *testing.T) {
	cases := append(problemCases[:len(problemCases):len(problemCases)], struct {
		err    func(detail, resource string, current uint64) error
		status int
		reason string
		detail *string
	}{func(d, _ string, _ uint64) error { return fmt.Errorf("%w: %s", ErrForbidden, d) }, 403, wire.ReasonForbidden, nil})
	serve := func(s3 string) func(i int) *http.Response {
		opts := testOptions(t, "http://backend")
		opts.S3, opts.S3Domains = s3, []string{"localhost"}
		p, _ := newProxy(t, newMemStore(), opts, fence.Options{DrainTimeout: time.Second})
		var i int
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.refuse(&exchange{w: w, r: r, resources: []string{"bkt/obj"}, tokenText: "41"}, cases[i].err("why", "bkt/obj", 42))
		}))
		t.Cleanup(srv.Close)
		return func(n int) *http.Response {
			i = n
			resp, err := http.Post(srv.URL+"/bkt/obj", "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
	}
	off, pass := serve("off"), serve("pass")
	for i, c := range cases {
		t.Run(c.reason, func(t *testing.T) {
			po, pp := off(i), pass(i)
			defer po.Body.Close()
			bo, _ := io.ReadAll(po.Body)
			bp, _ := io.ReadAll(pp.Body)
			pp.Body.Close()
			if po.StatusCode != c.status || pp.StatusCode != c.status {
				t.Errorf("status off %d, pass %d; want %d", po.StatusCode, pp.StatusCode, c.status)
			}
			for _, h := range []string{wire.HeaderRefused, wire.HeaderCurrentToken, "Retry-After", "Cache-Control"} {
				if po.Header.Get(h) != pp.Header.Get(h) {
					t.Errorf("%s: off %q, pass %q", h, po.Header.Get(h), pp.Header.Get(h))
				}
			}
			if ct := po.Header.Get("Content-Type"); ct != "application/problem+json" || !strings.Contains(string(bo), `"reason":"`+c.reason+`"`) {
				t.Errorf("off mode: %s %s", ct, bo)
			}
			e := s3CheckXML(t, pp.Header, string(bp), s3WantCodes[c.reason], "/bkt/obj")
			if c.reason == wire.ReasonStale && (!strings.Contains(e.Message, "current maximum is 42") || !strings.Contains(e.Message, "token 21")) {
				t.Errorf("stale message %q: want the token and the current maximum", e.Message)
			}
		})
	}
}

// s3Put sends a PUT of body with token to srv in path style.
func s3Put(ctx context.Context, base, path, token, body string) (*http.Response, string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+path, strings.NewReader(body))
	req.Header.Set("X-Fencing-Token", token)
	req.Header.Set("X-Test-Id", "t"+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

// TestS3ErrorUpstreamAndBarrier: the answers made beyond refuse's first
// table in S3 mode, over real HTTP: a drain timeout (503 FencingDrainTimeout
// with Retry-After), an upload cut off by a larger token (409
// StaleFencingToken with the current maximum), a backend that refuses
// connections (502 BadGateway) or answers too late (504 GatewayTimeout).
func TestS3ErrorUpstreamAndBarrier(t *testing.T) {
	s3 := func(o *Options) { o.S3, o.S3Domains = "pass", []string{"127.0.0.1", "example"} }

	t.Run("drain_timeout", func(t *testing.T) {
		backend := newGateBackend(t)
		srv := newTestProxy(t, newMemStore(), backend.URL, func(o *Options, f *fence.Options) { s3(o); f.DrainTimeout = 200 * time.Millisecond })
		rel := backend.holdNext("t5")
		defer rel()
		done := make(chan error, 1)
		go func() { _, _, err := s3Put(context.Background(), srv.URL, "/bkt/obj", "5", "a"); done <- err }()
		backend.waitArrival(t, "t5")
		resp, body, err := s3Put(context.Background(), srv.URL, "/bkt/obj", "6", "b")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || resp.Header.Get(wire.HeaderRefused) != wire.ReasonDrainTimeout {
			t.Fatalf("%d %v %s; want 503 drain_timeout with Retry-After", resp.StatusCode, resp.Header, body)
		}
		s3CheckXML(t, resp.Header, body, "FencingDrainTimeout", "/bkt/obj")
		rel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("upload_cut", func(t *testing.T) {
		_, backend := newLateBackend(t)
		opts := testOptions(t, backend.URL)
		s3(&opts)
		opts.UploadIdleTimeout = time.Minute
		p, barrier := newProxy(t, newMemStore(), opts, fence.Options{DrainTimeout: 10 * time.Second})
		srv := httptest.NewServer(p)
		t.Cleanup(srv.Close)
		conn, br := slowUpload(t, srv.URL, "/obj", "5", false)              // Host bkt.example: virtual-hosted bkt/obj
		waitFor(t, func() bool { return barrier.InFlight("bkt/obj") == 1 }) // the proxy admits the slow upload
		if resp, body, err := s3Put(context.Background(), srv.URL, "/bkt/obj", "6", "b"); err != nil || resp.StatusCode != 204 {
			t.Fatalf("token 6: %v %v %s", resp, err, body)
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 409 || resp.Header.Get(wire.HeaderCurrentToken) != "6" {
			t.Fatalf("cut-off writer: %d %v %s", resp.StatusCode, resp.Header, body)
		}
		e := s3CheckXML(t, resp.Header, string(body), "StaleFencingToken", "/obj")
		if !strings.Contains(e.Message, "cut off") || !strings.Contains(e.Message, "current maximum is 6") || !strings.Contains(e.Message, "token 5") {
			t.Errorf("message %q: want the cut, the token and the current maximum", e.Message)
		}
	})

	t.Run("bad_gateway", func(t *testing.T) {
		dead, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := newTestProxy(t, newMemStore(), "http://"+dead.Addr().String(), func(o *Options, _ *fence.Options) { s3(o) })
		dead.Close()
		resp, body, err := s3Put(context.Background(), srv.URL, "/bkt/obj", "4", "x")
		if err != nil || resp.StatusCode != 502 {
			t.Fatalf("%v %v %s; want 502", resp, err, body)
		}
		s3CheckXML(t, resp.Header, body, "BadGateway", "/bkt/obj")
	})

	t.Run("gateway_timeout", func(t *testing.T) {
		release := make(chan struct{})
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(backend.Close)
		t.Cleanup(func() { close(release) })
		srv := newTestProxy(t, newMemStore(), backend.URL, func(o *Options, _ *fence.Options) { s3(o); o.ResponseTimeout = 200 * time.Millisecond })
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/bkt/slow", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 504 {
			t.Fatalf("%d %s; want 504", resp.StatusCode, body)
		}
		s3CheckXML(t, resp.Header, string(body), "GatewayTimeout", "/bkt/slow")
	})
}

// TestS3HostErrorNamesTheHost: a Host that is no S3 domain of the proxy is
// refused (400 bad_resource, InvalidURI, nothing forwarded) with a message
// that names the Host as the problem, not the request path, which is fine.
func TestS3HostErrorNamesTheHost(t *testing.T) {
	var forwarded atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { forwarded.Add(1) }))
	t.Cleanup(backend.Close)
	srv := newTestProxy(t, newMemStore(), backend.URL, func(o *Options, _ *fence.Options) {
		o.S3, o.S3Domains = "pass", []string{"localhost", "127.0.0.1"}
	})
	for _, tc := range []struct{ host, path, want string }{
		{"other.example", "/bkt/obj", `the Host names no S3 endpoint of this proxy: "other.example" is neither one of FENCEPROXY_S3_DOMAINS`},
		{"bkt.127.0.0.1", "/obj", `the Host names no S3 endpoint of this proxy: "bkt.127.0.0.1" is neither`},
		{"ab.localhost:8080", "/obj", `the Host names no S3 endpoint of this proxy: "ab.localhost:8080": virtual-hosted bucket "ab": `},
	} {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+tc.path, strings.NewReader("x"))
		req.Host = tc.host
		req.Header.Set("X-Fencing-Token", "5")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || resp.Header.Get(wire.HeaderRefused) != wire.ReasonBadResource {
			t.Fatalf("Host %s: %d %q %s; want 400 bad_resource", tc.host, resp.StatusCode, resp.Header.Get(wire.HeaderRefused), body)
		}
		e := s3CheckXML(t, resp.Header, string(body), "InvalidURI", tc.path)
		if !strings.HasPrefix(e.Message, tc.want) || strings.Contains(e.Message, "request path") {
			t.Errorf("Host %s: message %q; want it to start with %q and not blame the request path", tc.host, e.Message, tc.want)
		}
	}
	if n := forwarded.Load(); n != 0 {
		t.Errorf("%d requests forwarded; want none", n)
	}
}

// TestS3PathStyleOnly: with S3VirtualHosted off (S3_VIRTUAL_HOSTED=false),
// for a store that does not read {bucket}.{domain} as a bucket, a
// virtual-hosted Host is refused (400 bad_resource, nothing forwarded) with
// a message that says so; path style is forwarded and fenced on the same
// resource as before.
func TestS3PathStyleOnly(t *testing.T) {
	var mu sync.Mutex
	var forwarded []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		forwarded = append(forwarded, r.Host+r.URL.Path)
		mu.Unlock()
	}))
	t.Cleanup(backend.Close)
	store := newMemStore()
	srv := newTestProxy(t, store, backend.URL, func(o *Options, _ *fence.Options) {
		o.S3, o.S3Domains, o.S3VirtualHosted = "pass", []string{"localhost"}, false
	})
	send := func(host, path string) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+path, strings.NewReader("x"))
		req.Host = host
		req.Header.Set("X-Fencing-Token", "5")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	status, body := send("reports.localhost:8080", "/jobs/a")
	if status != 400 || !strings.Contains(body, "FENCEPROXY_S3_VIRTUAL_HOSTED=false") {
		t.Errorf("virtual-hosted PUT: %d %s; want 400 naming FENCEPROXY_S3_VIRTUAL_HOSTED=false", status, body)
	}
	if status, body := send("localhost:8080", "/reports/jobs/a"); status != 200 {
		t.Errorf("path-style PUT: %d %s; want 200", status, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(forwarded) != 1 || forwarded[0] != "localhost:8080/reports/jobs/a" {
		t.Errorf("forwarded %q; want the path-style PUT only", forwarded)
	}
	if m, _ := store.Max("reports/jobs/a"); m != 5 {
		t.Errorf("fence of reports/jobs/a: %d, want 5", m)
	}
}
