package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
)

var (
	// errUploadCut: a larger token took over the resource while this write was
	// still sending its body; the body was cut off before its end (409).
	errUploadCut = errors.New("upload cut off: a larger fencing token took over the resource before the whole body was sent")
	// errUploadIdle: the client paused its upload longer than the upload idle
	// timeout; the body was cut off before its end (408).
	errUploadIdle = errors.New("upload cut off: the client sent no body bytes within the upload idle timeout")
	// errUploadSlow: the client sent its body slower than the upload's
	// minimum rate over a rate window; the body was cut off before its
	// end (408).
	errUploadSlow = errors.New("upload cut off: the client sent its body slower than the minimum upload rate")
	// errBadBody: the client broke its request body's framing (chunked
	// coding) or ended it before its length (400 bad_body).
	errBadBody = errors.New("request body malformed or cut short")
)

// hasBody reports a request body that may hold bytes.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// checkStreamLength refuses an HTTP/2 request whose content-length its
// stream contradicts before anything is forwarded (errBadBody; RFC 9113
// section 8.1.1 calls it malformed). net/http's HTTP/2 server hands such a
// request over with an empty body when the stream ended with its headers, and
// resets a stream whose DATA exceed a content-length of 0 only once they
// arrive, after an empty write could have been forwarded; so a stream that
// declares 0 and is still open is read to its end here first.
func checkStreamLength(r *http.Request) error {
	if r.ProtoMajor != 2 {
		return nil
	}
	cl, ok := r.Header["Content-Length"]
	if !ok {
		return nil
	}
	n, err := strconv.ParseUint(cl[0], 10, 63)
	if len(cl) != 1 || err != nil {
		return fmt.Errorf("%w: content-length %q", errBadBody, cl)
	}
	switch {
	case n > 0 && r.ContentLength != int64(n): // the server sets it only for a stream still open
		return fmt.Errorf("%w: content-length %d, but the stream ended with its headers", errBadBody, n)
	case n == 0 && r.Body != nil && r.Body != http.NoBody:
		var b [1]byte
		if _, err := io.ReadFull(r.Body, b[:]); err != io.EOF {
			return fmt.Errorf("%w: data on a stream whose content-length is 0", errBadBody)
		}
		r.Body = http.NoBody
	}
	return nil
}

// uploadBody is a forwarded request's body as the upstream client reads it,
// for every request with a body: each holds an upload slot (MaxUploads)
// while its client sends, so each is cut off after a pause longer than idle
// or a body slower than minRate over a window. For an admitted write it also
// tells the barrier when the whole body has been handed over (from then on a
// backend may apply the write), and stops at once when a larger token cuts
// its upload; for any other request up is its own, which nothing cuts. An
// upload stopped before its end never hands over its last bytes (nor, when
// chunked, the terminating chunk), so no backend can apply it.
type uploadBody struct {
	body      *clientBody
	up        *fence.Upload
	rc        http.ResponseController // a value: no allocation per request
	idle      time.Duration           // 0: no idle timeout
	remaining int64                   // bytes until the end of a Content-Length body; -1: until EOF

	// The minimum rate (Settings.UploadMinRate): every window of time
	// spent in the client's reads must bring minRate × window bytes.
	// Time the upstream client spends writing (a slow backend) is not the
	// client's and is not counted.
	minRate int64         // bytes/s; 0: no minimum
	window  time.Duration // above 0 when minRate is
	waited  time.Duration // time in reads of this window
	got     int64         // bytes read in this window

	// valid reports why the write may no longer be sent, nil while it may:
	// in cluster mode this replica's ownership of the write's shard ended
	// (errOwnershipEnded), in gateway mode its key was revoked
	// (ErrKeyRevoked). nil: always valid.
	valid func() error

	// Read runs on the upstream client's goroutine, which may still be
	// reading when the exchange has already failed for another reason.
	mu      sync.Mutex
	stopped error // errUploadCut, errUploadIdle, errUploadSlow or the client's read error
}

// init makes b wrap body, r's, for up (r.ContentLength -1: read to EOF),
// with the idle timeout idle and the minimum rate minRate (bytes/s; 0: none)
// over window. A barrier that may cut up needs up.Interrupt = b.interrupt.
func (b *uploadBody) init(w http.ResponseWriter, r *http.Request, body *clientBody, up *fence.Upload, idle time.Duration,
	minRate int64, window time.Duration) {
	b.body, b.up, b.rc, b.idle, b.remaining = body, up, *http.NewResponseController(w), idle, r.ContentLength
	b.minRate, b.window = minRate, window
}

// interrupt wakes a read blocked on a stalled client (a past deadline).
func (b *uploadBody) interrupt() { _ = b.rc.SetReadDeadline(time.Now()) }

func (b *uploadBody) Read(p []byte) (int, error) {
	if b.up.State() == fence.Sent {
		return b.body.Read(p) // handed over whole; what follows is EOF
	}
	var start time.Time
	if b.idle > 0 || b.minRate > 0 {
		start = time.Now()
		var deadline time.Time
		if b.idle > 0 {
			deadline = start.Add(b.idle)
		}
		if b.minRate > 0 {
			if b.waited >= b.window {
				if b.slow() {
					return 0, b.stop(errUploadSlow)
				}
				b.waited, b.got = 0, 0 // a new window
			}
			if b.slow() { // woken at the window's end if it still lacks bytes
				if end := start.Add(b.window - b.waited); deadline.IsZero() || end.Before(deadline) {
					deadline = end
				}
			}
		}
		_ = b.rc.SetReadDeadline(deadline) // ErrNotSupported: no idle cut-off
	}
	// Checked after setting the deadline: a cut that happened before it would
	// otherwise have its past deadline overwritten.
	if b.up.State() == fence.Cut {
		return 0, b.stop(errUploadCut)
	}
	if b.valid != nil {
		if err := b.valid(); err != nil {
			return 0, b.stop(err)
		}
	}
	n, err := b.body.Read(p)
	if b.remaining > 0 {
		b.remaining -= int64(n)
	}
	if b.minRate > 0 {
		b.waited += time.Since(start)
		b.got += int64(n)
	}
	switch {
	case err != nil && err != io.EOF:
		switch {
		case b.up.State() == fence.Cut:
			err = errUploadCut
		case errors.Is(err, os.ErrDeadlineExceeded) && b.minRate > 0 && b.waited >= b.window && b.slow():
			err = errUploadSlow
		case errors.Is(err, os.ErrDeadlineExceeded):
			err = errUploadIdle
		}
		return 0, b.stop(err)
	case err == io.EOF || b.remaining == 0:
		// These bytes complete the body: once handed over, a backend may
		// apply it (the fast path, which reads a small body whole before it
		// writes any, sends it right after). A replica that stalled on the
		// read past its ownership hands nothing over.
		if b.valid != nil {
			if err := b.valid(); err != nil {
				return 0, b.stop(err)
			}
		}
		if !b.up.Send() {
			return 0, b.stop(errUploadCut)
		}
		// No deadline while the server waits for the next request or watches
		// for the client going away.
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// slow reports whether this window has brought fewer bytes than the
// minimum rate asks of a whole window.
func (b *uploadBody) slow() bool {
	return b.got < b.minRate*int64(b.window/time.Millisecond)/1000
}

// stop records why the upload ended early and returns err.
func (b *uploadBody) stop(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped == nil {
		b.stopped = err
	}
	return err
}

// stopReason is why the upload ended early, nil if it did not.
func (b *uploadBody) stopReason() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopped
}

func (b *uploadBody) Close() error { return b.body.Close() }

// clientBody is the client's request body as the upstream client reads it,
// for every forwarded request with a body. It keeps the first read error:
// the client broke the body's framing, ended it early or went away, and the
// backend never gets the body whole. At the body's end it fills in the
// outbound request's trailers: ReverseProxy sends a clone of the request,
// whose Trailer map net/http never fills.
type clientBody struct {
	body io.ReadCloser
	in   *http.Request // the inbound request, whose Trailer net/http fills before the body's io.EOF
	// trailer is the outbound request's Trailer (set by rewrite before the
	// upstream client reads the body): the names to copy, nil for none.
	trailer http.Header
	// valid, when set, reports why the body may no longer be read (a
	// gateway key revoked): checked before every read. nil: always.
	valid func() error

	mu  sync.Mutex
	err error
	// n counts the bytes read, for the access log; atomic, as the upstream
	// client may still read while the handler ends.
	n atomic.Int64
}

// init makes b wrap r's body.
func (b *clientBody) init(r *http.Request) { b.body, b.in = r.Body, r }

func (b *clientBody) Read(p []byte) (int, error) {
	if b.valid != nil {
		if err := b.valid(); err != nil {
			b.mu.Lock()
			if b.err == nil {
				b.err = err
			}
			b.mu.Unlock()
			return 0, err
		}
	}
	n, err := b.body.Read(p)
	b.n.Add(int64(n))
	switch {
	case err == io.EOF:
		for k := range b.trailer {
			b.trailer[k] = b.in.Trailer[k]
		}
	case err != nil:
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// readErr is the first error reading the client's body, nil if none.
func (b *clientBody) readErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *clientBody) Close() error { return b.body.Close() }

// Bounds of lingerDrain: enough for an SDK's usual part or object, short
// enough that a refused client holds a handler only briefly.
const (
	lingerBytes = 16 << 20
	lingerTime  = 2 * time.Second
)

// lingerDrain reads and discards what an HTTP/1 client still sends of the
// body of a request refused without reading it, after the answer is flushed,
// up to lingerBytes or lingerTime. A client that sends its body whatever
// the answer (one without Expect: 100-continue, or aws-sdk-go-v2, whose
// requests carry Expect but which net/http's Transport does not wait on)
// then gets to read the refusal; closing on its unread bytes would reset the
// connection under its write, and it would see a reset instead of the
// answer. A client that honours Expect sends nothing and closes on the
// answer's "Connection: close". Nothing read is forwarded.
func lingerDrain(w http.ResponseWriter, r *http.Request) {
	if !hasBody(r) {
		return
	}
	lingerDrainBody(w, r, r.Body)
}

// lingerDrainBody is lingerDrain of body, r's body as net/http reads it.
func lingerDrainBody(w http.ResponseWriter, r *http.Request, body io.Reader) {
	if r.ProtoMajor != 1 {
		return
	}
	rc := http.NewResponseController(w)
	if rc.Flush() != nil || rc.SetReadDeadline(time.Now().Add(lingerTime)) != nil {
		return
	}
	_, _ = io.CopyN(io.Discard, body, lingerBytes)
	_ = rc.SetReadDeadline(time.Time{})
}
