// Package rawbackend is a backend for tests that answers HTTP/1.1 requests
// with raw bytes: odd, broken or hostile responses that net/http's server
// would never write. Each request is read with http.ReadRequest and its body
// read whole before the Answer runs.
package rawbackend

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Answer writes the response to r on c (br holds what the client sent after
// r); it returns false to close the connection.
type Answer func(c net.Conn, br *bufio.Reader, r *http.Request, body []byte) bool

// Backend is a listening raw backend; the test's cleanup closes it and its
// connections and waits for its goroutines.
type Backend struct {
	Listener net.Listener
	Conns    atomic.Int32 // connections accepted
	Open     atomic.Int32 // connections not yet closed

	mu     sync.Mutex
	seen   []string      // method, request target and body of each whole request
	closed chan struct{} // closed and replaced as a connection closes
	answer Answer
}

// New listens on addr (such as "127.0.0.1:0") and answers with answer.
func New(t testing.TB, addr string, answer Answer) *Backend {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b := &Backend{Listener: ln, answer: answer}
	var wg sync.WaitGroup
	var cmu sync.Mutex
	var all []net.Conn
	t.Cleanup(func() {
		ln.Close()
		cmu.Lock()
		for _, c := range all {
			c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			cmu.Lock()
			all = append(all, c)
			cmu.Unlock()
			b.Conns.Add(1)
			b.Open.Add(1)
			wg.Go(func() { b.serve(c) })
		}
	})
	return b
}

func (b *Backend) serve(c net.Conn) {
	defer func() {
		c.Close()
		b.Open.Add(-1)
		b.mu.Lock()
		if b.closed != nil {
			close(b.closed)
			b.closed = nil
		}
		b.mu.Unlock()
	}()
	br := bufio.NewReader(c)
	for {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return // cut short: not a whole request
		}
		b.mu.Lock()
		b.seen = append(b.seen, r.Method+" "+r.RequestURI+" "+string(body))
		b.mu.Unlock()
		if !b.answer(c, br, r, body) {
			return
		}
	}
}

// WaitOpen waits until at most n connections are open (it has closed the
// others), for at most d; it reports whether they are.
func (b *Backend) WaitOpen(n int32, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if b.closed == nil {
			b.closed = make(chan struct{})
		}
		closed := b.closed
		b.mu.Unlock()
		if b.Open.Load() <= n {
			return true
		}
		select {
		case <-closed:
		case <-timer.C:
			return b.Open.Load() <= n
		}
	}
}

// URL is the backend's base URL, http://host:port.
func (b *Backend) URL() string { return "http://" + b.Listener.Addr().String() }

// Requests returns "METHOD target body" for each whole request received.
func (b *Backend) Requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.seen...)
}

// CloseAfter answers with raw and closes the connection.
func CloseAfter(raw string) Answer {
	return func(c net.Conn, _ *bufio.Reader, _ *http.Request, _ []byte) bool {
		io.WriteString(c, raw)
		return false
	}
}

// KeepAfter answers with raw and keeps the connection open.
func KeepAfter(raw string) Answer {
	return func(c net.Conn, _ *bufio.Reader, _ *http.Request, _ []byte) bool {
		io.WriteString(c, raw)
		return true
	}
}
