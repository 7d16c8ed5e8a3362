package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// DialError is the error RoundTrip returns when no connection to the backend
// could be made: nothing of the request was written to the backend, by the
// attempt that failed or by any earlier one, so the request may be sent
// again. It covers the DNS lookup, the TCP connect and, for an https
// upstream, the TLS handshake (an untrusted, expired or misnamed
// certificate, no common protocol version, a peer that does not speak TLS,
// a handshake that took longer than Options.DialTimeout). A resend of a
// request that an earlier attempt may have written (both paths resend some
// bodyless reads, net/http also a request with an Idempotency-Key) that then
// cannot connect is not a DialError.
//
// Err is a *net.OpError with Op "dial" whose Err is the cause: a
// *net.DNSError, the connect's error, the TLS handshake's error wrapped
// (*tls.CertificateVerificationError, tls.AlertError, tls.RecordHeaderError,
// ...; errors.As finds them), or for a handshake past the dial timeout an
// error whose Timeout() is true.
type DialError struct {
	Err error
}

func (e *DialError) Error() string { return "upstream: " + e.Err.Error() }

func (e *DialError) Unwrap() error { return e.Err }

// Timeout reports whether the cause is a timeout: a DNS lookup, connect or
// TLS handshake that took longer than Options.DialTimeout. The
// *net.OpError inside says the same, so a caller that takes any net.Error
// whose Timeout() is true for "no answer in time" does so for a dial timeout
// too; one that answers every failure to connect alike checks for a
// DialError first.
func (e *DialError) Timeout() bool {
	var ne net.Error
	return errors.As(e.Err, &ne) && ne.Timeout()
}

// handshakeTimeoutError: the TLS handshake did not finish within the dial
// timeout (net/http's own is "net/http: TLS handshake timeout").
type handshakeTimeoutError struct{}

func (handshakeTimeoutError) Error() string   { return "TLS handshake timeout" }
func (handshakeTimeoutError) Timeout() bool   { return true }
func (handshakeTimeoutError) Temporary() bool { return true }

// dialer makes the connections of both paths and classifies their failures
// where they happen: whatever fails before a connection is handed over is a
// *DialError. The Transport cannot tell a failed TLS handshake (nothing sent)
// from a failed exchange, so the handshake is done here and not by it.
//
// Every connection it makes closes with a reset (SO_LINGER 0), never a FIN
// (nor, over TLS, a close_notify): a backend that takes an orderly close
// for the end of a body would apply what arrived of a body the proxy cut
// off (versitygw v1.8.0 stores it), where a reset fails its read. A
// connection is closed only after its answer was read whole or when its
// exchange is given up, so a reset loses nothing the backend should get.
// With Options.UnsentMax, the kernel holds at most about that many bytes
// unsent on it (see limitUnsent).
type dialer struct {
	net       net.Dialer
	tls       *tls.Config   // for an https upstream; ServerName is set per dial
	handshake time.Duration // TLS handshake bound
	unsent    int           // Options.UnsentMax; 0: the system's buffers
}

func newDialer(opts Options) *dialer {
	return &dialer{
		net: net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second},
		// No NextProtos: the Transport offers no ALPN when it speaks only
		// HTTP/1.1, and a server that picked h2 would get HTTP/1.1 bytes.
		tls:       &tls.Config{RootCAs: opts.RootCAs, MinVersion: tls.VersionTLS12},
		handshake: opts.DialTimeout,
		unsent:    opts.UnsentMax,
	}
}

// dialContext connects over TCP (http.Transport.DialContext).
func (d *dialer) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.net.DialContext(ctx, network, addr)
	if err != nil {
		return nil, &DialError{Err: err} // a *net.OpError with Op "dial"
	}
	if tc, ok := c.(*net.TCPConn); ok {
		var err error
		if protected("reset") {
			err = tc.SetLinger(0)
		}
		if err == nil && d.unsent > 0 && protected("unsent") {
			err = limitUnsent(tc, d.unsent)
		}
		if err != nil {
			tc.Close()
			return nil, &DialError{Err: &net.OpError{Op: "dial", Net: network, Addr: tc.RemoteAddr(), Err: err}}
		}
		return newGuardConn(tc), nil
	}
	return c, nil
}

// dialTLSContext connects and completes the TLS handshake with addr's host
// as the server name (http.Transport.DialTLSContext); it returns a tlsConn
// (roundTripFallback sets the response's TLS state from it).
func (d *dialer) dialTLSContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &DialError{Err: &net.OpError{Op: "dial", Net: network, Err: err}}
	}
	raw, err := d.dialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cfg := d.tls.Clone()
	cfg.ServerName = host
	tc := tls.Client(raw, cfg)
	hctx, cancel := ctx, context.CancelFunc(func() {})
	if d.handshake > 0 { // zero: no bound but the caller's context
		hctx, cancel = context.WithTimeout(ctx, d.handshake)
	}
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		raw.Close()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = handshakeTimeoutError{}
		} else {
			err = fmt.Errorf("TLS handshake: %w", err)
		}
		return nil, &DialError{Err: &net.OpError{Op: "dial", Net: network, Addr: raw.RemoteAddr(), Err: err}}
	}
	return tlsConn{tc}, nil
}

// tlsConn is an upstream TLS connection whose Close sends no close_notify:
// the TLS end of stream a backend could take for the end of a body cut off
// mid-way. It resets the TCP connection instead (see dialer).
type tlsConn struct{ *tls.Conn }

func (c tlsConn) Close() error {
	if !protected("reset") {
		return c.Conn.Close()
	}
	return c.NetConn().Close()
}

// newTransport returns the net/http Transport that carries what the fast
// path does not. It speaks HTTP/1.1 only, over TLS 1.2 or newer to an https
// upstream verified against opts.RootCAs, never through an HTTP_PROXY, and
// adds nothing to a request (no Accept-Encoding). It returns a *DialError
// when it cannot connect, also for a resend of a request that it may have
// written before: Client.RoundTrip tells those apart.
func newTransport(opts Options) *http.Transport {
	opts = opts.withDefaults()
	d := newDialer(opts)
	var h1 http.Protocols // HTTP/2 would change how requests share and lose connections
	h1.SetHTTP1(true)
	return &http.Transport{
		Proxy:                 nil, // never send the backend's traffic through HTTP_PROXY
		DialContext:           d.dialContext,
		DialTLSContext:        d.dialTLSContext,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   opts.DialTimeout, // applied by dialTLSContext: the Transport does not with a DialTLSContext
		ExpectContinueTimeout: opts.ExpectContinueTimeout,
		ResponseHeaderTimeout: opts.ResponseTimeout,
		DisableCompression:    true,  // would add Accept-Encoding and change the signed request
		TLSClientConfig:       d.tls, // what dialTLSContext uses
		Protocols:             &h1,
	}
}
