package upstream

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// guardConn is an upstream TCP connection whose writes ask a guard, when
// one is set for the exchange on it, right before each write system call:
// after a wait for the socket to take more (a slow backend, with
// UnsentMax) and after the process was stopped, not only before the bytes
// were handed to the connection. An exchange whose validity ended while its
// last bytes waited for room never sends them. The guard's error fails the
// write; the caller then closes the connection (a reset).
type guardConn struct {
	net.Conn // the *net.TCPConn, without its ReadFrom (every write comes here, ReadFrom's too)
	sc       syscall.Conn
	guard    atomic.Pointer[func() error]
}

func newGuardConn(c *net.TCPConn) *guardConn { return &guardConn{Conn: c, sc: c} }

// SyscallConn implements syscall.Conn (idle peeks through it).
func (c *guardConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// setGuard sets the guard of the exchange about to use c; nil: none.
func (c *guardConn) setGuard(g func() error) {
	if g == nil {
		c.guard.Store(nil)
		return
	}
	c.guard.Store(&g)
}

func (c *guardConn) Write(p []byte) (int, error) {
	g := c.guard.Load()
	if g == nil || !protected("validity") {
		return c.Conn.Write(p)
	}
	return guardedWrite(c, p, *g)
}

// ReadFrom copies r to c through Write, with a small buffer while r
// trickles and a pooled 32 KiB one while it streams. net/http's Transport
// sends a request body with io.Copy to the connection, which would
// otherwise allocate a 32 KiB buffer and hold it for the whole upload,
// however slowly its client sends (issue 29). Like io.Copy, it returns nil
// at r's io.EOF.
func (c *guardConn) ReadFrom(r io.Reader) (n int64, err error) {
	small := smallCopyBuffers.Get().(*[512]byte)
	defer smallCopyBuffers.Put(small)
	var big *[32 << 10]byte
	defer func() {
		if big != nil {
			bigCopyBuffers.Put(big)
		}
	}()
	buf := small[:]
	for {
		nr, rerr := r.Read(buf)
		if nr > 0 {
			nw, werr := c.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			if nw != nr {
				return n, io.ErrShortWrite
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
		switch {
		case big == nil && nr == len(small): // streaming
			big = bigCopyBuffers.Get().(*[32 << 10]byte)
			buf = big[:]
		case big != nil && nr < len(small): // trickling
			bigCopyBuffers.Put(big)
			big, buf = nil, small[:]
		}
	}
}

var (
	smallCopyBuffers = sync.Pool{New: func() any { return new([512]byte) }}
	bigCopyBuffers   = sync.Pool{New: func() any { return new([32 << 10]byte) }}
)

// guardOf finds the guardConn under c (a tlsConn, a fast-path conn, or
// itself); nil if none.
func guardOf(c net.Conn) *guardConn {
	for {
		switch v := c.(type) {
		case *guardConn:
			return v
		case *conn:
			c = v.Conn
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
}
