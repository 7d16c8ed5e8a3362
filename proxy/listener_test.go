package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/wire"
)

// A backend cannot make the proxy listener pass for the control API, to
// which clients send their bearers: its wire.HeaderListener never reaches
// the client, in every mode (plain on both upstream paths, S3 pass, S3
// gateway, a write handed to its owner replica), for reads and fenced
// writes, on the final answer and on an informational one (103).
func TestBackendListenerHeaderStripped(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set(wire.HeaderListener, wire.ListenerControl)
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set(wire.HeaderListener, wire.ListenerControl)
		w.Header().Set("X-Backend", "answered")
		io.WriteString(w, "from the backend")
	}))
	defer backend.Close()
	backendURL, _ := url.Parse(backend.URL)

	for _, c := range []struct {
		name   string
		mod    func(*Options)
		method string
		token  string
	}{
		{"plain fast path read", func(o *Options) { o.UpstreamFastPath = true }, http.MethodGet, ""},
		{"plain transport read", func(o *Options) { o.UpstreamFastPath = false }, http.MethodGet, ""},
		{"plain fenced write", nil, http.MethodPut, "5"},
		{"plain transport fenced write", func(o *Options) { o.UpstreamFastPath = false }, http.MethodPut, "5"},
		{"s3 pass read", func(o *Options) { o.S3, o.S3Domains = "pass", []string{"127.0.0.1"} }, http.MethodGet, ""},
		{"s3 pass fenced write", func(o *Options) { o.S3, o.S3Domains = "pass", []string{"127.0.0.1"} }, http.MethodPut, "5"},
		{"s3 gateway read", func(o *Options) {
			o.S3, o.S3Domains, o.Gateway = "resign", []string{"127.0.0.1"}, anyCallerGateway{}
		}, http.MethodGet, ""},
		{"s3 gateway fenced write", func(o *Options) {
			o.S3, o.S3Domains, o.Gateway = "resign", []string{"127.0.0.1"}, anyCallerGateway{}
		}, http.MethodPut, "5"},
		{"write handed to its owner", func(o *Options) {
			// As cluster mode's forwarding: a ReverseProxy to the owner
			// (here the backend itself) writing to the proxy's writer.
			fwd := httputil.NewSingleHostReverseProxy(backendURL)
			o.Owner = func(*http.Request, []string) (Ownership, error) { return Ownership{Forward: fwd}, nil }
		}, http.MethodPut, "5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newTestProxy(t, newMemStore(), backend.URL, func(o *Options, _ *fence.Options) {
				if c.mod != nil {
					c.mod(o)
				}
			})
			var mu sync.Mutex
			var early []textproto.MIMEHeader
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					mu.Lock()
					defer mu.Unlock()
					early = append(early, h)
					return nil
				},
			})
			req, _ := http.NewRequestWithContext(ctx, c.method, srv.URL+"/bkt/obj", strings.NewReader("body"))
			if c.token != "" {
				req.Header.Set("X-Fencing-Token", c.token)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK || res.Header.Get("X-Backend") != "answered" {
				t.Fatalf("status %d, X-Backend %q, body %q: the backend's answer did not come through; the test proves nothing",
					res.StatusCode, res.Header.Get("X-Backend"), body)
			}
			if v, ok := res.Header[wire.HeaderListener]; ok {
				t.Errorf("the backend's %s: %q reached the client: the proxy listener passes for the control API", wire.HeaderListener, v)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, h := range early {
				if v, ok := h[wire.HeaderListener]; ok {
					t.Errorf("the backend's 103 carried %s: %q to the client", wire.HeaderListener, v)
				}
			}
		})
	}
}

// anyCallerGateway verifies every request as a caller allowed everything,
// whose re-signing changes nothing: gateway mode's path without SigV4.
type anyCallerGateway struct{}

func (anyCallerGateway) Verify(*http.Request) (S3Caller, error) { return anyCaller{}, nil }

type anyCaller struct{}

func (anyCaller) Allowed(string, string, bool) bool                               { return true }
func (anyCaller) AllowedList(string, string) bool                                 { return true }
func (anyCaller) AccessKeyID() string                                             { return "any" }
func (anyCaller) Valid() error                                                    { return nil }
func (anyCaller) PrepareBody(*http.Request) error                                 { return nil }
func (anyCaller) Resign(context.Context, *http.Request, s3.Request, string) error { return nil }
