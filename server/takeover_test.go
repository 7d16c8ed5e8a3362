package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// bodyBackend records the first byte and token of every body that arrived whole.
type bodyBackend struct {
	mu      sync.Mutex
	applied []string // "<first byte>:<token>"
}

func (b *bodyBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || len(body) == 0 {
		http.Error(w, "incomplete body", http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	b.applied = append(b.applied, fmt.Sprintf("%c:%s", body[0], r.Header.Get("X-Fencing-Token")))
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (b *bodyBackend) got() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.applied, " ")
}

// The reproduction of the takeover bypass, on the command as it is deployed:
// A stalls in the middle of a 40 KiB upload (the fast path); the resource is
// taken over by an operator's raise or a lease acquire; A's upload is cut off
// and answered 409, and the backend never applies it. Before every raise went
// through the barrier, A got 200 and its write was applied after the takeover.
func TestTakeoverReproduction(t *testing.T) {
	for _, how := range []string{"admin raise", "lease acquire"} {
		t.Run(how, func(t *testing.T) {
			backend := &bodyBackend{}
			srv := httptest.NewServer(backend)
			t.Cleanup(srv.Close)
			in := servertest.Start(t, map[string]string{
				"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_ADMIN_TOKEN": "adm",
				"FENCEPROXY_LEASE_MIN_TTL": "100ms", "FENCEPROXY_LEASE_GRACE": "100ms",
			})
			const path = "/bkt/obj1"
			a := "1"
			if how == "lease acquire" {
				status, out := servertest.Call(t, http.MethodPost, in.ControlURL()+"/v1/leases"+path, `{"holder":"A","ttl":"100ms"}`, "")
				if status != http.StatusCreated {
					t.Fatalf("A's acquire: %d %v", status, out)
				}
				a = out["token"].(string)
			}
			req, _ := http.NewRequest(http.MethodPut, in.ProxyURL()+path, strings.NewReader("first"))
			req.Header.Set("X-Fencing-Token", a)
			if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
				t.Fatalf("A's first write: %v %v", resp, err)
			} else {
				resp.Body.Close()
			}

			// A sends 8 KiB of 40 KiB, then stalls.
			conn, err := net.Dial("tcp", in.Proxy)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: bkt.example\r\nX-Fencing-Token: %s\r\nContent-Length: %d\r\n\r\n%s",
				path, a, 40<<10, strings.Repeat("A", 8<<10))
			// The admission shows only in the in-flight gauge.
			servertest.Eventually(t, 10*time.Second, "A's upload is admitted", func() bool {
				return scrape(t, in, "fenceproxy_inflight_requests") == 1
			})

			var b string
			switch how {
			case "admin raise":
				status, out := servertest.Call(t, http.MethodPut, in.ControlURL()+"/v1/fences"+path, `{"token":50}`, "adm")
				if status != http.StatusOK || out["token"] != "50" {
					t.Fatalf("admin raise: %d %v", status, out)
				}
				b = "50"
			case "lease acquire":
				// A's lease and grace run out on the server's clock, which
				// signals no event: retry.
				servertest.Eventually(t, 10*time.Second, "B acquires", func() bool {
					status, out := servertest.Call(t, http.MethodPost, in.ControlURL()+"/v1/leases"+path, `{"holder":"B","ttl":"10s"}`, "")
					if status != http.StatusCreated && status != http.StatusConflict {
						t.Fatalf("B's acquire: %d %v", status, out)
					}
					if status == http.StatusCreated {
						b = out["token"].(string)
					}
					return status == http.StatusCreated
				})
			}
			// The takeover returned: A's upload is answered without sending the rest.
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("A got no answer after the takeover: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusConflict || resp.Header.Get("Fencing-Refused") != "stale" || resp.Header.Get("Fencing-Current-Token") != b {
				t.Fatalf("A's stalled upload: %d %v, want 409 stale with current token %s", resp.StatusCode, resp.Header, b)
			}
			req, _ = http.NewRequest(http.MethodPut, in.ProxyURL()+path, strings.NewReader("late"))
			req.Header.Set("X-Fencing-Token", a)
			if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusConflict {
				t.Fatalf("A's late write: %v %v, want 409", resp, err)
			} else {
				resp.Body.Close()
			}
			req, _ = http.NewRequest(http.MethodPut, in.ProxyURL()+path, strings.NewReader("B"))
			req.Header.Set("X-Fencing-Token", b)
			if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
				t.Fatalf("B's write: %v %v", resp, err)
			} else {
				resp.Body.Close()
			}
			if got, want := backend.got(), "f:"+a+" B:"+b; got != want {
				t.Fatalf("the backend applied %q, want %q (A's stalled upload never)", got, want)
			}
			if cuts := scrape(t, in, `fenceproxy_upstream_errors_total{kind="upload_cut"}`); cuts != 1 {
				t.Fatalf("upload_cut = %v, want 1", cuts)
			}
		})
	}
}
