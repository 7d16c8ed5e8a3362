package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
)

// ProbeUpstream opens a TCP connection to cfg's upstream (cfg.UpstreamAddr:
// its host and port, the scheme's port when it names none) and closes it at
// once, within cfg.UpstreamDialTimeout or ctx, whichever ends first. It
// returns the address dialled and the dial's error (nil: reachable). No TLS
// handshake and no HTTP request: it says whether the proxy could connect,
// not whether the backend answers well.
func ProbeUpstream(ctx context.Context, cfg config.Config) (addr string, err error) {
	addr = cfg.UpstreamAddr()
	if addr == "" {
		return "", errors.New("FENCEPROXY_UPSTREAM is not set")
	}
	return addr, dialOnce(ctx, addr, cfg.UpstreamDialTimeout)
}

// dialOnce connects to addr within timeout (0: ctx only) and closes the
// connection.
func dialOnce(ctx context.Context, addr string, timeout time.Duration) error {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// upstreamProbe dials the upstream every interval, from Run on: the state
// it leaves is fenceproxy_upstream_up, the log lines when the upstream
// becomes unreachable and when it is back, and, with READY_NEEDS_UPSTREAM,
// /readyz.
type upstreamProbe struct {
	addr     string
	timeout  time.Duration // each dial's bound: UPSTREAM_DIAL_TIMEOUT, at most the interval
	interval time.Duration
	log      *slog.Logger

	mu     sync.Mutex
	probed bool      // a probe has ended
	err    error     // the last probe's error; nil: reachable
	since  time.Time // when the current state began
}

func newUpstreamProbe(cfg config.Config, log *slog.Logger) *upstreamProbe {
	return &upstreamProbe{
		addr:     cfg.UpstreamAddr(),
		timeout:  min(cfg.UpstreamDialTimeout, cfg.UpstreamProbeInterval),
		interval: cfg.UpstreamProbeInterval,
		log:      log,
	}
}

// run probes at once, then every interval, until ctx ends.
func (p *upstreamProbe) run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe dials once and logs a change of state: a warning naming the
// address and the error when the upstream becomes unreachable (the first
// probe's failure included), an info line when it is reachable again.
func (p *upstreamProbe) probe(ctx context.Context) {
	err := dialOnce(ctx, p.addr, p.timeout)
	if ctx.Err() != nil {
		return // stopping: the dial was cut, not refused
	}
	now := time.Now()
	p.mu.Lock()
	first, wasUp, since := !p.probed, p.probed && p.err == nil, p.since
	p.probed, p.err = true, err
	if first || wasUp != (err == nil) {
		p.since = now
	}
	p.mu.Unlock()
	switch {
	case err != nil && (first || wasUp):
		p.log.Warn("upstream unreachable: no TCP connection to FENCEPROXY_UPSTREAM's host and port; writes get 502 until it is back",
			"address", p.addr, "error", err.Error(), "probe_interval", p.interval.String())
	case err == nil && !first && !wasUp:
		p.log.Info("upstream reachable again", "address", p.addr, "unreachable_for", now.Sub(since).Round(time.Millisecond).String())
	}
}

// up is fenceproxy_upstream_up: 1 while the last probe connected, 0 while
// it failed and before the first one ended.
func (p *upstreamProbe) up() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.probed && p.err == nil {
		return 1
	}
	return 0
}

// Ready is /readyz's view of the upstream (READY_NEEDS_UPSTREAM): nil while
// the last probe connected; an error before the first probe ended and
// while the last one failed.
func (p *upstreamProbe) Ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.probed:
		return fmt.Errorf("upstream %s not probed yet", p.addr)
	case p.err != nil:
		return fmt.Errorf("upstream %s unreachable: %w", p.addr, p.err)
	}
	return nil
}
