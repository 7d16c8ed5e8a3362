//go:build unix

package upstream

import (
	"errors"
	"net"
	"syscall"
)

// idle reports whether a pooled connection is still open with nothing to
// read: one non-blocking peek (EAGAIN: idle; 0 bytes: closed; data: stray).
func idle(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var perr error
	var n int
	if err := raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, perr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // one look, never wait
	}); err != nil {
		return false
	}
	return n <= 0 && (errors.Is(perr, syscall.EAGAIN) || errors.Is(perr, syscall.EWOULDBLOCK))
}
