//go:build unix

package upstream

import (
	"errors"
	"net"
	"syscall"
)

// guardedWrite writes p with the guard asked right before every write
// system call, also after each wait for room: the last check comes after
// the process ran again, never before a wait.
func guardedWrite(c *guardConn, p []byte, guard func() error) (int, error) {
	raw, err := c.sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	n := 0
	var werr error
	err = raw.Write(func(fd uintptr) bool {
		for n < len(p) {
			if werr = guard(); werr != nil {
				return true
			}
			m, err := syscall.Write(int(fd), p[n:])
			if m > 0 {
				n += m
			}
			switch {
			case errors.Is(err, syscall.EAGAIN):
				return false // wait until the socket takes more, then ask again
			case errors.Is(err, syscall.EINTR):
			case err != nil:
				werr = err
				return true
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return n, &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	return n, nil
}
