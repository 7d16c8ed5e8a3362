package proxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRefusalReadAfterWholeBody: a client that sends a refused write's whole
// body before it reads (no Expect: 100-continue, or a client that ignores
// it, as aws-sdk-go-v2 does through net/http) reads the refusal, not a
// connection reset: the proxy reads and discards what follows its answer, up
// to a bound. Nothing reaches the backend. A client that waits on Expect
// gets the refusal at once, before it sends anything.
func TestRefusalReadAfterWholeBody(t *testing.T) {
	backend := newFwdBackend(t)
	_, srv := newFwdProxy(t, backend.URL, fwdOptions())
	addr := strings.TrimPrefix(srv.URL, "http://")
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/bkt/obj", strings.NewReader("current"))
	req.Header.Set("X-Fencing-Token", "42")
	res, err := newFwdClient(t).Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("PUT with 42: %v %v", res, err)
	}
	res.Body.Close()
	backend.take()

	for _, expect := range []bool{false, true} {
		for range 3 {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			body := bytes.Repeat([]byte("s"), 8<<20)
			head := fmt.Sprintf("PUT /bkt/obj HTTP/1.1\r\nHost: %s\r\nX-Fencing-Token: 41\r\nContent-Length: %d\r\n", addr, len(body))
			if expect {
				head += "Expect: 100-continue\r\n"
			}
			if _, err := conn.Write([]byte(head + "\r\n")); err != nil {
				t.Fatal(err)
			}
			wrote := make(chan error, 1)
			if !expect {
				go func() { _, err := conn.Write(body); wrote <- err }()
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("Expect %v: no answer: %v", expect, err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusConflict {
				t.Fatalf("Expect %v: status %d, want 409", expect, res.StatusCode)
			}
			if !expect {
				if err := <-wrote; err != nil {
					t.Errorf("writing the whole 8 MiB body of a refused write: %v; want it read (and discarded) by the proxy", err)
				}
			}
			conn.Close()
		}
	}
	if n := backend.count(); n != 0 {
		t.Errorf("backend got %d requests, want none", n)
	}
}
