// Package clustertest is the multi-process fault test of the cluster mode
// (issue 15): a backend that records the order in which it applies writes,
// workers that take over resources with rising tokens through random
// replicas, faults injected on a schedule (SIGSTOP and SIGKILL of replicas
// and of the etcd leader, a replica cut off from etcd), and the checker.
// The replicas themselves are started by the caller (cmd/fenceproxy runs the
// binary) behind the Replica interface.
package clustertest

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Headers the workload sets on its writes; the proxy forwards them.
const (
	HeaderToken   = "X-Fencing-Token"
	HeaderWriteID = "X-Write-Id"
	// HeaderApplyDelay is a Go duration: the backend waits this long after
	// the whole body arrived before it applies the write (a backend that
	// committed the write and is slow to make it visible; it applies it
	// even when the proxy gave up meanwhile).
	HeaderApplyDelay = "X-Apply-Delay"
)

// Apply is one write the backend applied.
type Apply struct {
	Resource string
	Token    uint64
	ID       string // the X-Write-Id
	At       time.Time
}

// Backend is an HTTP backend in the test process. A PUT is applied only
// once its whole body arrived (Content-Length bytes read, or a chunked body
// to its end), after a small random delay (and the X-Apply-Delay it asks
// for); applying records its token on its resource (the path without its
// leading slash) in apply order. A GET answers the last applied token. It
// also counts, as it applies, every token below one applied before on the
// same resource (Decreases), so a run can stop once it found one.
type Backend struct {
	srv      *httptest.Server
	maxDelay time.Duration

	mu             sync.Mutex
	applies        []Apply
	last           map[string]uint64
	decreases      int
	incomplete     int                      // bodies that did not arrive whole (not applied)
	incompleteErrs []string                 // the first few reasons
	started        map[string]chan struct{} // by write id: closed when its headers arrived
	rng            *rand.Rand
	active         int       // PUTs being served now
	lastDone       time.Time // when the last PUT ended
}

// NewBackend starts a Backend whose random delay before applying is at
// most maxDelay; cleanup stops it.
func NewBackend(t testing.TB, maxDelay time.Duration) *Backend {
	t.Helper()
	b := &Backend{
		maxDelay: maxDelay, last: map[string]uint64{}, started: map[string]chan struct{}{},
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1)),
	}
	b.srv = httptest.NewServer(http.HandlerFunc(b.serve))
	t.Cleanup(b.srv.Close)
	return b
}

// URL is the backend's base URL.
func (b *Backend) URL() string { return b.srv.URL }

func (b *Backend) serve(w http.ResponseWriter, r *http.Request) {
	resource := strings.TrimPrefix(r.URL.Path, "/")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		b.mu.Lock()
		tok := b.last[resource]
		b.mu.Unlock()
		_, _ = io.WriteString(w, strconv.FormatUint(tok, 10))
		return
	case http.MethodPut:
	default:
		http.Error(w, "method not used by the workload", http.StatusMethodNotAllowed)
		return
	}
	b.mu.Lock()
	b.active++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.active--
		b.lastDone = time.Now()
		b.mu.Unlock()
	}()
	id := r.Header.Get(HeaderWriteID)
	b.markStarted(id)
	tok, err := strconv.ParseUint(r.Header.Get(HeaderToken), 10, 64)
	if err != nil {
		http.Error(w, "no token", http.StatusBadRequest)
		return
	}
	var extra time.Duration
	if s := r.Header.Get(HeaderApplyDelay); s != "" {
		if extra, err = time.ParseDuration(s); err != nil {
			http.Error(w, "bad "+HeaderApplyDelay, http.StatusBadRequest)
			return
		}
	}
	if err := readWhole(r); err != nil {
		b.mu.Lock()
		b.incomplete++
		if len(b.incompleteErrs) < 5 {
			b.incompleteErrs = append(b.incompleteErrs, fmt.Sprintf("%s token %d write %s: %v", resource, tok, id, err))
		}
		b.mu.Unlock()
		http.Error(w, "body did not arrive whole", http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	d := time.Duration(0)
	if b.maxDelay > 0 {
		d = time.Duration(b.rng.Int64N(int64(b.maxDelay) + 1))
	}
	b.mu.Unlock()
	time.Sleep(d + extra)
	b.mu.Lock()
	if tok < b.last[resource] {
		b.decreases++
	}
	b.last[resource] = max(b.last[resource], tok)
	b.applies = append(b.applies, Apply{Resource: resource, Token: tok, ID: id, At: time.Now()})
	b.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// readWhole reads the request body and reports whether all of it arrived:
// Content-Length bytes, or a chunked body up to its last chunk.
func readWhole(r *http.Request) error {
	if r.ContentLength < 0 {
		_, err := io.Copy(io.Discard, r.Body)
		return err
	}
	n, err := io.CopyN(io.Discard, r.Body, r.ContentLength)
	if err == nil && n != r.ContentLength {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func (b *Backend) markStarted(id string) {
	if id == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.started[id]
	if !ok {
		ch = make(chan struct{})
		b.started[id] = ch
	}
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// WaitStarted waits until the headers of the write id reached the backend
// (the proxy admitted it and is sending its body), at most timeout.
func (b *Backend) WaitStarted(id string, timeout time.Duration) bool {
	b.mu.Lock()
	ch, ok := b.started[id]
	if !ok {
		ch = make(chan struct{})
		b.started[id] = ch
	}
	b.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Forget drops what WaitStarted keeps of id.
func (b *Backend) Forget(id string) {
	b.mu.Lock()
	delete(b.started, id)
	b.mu.Unlock()
}

// WaitIdle waits until no PUT has been served for quiet (none running, the
// last one ended quiet ago), at most timeout, and reports whether it got
// there. After a run, replicas may still forward writes whose clients left
// (admitted once a slow raise committed); a final read taken meanwhile can
// precede their raise.
func (b *Backend) WaitIdle(quiet, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		b.mu.Lock()
		idle := b.active == 0 && time.Since(b.lastDone) >= quiet
		b.mu.Unlock()
		if idle {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Applies returns the applied writes in apply order.
func (b *Backend) Applies() []Apply {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Apply(nil), b.applies...)
}

// Decreases is the number of writes applied with a token below one applied
// before on the same resource.
func (b *Backend) Decreases() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.decreases
}

// Incomplete is the number of PUTs whose body did not arrive whole.
func (b *Backend) Incomplete() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.incomplete
}

// String summarizes the backend's counts.
func (b *Backend) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("%d writes applied on %d resources, %d bodies not whole (not applied; the first: %q)", len(b.applies), len(b.last), b.incomplete, b.incompleteErrs)
}
