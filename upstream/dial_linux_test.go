package upstream

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"
)

// fullBacklog returns a loopback address whose listener never accepts and
// whose accept queue is full: Linux drops further SYNs, so a connect hangs
// until its timeout (unlike a refused or unreachable address, which fail at
// once).
func fullBacklog(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil { // a queue of one connection
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return addr // full
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatal("the accept queue never filled")
	return ""
}

// A connect that times out is a DialError whose Timeout() is true, on both
// paths and for either scheme.
func TestDialErrorConnectTimeout(t *testing.T) {
	addr := fullBacklog(t)
	const timeout = 300 * time.Millisecond
	for _, scheme := range []string{"http", "https"} {
		paths := httpPaths
		if scheme == "https" {
			paths = httpsPaths
		}
		for _, p := range paths {
			t.Run(scheme+" "+p.name, func(t *testing.T) {
				u, _ := url.Parse(scheme + "://" + addr)
				start := time.Now()
				err := putThrough(t, p.rt(u, Options{DialTimeout: timeout}), u.String())
				took := time.Since(start)
				wantDialError(t, err, true)
				if took < timeout-50*time.Millisecond || took > 3*time.Second {
					t.Fatalf("gave up after %s, want about %s", took, timeout)
				}
			})
		}
	}
}
