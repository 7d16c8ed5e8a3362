// Package clustertest is the multi-process fault test of the cluster mode
// (issue 15): a backend that records the order in which it applies writes,
// workers that take over resources with rising tokens through random
// replicas, faults injected on a schedule (SIGSTOP and SIGKILL of replicas
// and of the etcd leader, a replica cut off from etcd), and the checker.
// The replicas themselves are started by the caller (cmd/fenceproxy runs the
// binary) behind the Replica interface.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	// HeaderAnswerDelay is a Go duration, for a lenient Backend: it holds
	// a whole body this long before it applies it and answers, and gives it
	// up if its connection is reset meanwhile (a store that fails a write
	// it can no longer answer), but not if the proxy only closed it (FIN).
	// It may outlast the lock-delay.
	HeaderAnswerDelay = "X-Answer-Delay"
	// HeaderReadRate is a rate in bytes per second at which a Backend reads
	// the body (a slow store), so that the socket buffers fill.
	HeaderReadRate = "X-Read-Rate"
	// HeaderReadPause is a Go duration: the Backend stops reading the body
	// this long once it read HeaderReadPauseAt bytes of it (a store that
	// stalls mid-body, a disk flush, a pause of its runtime), its kernel
	// still taking what the window it grew while reading fast lets in.
	HeaderReadPause   = "X-Read-Pause"
	HeaderReadPauseAt = "X-Read-Pause-At"
)

// Apply is one write the backend applied.
type Apply struct {
	Resource string
	Token    uint64
	ID       string // the X-Write-Id
	At       time.Time
	// Truncated: a lenient Backend applied a body cut short by an orderly
	// close (FIN); Bytes of it had arrived.
	Truncated bool
	Bytes     int64
}

// Backend is an HTTP backend in the test process. A PUT is applied only
// once its whole body arrived (Content-Length bytes read, or a chunked body
// to its end), after a small random delay (and the X-Apply-Delay it asks
// for); applying records its token on its resource (the path without its
// leading slash) in apply order. A GET answers the last applied token. It
// also counts, as it applies, every token below one applied before on the
// same resource (Decreases), so a run can stop once it found one. Any
// Backend reads a body as X-Read-Rate and X-Read-Pause ask (a slow or
// stalling store, so that the socket buffers fill).
//
// A lenient Backend (BackendOptions.Lenient) is as lax as real stores:
// it applies whatever arrived of a body its connection closed in an orderly
// way (FIN) before the end (versitygw v1.8.0 stores such a body), and only
// a reset stops it; it honours X-Answer-Delay.
type Backend struct {
	srv      *httptest.Server
	maxDelay time.Duration
	lenient  bool

	mu             sync.Mutex
	applies        []Apply
	last           map[string]uint64
	decreases      int
	incomplete     int                      // bodies that did not arrive whole (not applied)
	incompleteErrs []string                 // the first few reasons
	started        map[string]chan struct{} // by write id: closed when its headers arrived
	rng            *rand.Rand
	active         int           // PUTs being served now
	lastDone       time.Time     // when the last PUT ended
	changed        chan struct{} // closed (and dropped) when applies or incomplete change
}

// NewBackend starts a Backend whose random delay before applying is at
// most maxDelay; cleanup stops it.
func NewBackend(t testing.TB, maxDelay time.Duration) *Backend {
	return NewBackendWith(t, BackendOptions{MaxDelay: maxDelay})
}

// BackendOptions configures NewBackendWith.
type BackendOptions struct {
	MaxDelay time.Duration // the random delay before applying is at most this
	Lenient  bool          // apply bodies cut short by a FIN; honour X-Answer-Delay
}

// NewBackendWith starts a Backend; cleanup stops it.
func NewBackendWith(t testing.TB, opts BackendOptions) *Backend {
	t.Helper()
	b := &Backend{
		maxDelay: opts.MaxDelay, lenient: opts.Lenient, last: map[string]uint64{}, started: map[string]chan struct{}{},
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1)),
	}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(b.serve))
	b.srv.Listener = endListener{b.srv.Listener}
	b.srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	return b
}

// endListener's connections record how the peer ended them.
type endListener struct{ net.Listener }

func (l endListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &endConn{Conn: c}, nil
}

type connKey struct{}

// endConn records the first read error: io.EOF for a FIN, ECONNRESET for a
// reset. net/http's server reads on in the background once a request's
// body was read, so a handler sees the end of its connection.
type endConn struct {
	net.Conn
	mu  sync.Mutex
	end error
}

func (c *endConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && !errors.Is(err, syscall.EAGAIN) {
		var ne net.Error
		if !(errors.As(err, &ne) && ne.Timeout()) {
			c.mu.Lock()
			if c.end == nil {
				c.end = err
			}
			c.mu.Unlock()
		}
	}
	return n, err
}

// reset reports whether the peer reset the connection.
func (c *endConn) reset() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.end != nil && errors.Is(c.end, syscall.ECONNRESET)
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
	var extra, answer time.Duration
	if s := r.Header.Get(HeaderApplyDelay); s != "" {
		if extra, err = time.ParseDuration(s); err != nil {
			http.Error(w, "bad "+HeaderApplyDelay, http.StatusBadRequest)
			return
		}
	}
	if s := r.Header.Get(HeaderAnswerDelay); s != "" && b.lenient {
		if answer, err = time.ParseDuration(s); err != nil {
			http.Error(w, "bad "+HeaderAnswerDelay, http.StatusBadRequest)
			return
		}
	}
	var pace pacing
	pace.rate, _ = strconv.ParseInt(r.Header.Get(HeaderReadRate), 10, 64)
	if s := r.Header.Get(HeaderReadPause); s != "" {
		if pace.pause, err = time.ParseDuration(s); err != nil {
			http.Error(w, "bad "+HeaderReadPause, http.StatusBadRequest)
			return
		}
		pace.pauseAt, _ = strconv.ParseInt(r.Header.Get(HeaderReadPauseAt), 10, 64)
	}
	conn, _ := r.Context().Value(connKey{}).(*endConn)
	n, err := readWhole(r, pace)
	truncated := false
	if err != nil {
		// A lenient store takes an orderly close for the body's end.
		if truncated = b.lenient && errors.Is(err, io.ErrUnexpectedEOF) && (conn == nil || !conn.reset()); !truncated {
			b.mu.Lock()
			b.incomplete++
			b.notifyLocked()
			if len(b.incompleteErrs) < 5 {
				b.incompleteErrs = append(b.incompleteErrs, fmt.Sprintf("%s token %d write %s: %v", resource, tok, id, err))
			}
			b.mu.Unlock()
			http.Error(w, "body did not arrive whole", http.StatusBadRequest)
			return
		}
	}
	if answer > 0 {
		deadline := time.Now().Add(answer)
		for time.Now().Before(deadline) {
			if conn != nil && conn.reset() {
				b.mu.Lock()
				b.incomplete++
				b.notifyLocked()
				if len(b.incompleteErrs) < 5 {
					b.incompleteErrs = append(b.incompleteErrs, fmt.Sprintf("%s token %d write %s: reset while held %v", resource, tok, id, answer))
				}
				b.mu.Unlock()
				http.Error(w, "connection reset while the write was held: not applied", http.StatusInternalServerError)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
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
	b.applies = append(b.applies, Apply{Resource: resource, Token: tok, ID: id, At: time.Now(), Truncated: truncated, Bytes: n})
	b.notifyLocked()
	b.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// pacing is how a Backend reads a body: at most rate bytes per second when
// rate > 0, and with a pause once pauseAt bytes were read when pause > 0.
type pacing struct {
	rate    int64
	pause   time.Duration
	pauseAt int64
}

// readWhole reads the request body as pace says and reports how much
// arrived and whether all of it did: Content-Length bytes, or a chunked
// body up to its last chunk (io.ErrUnexpectedEOF: the stream ended before).
func readWhole(r *http.Request, pace pacing) (int64, error) {
	var body io.Reader = r.Body
	if pace.rate > 0 || pace.pause > 0 {
		body = &slowReader{r: r.Body, pacing: pace, start: time.Now()}
	}
	if r.ContentLength < 0 {
		return io.Copy(io.Discard, body)
	}
	n, err := io.CopyN(io.Discard, body, r.ContentLength)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// slowReader reads as its pacing says, in reads of at most 4 KiB when
// rate-limited.
type slowReader struct {
	r io.Reader
	pacing
	start  time.Time
	n      int64
	paused bool
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.pause > 0 && !s.paused {
		if s.n >= s.pauseAt {
			s.paused = true
			time.Sleep(s.pause)
			s.start = s.start.Add(s.pause) // the rate does not catch up the pause
		} else if rest := s.pauseAt - s.n; int64(len(p)) > rest {
			p = p[:rest]
		}
	}
	if s.rate > 0 {
		if len(p) > 4096 {
			p = p[:4096]
		}
		if ahead := time.Duration(float64(s.n)/float64(s.rate)*float64(time.Second)) - time.Since(s.start); ahead > 0 {
			time.Sleep(ahead)
		}
	}
	n, err := s.r.Read(p)
	s.n += int64(n)
	return n, err
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

// notifyLocked wakes Wait; b.mu is held.
func (b *Backend) notifyLocked() {
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
}

// Wait waits until cond holds, checking it as writes are applied or found
// incomplete, for at most timeout; it reports whether cond holds. cond must
// not hold b's lock (it may call Applies, Incomplete).
func (b *Backend) Wait(timeout time.Duration, cond func() bool) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		changed := b.changed
		b.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-changed:
		case <-timer.C:
			return cond()
		}
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
	truncated := 0
	for _, a := range b.applies {
		if a.Truncated {
			truncated++
		}
	}
	return fmt.Sprintf("%d writes applied on %d resources (%d of them cut short by a FIN), %d bodies not whole or reset (not applied; the first: %q)",
		len(b.applies), len(b.last), truncated, b.incomplete, b.incompleteErrs)
}
