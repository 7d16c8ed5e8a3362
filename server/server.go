// Package server is one fenceproxy: the proxy listener and the control
// listener over one token store, built from a config.Config. New binds and
// builds everything, Run serves until its context ends and then stops
// gracefully, Close stops at once. Whether the next start may skip its
// start-up grace (the clean-stop mark) is decided in Close.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fenceproxy/fenceproxy/cluster"
	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/lease"
	storage "github.com/fenceproxy/fenceproxy/store"
	"github.com/fenceproxy/fenceproxy/store/badger"
)

// Listener limits: slow-header clients are cut off and header blocks are
// bounded before any handler runs.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 64 << 10
)

// storeCloseTimeout bounds Close of the token store. Badger retries a failing
// memtable flush forever (a removed DATA_DIR); every maximum is fsynced
// already, so giving up on the flush loses nothing.
const storeCloseTimeout = 10 * time.Second

// leaseWatchInterval is how often the lease watcher looks for suspect holders.
const leaseWatchInterval = time.Second

// leaseSweepInterval and leaseSweepBatch pace the removal of expired lease
// records (FENCEPROXY_LEASE_RETENTION): each pass reads at most
// leaseSweepBatch records on from where the last stopped.
const (
	leaseSweepInterval = time.Second
	leaseSweepBatch    = 512
)

// ErrClosed is returned by Run called after Close.
var ErrClosed = errors.New("server: closed")

// Options holds what is not configuration.
type Options struct {
	// Logger receives the JSON log lines (start-up configuration, refusals,
	// upstream failures, shutdown) and Badger's own. nil: JSON lines on
	// os.Stderr at cfg.LogLevel, as the command logs.
	Logger *slog.Logger
	// Stop, when it ends, cuts New's retries of etcd at start (cluster
	// mode, up to 30 s while etcd cannot be reached): New then fails
	// with its cause, within one etcd request timeout. nil: never.
	Stop context.Context
}

// Addrs are the bound listener addresses (host:port, a port 0 resolved).
type Addrs struct {
	Proxy   string // the proxy listener (FENCEPROXY_LISTEN)
	Control string // the control listener (FENCEPROXY_CONTROL_LISTEN)
	Peer    string // cluster mode: the peer listener (FENCEPROXY_PEER_LISTEN); "" otherwise
}

// Server is one fenceproxy. Build it with New, then Run it (its stop ends
// with Close) or Close it; a Server is not reused after its stop.
type Server struct {
	cfg        config.Config
	log        *slog.Logger
	proxyLn    net.Listener
	controlLn  net.Listener
	store      storage.Store    // Badger's (store/badger) or etcd's (store/etcd)
	badger     *badger.Store    // the embedded store, nil in cluster mode: it keeps the clean-stop mark
	cluster    *cluster.Cluster // cluster mode (FENCEPROXY_STORE=etcd), nil otherwise
	barrier    *fence.Barrier
	leases     *lease.Manager
	ready      *readiness
	upstream   *upstreamProbe // dials the upstream from Run on
	proxySrv   *http.Server
	controlSrv *http.Server
	peerLn     net.Listener             // cluster mode only
	peerSrv    *http.Server             // cluster mode only
	tracing    *sdktrace.TracerProvider // with FENCEPROXY_TRACING, nil otherwise

	snapshotTimer *time.Timer     // releases the store's open snapshot after the start-up grace
	watchCtx      context.Context // the lease watcher's, ended by stopWatch
	stopWatch     context.CancelFunc
	background    sync.WaitGroup // the lease watcher and sweep and the upstream probe, once Run started them

	mu      sync.Mutex
	running bool // Run was called
	closing bool // Close was called

	// unfinished is set when a stop had to close connections with requests
	// still running, or gave up waiting for abandoned writes: a write this
	// process forwarded may still reach the backend, so no clean-stop mark.
	unfinished atomic.Bool

	closeOnce sync.Once
	closeErr  error
}

// New builds a server from cfg: it binds both listeners (first, so that a
// port clash leaves no store directory behind), opens the token store in
// cfg.DataDir and takes its clean-stop mark, and builds the fence barrier,
// the proxy, the lease manager and the control API. Connections queue from
// then on and are served once Run runs. In cluster mode it binds the peer
// listener, opens the store in etcd instead and, last, takes this replica's
// share of the shards. It logs "fenceproxy started" with the
// configuration. The steps are starting's, in the order of its steps.
//
// Errors: cfg fails Config.Validate (every bad field named by its variable);
// a listener cannot be bound (naming FENCEPROXY_LISTEN or
// FENCEPROXY_CONTROL_LISTEN); the data directory cannot be opened, is in use
// by another process or its clean-stop mark cannot be taken (naming
// FENCEPROXY_DATA_DIR). Nothing stays bound or open after an error.
func New(cfg config.Config, opts Options) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	}
	st := &starting{Server: &Server{cfg: cfg, log: log}, stop: opts.Stop}
	if st.stop == nil {
		st.stop = context.Background()
	}
	defer func() {
		if err != nil {
			st.rollback()
		}
	}()
	for _, step := range st.steps() {
		if err := step(); err != nil {
			return nil, err
		}
	}
	st.logStarted()
	return st.Server, nil
}

// leaseGraceText is LEASE_GRACE for the start-up log line: unset (nil)
// means 2/3 of each lease's TTL, which no single duration says.
func leaseGraceText(d *time.Duration) string {
	if d == nil {
		return "2/3 of the TTL"
	}
	return d.String()
}

// revokeAfterText is LEASE_REVOKE_AFTER for the start-up log line: 0 (unset)
// means half of each lease's TTL.
func revokeAfterText(d time.Duration) string {
	if d == 0 {
		return "half the TTL"
	}
	return d.String()
}

// Addrs returns the bound listener addresses.
func (s *Server) Addrs() Addrs {
	a := Addrs{Proxy: s.proxyLn.Addr().String(), Control: s.controlLn.Addr().String()}
	if s.peerLn != nil {
		a.Peer = s.peerLn.Addr().String()
	}
	return a
}

// Run serves both listeners until ctx is done, a listener fails, or Close is
// called. On ctx or a listener failure it then stops gracefully, each wait
// bounded by cfg.ShutdownTimeout (one deadline for all): /readyz answers 503,
// the proxy listener stops taking requests and lets the running ones finish
// (past the deadline their connections are closed), writes the proxy gave up
// on wait out their abandon grace, the control listener stops last, and Close
// finishes the stop. It returns nil after a stop by ctx or Close, the
// listener's error when one failed, ErrClosed when Close came first, and an
// error when called twice. Failures while stopping are logged, not returned.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		return ErrClosed
	case s.running:
		s.mu.Unlock()
		return errors.New("server: Run called twice")
	}
	s.running = true
	s.background.Add(3)
	s.mu.Unlock()
	go func() {
		defer s.background.Done()
		s.upstream.run(s.watchCtx)
	}()
	go func() {
		defer s.background.Done()
		s.leases.Watch(s.watchCtx, leaseWatchInterval)
	}()
	go func() {
		defer s.background.Done()
		s.leases.Clean(s.watchCtx, leaseSweepInterval, leaseSweepBatch)
	}()

	errc := make(chan error, 3)
	if s.peerSrv != nil {
		go func() { errc <- fmt.Errorf("peer listener: %w", s.peerSrv.Serve(s.peerLn)) }()
	}
	go func() {
		errc <- fmt.Errorf("proxy listener: %w", serveMaybeTLS(s.proxySrv, s.proxyLn, s.cfg.TLSCertFile, s.cfg.TLSKeyFile))
	}()
	go func() {
		errc <- fmt.Errorf("control listener: %w", serveMaybeTLS(s.controlSrv, s.controlLn, s.cfg.ControlTLSCertFile, s.cfg.ControlTLSKeyFile))
	}()

	var serveErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down: draining in-flight requests", "shutdown_timeout", s.cfg.ShutdownTimeout.String())
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) { // Close stopped the listeners
			s.Close()
			return nil
		}
		serveErr = err
		s.log.Error("listener failed; shutting down", "error", serveErr.Error())
	}
	s.drain()
	s.Close()
	return serveErr
}

// drain is the graceful part of Run's stop; Close finishes it.
func (s *Server) drain() {
	// A fresh context: Run's is already done. /readyz answers 503 while the
	// proxy drains, so the control listener closes last.
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	s.ready.draining.Store(true)
	if s.cluster != nil {
		// Hand every shard over, drained, while the listeners still take
		// requests: new ones go to the next owners, and those admit at once.
		s.cluster.Stop(sctx, false)
	}
	for _, srv := range s.servers() {
		if err := srv.Shutdown(sctx); err != nil {
			s.log.Warn("shutdown timeout passed; closing remaining connections", "error", err.Error())
			s.unfinished.Store(true)
			srv.Close()
		}
		// Observe mode forwards writes outside the fence's accounting: its
		// stop is never clean, so there is nothing to wait for.
		if srv == s.proxySrv && !s.unfinished.Load() && s.cfg.Mode != "observe" {
			// Abandoned writes hold their barrier through the abandon grace;
			// only once none is left can the next start skip its own grace.
			if err := s.barrier.WaitIdle(sctx); err != nil {
				s.log.Warn("shutdown timeout passed with abandoned writes in their grace; the next start waits its start-up grace",
					"abandon_grace", s.cfg.AbandonGrace.String())
				s.unfinished.Store(true)
			}
		}
	}
}

// Close stops the server at once: a server that Run is not running, or one
// that must stop now (Run then returns nil). Both listeners stop taking
// requests, connections with a request still running are closed, and the
// token store is closed, giving up after 10s (every maximum is fsynced
// already). It leaves the clean-stop mark, letting the next start skip its
// start-up grace, only when no write this process forwarded can still reach
// the backend: not in observe mode, no request was cut off (here or in Run's
// drain), and no admitted write is unfinished, abandoned ones in their grace
// included. It logs "fenceproxy stopped" with clean_stop. Close is
// idempotent and safe for concurrent use; every call returns the first
// call's result: the store's close error, nil when it closed.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Server) close() error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.ready.draining.Store(true)
	for _, srv := range s.servers() {
		// Shutdown with a done context closes the listeners and idle
		// connections, and returns the context's error when a request is
		// still running (or a connection has not sent its first one yet).
		done, cancel := context.WithCancel(context.Background())
		cancel()
		if err := srv.Shutdown(done); errors.Is(err, context.Canceled) {
			s.unfinished.Store(true) // before Close, so that a draining Run sees it
			srv.Close()
		}
	}
	// Serve closes them, but Run may never have served.
	s.proxyLn.Close()
	s.controlLn.Close()
	if s.peerLn != nil {
		s.peerLn.Close()
	}
	if s.cluster != nil {
		// Requests were cut above; their shards' contexts end with it.
		s.cluster.Stop(context.Background(), true)
	}
	s.stopWatch()
	s.background.Wait()
	s.snapshotTimer.Stop()
	s.stopTracing() // every request has ended: its span is queued

	clean := s.cfg.Mode != "observe" && !s.unfinished.Load() && s.idle()
	if clean && s.badger != nil {
		if err := s.badger.MarkCleanStop(); err != nil {
			s.log.Warn("could not mark the stop as clean; the next start waits its start-up grace", "error", err.Error())
			clean = false
		}
	}
	s.log.Info("fenceproxy stopped", "clean_stop", clean)
	return closeStore(s.store, storeCloseTimeout, s.log)
}

// servers are the HTTP servers, in the order they stop: the proxy first,
// the control listener (its /readyz) last but the peer listener, which
// serves writes forwarded from replicas that still see this one as owner.
func (s *Server) servers() []*http.Server {
	if s.peerSrv != nil {
		return []*http.Server{s.proxySrv, s.peerSrv, s.controlSrv}
	}
	return []*http.Server{s.proxySrv, s.controlSrv}
}

// idle reports whether no admitted write is unfinished, without waiting.
func (s *Server) idle() bool {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	return s.barrier.WaitIdle(done) == nil
}

// closeStore closes store, giving up after timeout; errors are logged and returned.
func closeStore(store interface{ Close() error }, timeout time.Duration, log *slog.Logger) error {
	done := make(chan error, 1)
	go func() { done <- store.Close() }()
	select {
	case err := <-done:
		if err != nil {
			log.Error("closing the token store failed", "error", err.Error())
		}
		return err
	case <-time.After(timeout):
		log.Error("closing the token store did not finish; exiting without it (every maximum is already fsynced)",
			"timeout", timeout.String())
		return fmt.Errorf("server: closing the token store did not finish within %s", timeout)
	}
}

// serveMaybeTLS serves srv on ln, with TLS when cert and key are set.
func serveMaybeTLS(srv *http.Server, ln net.Listener, cert, key string) error {
	if cert != "" {
		return srv.ServeTLS(ln, cert, key)
	}
	return srv.Serve(ln)
}
