package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

// failingBody yields n bytes, then fails.
type failingBody struct{ n int }

var errCutTest = errors.New("cut off by the test")

func (b *failingBody) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, errCutTest
	}
	k := min(len(p), b.n)
	copy(p, bytes.Repeat([]byte("x"), k))
	b.n -= k
	return k, nil
}

func (b *failingBody) Close() error { return nil }

// TestFailedBodyResetsConnection: a request body that fails part way ends
// the upstream connection with a reset, so that the backend's read of the
// body fails (ECONNRESET) rather than meeting an end of stream that a
// lenient backend takes for the body's end. Content-Length and chunked
// bodies, fast path on and off (a body this large always goes through the
// Transport).
func TestFailedBodyResetsConnection(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		for _, fast := range []bool{false, true} {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					got <- err
					return
				}
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					got <- err
					return
				}
				// Read the body as a lenient backend does: to its length, or to the end of the stream.
				buf := make([]byte, 32<<10)
				for {
					if _, err := c.Read(buf); err != nil {
						got <- err
						return
					}
				}
			}()
			u, _ := url.Parse("http://" + ln.Addr().String())
			cl := New(u, Options{FastPath: fast})
			req, _ := http.NewRequest(http.MethodPut, u.String()+"/bkt/obj", &failingBody{n: 256 << 10})
			req.ContentLength = 1 << 20
			if chunked {
				req.ContentLength = -1
			}
			_, err = cl.RoundTrip(req)
			if err == nil || !errors.Is(err, errCutTest) && !strings.Contains(err.Error(), errCutTest.Error()) {
				t.Errorf("chunked %v, fast path %v: RoundTrip error %v, want the body's", chunked, fast, err)
			}
			select {
			case backendErr := <-got:
				if !errors.Is(backendErr, syscall.ECONNRESET) {
					t.Errorf("chunked %v, fast path %v: the backend's read ended with %v, want ECONNRESET (a reset, not an end of stream)", chunked, fast, backendErr)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("chunked %v, fast path %v: the backend's read did not end", chunked, fast)
			}
			cl.CloseIdleConnections()
			ln.Close()
		}
	}
}
