//go:build !linux

package upstream

import "syscall"

// limitUnsent is Linux only (TCP_NOTSENT_LOWAT); elsewhere what the kernel
// holds unsent is the system's send buffer, which docs/CLUSTER.md counts.
func limitUnsent(syscall.Conn, int) error { return nil }
