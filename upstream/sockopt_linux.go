//go:build linux

package upstream

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// limitUnsent sets TCP_NOTSENT_LOWAT: the kernel takes more of a request
// only while fewer than n of its bytes wait unsent, so a process that
// stops (SIGSTOP, a frozen VM) leaves at most about n bytes for the kernel
// to deliver without it, and throughput is not capped as by SO_SNDBUF (what
// is in flight is bounded by the backend's window, not by this).
func limitUnsent(c syscall.Conn, n int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, n)
	}); err != nil {
		return err
	}
	return serr
}
