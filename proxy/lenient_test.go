package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/internal/clustertest"
	"github.com/fenceproxy/fenceproxy/wire"
)

// The barrier's two waits in one process, against a backend as lax as real
// stores (clustertest's lenient Backend: it applies a body its connection
// closed in an orderly way before the end, and applies a whole body late
// even when the proxy gave up on it).

// unprotected reports whether the upstream teeth build runs with the named
// protection off (FENCEPROXY_TEST_UPSTREAM_UNPROTECTED); the tests then
// expect the violation the protection prevents.
func unprotected(name string) bool {
	return strings.Contains(","+os.Getenv("FENCEPROXY_TEST_UPSTREAM_UNPROTECTED")+",", ","+name+",")
}

// A raise cuts a smaller token's upload in flight: the lenient backend gets
// a reset, never an end of stream, so it applies nothing of it; the raise's
// write is applied alone. Content-Length and chunked bodies. With the reset
// switched off (teeth), the backend applies the cut body.
func TestLenientRaiseCutsUpload(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			backend := clustertest.NewBackendWith(t, clustertest.BackendOptions{Lenient: true})
			proxy := newTestProxy(t, newMemStore(), backend.URL(), func(o *Options, f *fence.Options) {
				f.DrainTimeout = 10 * time.Second
				o.UploadIdleTimeout = time.Minute
			})
			conn, err := net.Dial("tcp", strings.TrimPrefix(proxy.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			head := "PUT /bkt/obj HTTP/1.1\r\nHost: bkt.example\r\nX-Fencing-Token: 41\r\nX-Write-Id: A\r\n"
			if chunked {
				head += "Transfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n"
			} else {
				head += "Content-Length: 1048576\r\n\r\n0123456789abcdef"
			}
			if _, err := io.WriteString(conn, head); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			if !backend.WaitStarted("A", 5*time.Second) {
				t.Fatal("41's headers did not reach the backend")
			}
			if r := put(context.Background(), proxy.URL, "/bkt/obj", "42", "B", clustertest.HeaderWriteID, "B"); r.status != http.StatusOK {
				t.Fatalf("token 42: %d %s", r.status, r.body)
			}
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the cut-off writer got no answer: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusConflict || resp.Header.Get(wire.HeaderRefused) != wire.ReasonStale {
				t.Fatalf("cut-off writer: %d %v", resp.StatusCode, resp.Header)
			}
			// The cut body's end reaches the backend at once, a reset or a FIN.
			backend.Wait(5*time.Second, func() bool { return backend.Incomplete() != 0 || len(backend.Applies()) >= 2 })
			applies := backend.Applies()
			v := append(clustertest.CheckTruncatedApplies(applies), clustertest.CheckApplied(applies)...)
			if unprotected("reset") {
				if len(v) == 0 {
					t.Fatalf("teeth: with the reset off the lenient backend applied no cut body (%s)", backend)
				}
				t.Logf("teeth: found %v", v)
				return
			}
			if len(v) > 0 || len(applies) != 1 || applies[0].Token != 42 || backend.Incomplete() != 1 {
				t.Fatalf("violations %v; applied %+v; %s; want 42 alone, 41 reset", v, applies, backend)
			}
		})
	}
}

// A write the proxy gave up on after sending it whole (no answer within the
// response timeout) is applied late by the lenient backend; the abandon
// grace holds the next token back until then, so 41 lands before 42. With
// the grace off, 42 lands first and 41 after it (the same test, showing
// what the grace prevents). Fast path on and off.
func TestLenientAbandonGrace(t *testing.T) {
	for _, fast := range []bool{true, false} {
		for _, grace := range []time.Duration{1500 * time.Millisecond, 0} {
			t.Run(fmt.Sprintf("fast=%v/grace=%v", fast, grace), func(t *testing.T) {
				backend := clustertest.NewBackendWith(t, clustertest.BackendOptions{Lenient: true})
				proxy := newTestProxy(t, newMemStore(), backend.URL(), func(o *Options, f *fence.Options) {
					o.ResponseTimeout = 200 * time.Millisecond
					o.UpstreamFastPath = fast
					f.AbandonGrace = grace
				})
				if r := put(context.Background(), proxy.URL, "/bkt/obj", "41", "A", clustertest.HeaderWriteID, "A",
					clustertest.HeaderApplyDelay, "700ms"); r.status != http.StatusGatewayTimeout {
					t.Fatalf("token 41: %d %s, want 504", r.status, r.body)
				}
				if r := put(context.Background(), proxy.URL, "/bkt/obj", "42", "B", clustertest.HeaderWriteID, "B"); r.status != http.StatusOK {
					t.Fatalf("token 42: %d %s", r.status, r.body)
				}
				if !backend.Wait(5*time.Second, func() bool { return len(backend.Applies()) == 2 }) {
					t.Fatal("condition not met within 5s")
				}
				v := clustertest.CheckApplied(backend.Applies())
				if grace == 0 {
					if len(v) == 0 {
						t.Fatalf("without the grace 41 did not land after 42: %+v", backend.Applies())
					}
					return
				}
				if len(v) > 0 {
					t.Fatalf("with the grace: %v", v)
				}
			})
		}
	}
}

// An owned write (cluster mode) whose backend holds it past the ownership's
// validity: the exchange ends at the validity with a reset, on the fast path
// (its connection's deadline, upstream.WithValidUntil) as on the Transport
// (the ownership's context), so the lenient backend, which gives up a held
// write whose connection was reset, never applies it, and the client gets
// no 2xx. With the fast path's validity switched off (teeth), the backend
// applies it after the validity and the client gets 200.
func TestOwnedWriteEndsAtValidity(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			backend := clustertest.NewBackendWith(t, clustertest.BackendOptions{Lenient: true})
			const validity = 400 * time.Millisecond
			proxy := newTestProxy(t, newMemStore(), backend.URL(), func(o *Options, f *fence.Options) {
				o.UpstreamFastPath = fast
				o.ResponseTimeout = time.Minute
				o.Owner = func(r *http.Request, resources []string) (Ownership, error) {
					until := time.Now().Add(validity)
					ctx, cancel := context.WithDeadline(context.Background(), until)
					return Ownership{
						Context:    ctx,
						Valid:      func() bool { return time.Now().Before(until) },
						ValidUntil: func() time.Time { return until },
						Done:       cancel,
					}, nil
				}
			})
			start := time.Now()
			r := put(context.Background(), proxy.URL, "/bkt/obj", "41", "A", clustertest.HeaderWriteID, "A",
				clustertest.HeaderAnswerDelay, "2s")
			took := time.Since(start)
			if fast && unprotected("validity") {
				if r.status != http.StatusOK || len(backend.Applies()) != 1 {
					t.Fatalf("teeth: %d after %v, applies %+v; want the write applied past its validity", r.status, took, backend.Applies())
				}
				t.Logf("teeth: applied %v after admission, past the validity of %v", took.Round(time.Millisecond), validity)
				return
			}
			if r.status/100 == 2 || took > validity+time.Second {
				t.Fatalf("status %d after %v, want no 2xx, at the validity (%v)", r.status, took, validity)
			}
			// The backend would have applied it 2s after arrival.
			time.Sleep(2500*time.Millisecond - took) // asserting nothing happens: no apply by then
			if a := backend.Applies(); len(a) != 0 {
				t.Fatalf("the backend applied %+v after the validity ended; %s", a, backend)
			}
		})
	}
}

// A fast-path write whose ownership's validity has passed when it is to be
// written (here: Valid still says yes, as it would a moment before) is not
// written at all: 503 shard_unavailable, nothing reaches the backend.
func TestOwnedFastPathNotWrittenPastValidity(t *testing.T) {
	backend := clustertest.NewBackendWith(t, clustertest.BackendOptions{Lenient: true})
	proxy := newTestProxy(t, newMemStore(), backend.URL(), func(o *Options, f *fence.Options) {
		o.UpstreamFastPath = true
		o.Owner = func(r *http.Request, resources []string) (Ownership, error) {
			until := time.Now().Add(-time.Millisecond)
			return Ownership{
				Context:    context.Background(),
				Valid:      func() bool { return true },
				ValidUntil: func() time.Time { return until },
			}, nil
		}
	})
	r := put(context.Background(), proxy.URL, "/bkt/obj", "41", "A", clustertest.HeaderWriteID, "A")
	if r.status != http.StatusServiceUnavailable || r.header.Get(wire.HeaderRefused) != wire.ReasonShardUnavailable {
		t.Fatalf("status %d %s, want 503 shard_unavailable", r.status, r.body)
	}
	if backend.WaitStarted("A", 200*time.Millisecond) {
		t.Fatalf("the write reached the backend: %s", backend)
	}
}
