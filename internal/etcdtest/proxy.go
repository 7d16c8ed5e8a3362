package etcdtest

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on a loopback port in front of one etcd member's
// client URL, to cut one client off from etcd while the cluster and the
// other clients carry on: Cut closes every connection through it and holds
// new ones open without forwarding a byte (a partition: requests hang until
// their deadline), Restore forwards again.
type Proxy struct {
	ln     net.Listener
	target string // host:port

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{} // both sides of every forwarded connection
	held  []net.Conn            // accepted while cut
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to target (a client URL such as Member.ClientURL,
// or host:port). Cleanup closes it.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target = strings.TrimPrefix(strings.TrimPrefix(target, "http://"), "https://")
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's address as a client URL.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Cut closes the connections through the proxy and holds new ones silent.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore forwards again: connections held while cut are closed, so that
// the client dials again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for _, c := range p.held {
		_ = c.Close()
	}
	p.held = nil
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.held = append(p.held, c)
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		p.wg.Go(func() { p.forward(c) })
	}
}

func (p *Proxy) forward(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		_ = c.Close()
		_ = u.Close()
		return
	}
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
	}
	wg.Go(func() { pipe(u, c) })
	wg.Go(func() { pipe(c, u) })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
	for _, c := range p.held {
		_ = c.Close()
	}
	p.held = nil
	p.mu.Unlock()
	p.wg.Wait()
}
