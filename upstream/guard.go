package upstream

import (
	"net"
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
	net.Conn // the *net.TCPConn, without its ReadFrom (every write comes here)
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
