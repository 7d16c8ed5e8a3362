package server

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/proxy"
)

// limitListener holds at most cap connections open (FENCEPROXY_MAX_CONNECTIONS):
// at the cap its Accept waits for one to close, so that further
// connections wait in the kernel's listen backlog (HAProxy's maxconn does
// the same) rather than being accepted into a process out of descriptors or
// memory. full is called with true when it reaches the cap (the server
// then turns keep-alive off, which closes its idle connections) and with
// false once fewer than 7/8 of cap are open again.
type limitListener struct {
	net.Listener
	slots chan struct{} // one per open connection
	done  chan struct{} // closed by Close
	once  sync.Once

	full     func(bool) // set before Serve; nil: none
	atCap    atomic.Bool
	metrics  *proxy.Metrics // counts Accepts that found the cap reached; nil: none
	log      *slog.Logger
	loggedAt atomic.Int64 // unix nanoseconds of the last warning
}

func newLimitListener(ln net.Listener, cap int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, cap), done: make(chan struct{}), log: log}
}

// limitLogEvery spaces the warnings of the cap reached.
const limitLogEvery = 10 * time.Second

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		l.metrics.Overloaded("connections")
		if l.atCap.CompareAndSwap(false, true) && l.full != nil {
			l.full(true)
		}
		if now, last := time.Now().UnixNano(), l.loggedAt.Load(); now-last >= int64(limitLogEvery) && l.loggedAt.CompareAndSwap(last, now) {
			l.log.Warn("the proxy listener holds FENCEPROXY_MAX_CONNECTIONS connections; new ones wait in the listen backlog "+
				"and keep-alive is off until some close", "max_connections", cap(l.slots))
		}
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, l: l}, nil
}

// release frees a slot of a closed connection.
func (l *limitListener) release() {
	<-l.slots
	if l.atCap.Load() && len(l.slots) < cap(l.slots)-cap(l.slots)/8 && l.atCap.CompareAndSwap(true, false) && l.full != nil {
		l.full(false)
	}
}

// open is the number of connections open now.
func (l *limitListener) open() int { return len(l.slots) }

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn is an accepted connection that frees its slot when closed. It
// keeps the TCP connection's CloseWrite (net/http half-closes before it
// closes a connection with unread bytes, so that the client reads the
// answer rather than a reset) and ReadFrom.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.l.release)
	return err
}

func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitConn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(c.Conn, r) }
