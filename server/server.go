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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/control"
	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/internal/buildinfo"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/pool"
	"github.com/fenceproxy/fenceproxy/proxy"
	storage "github.com/fenceproxy/fenceproxy/store"
	"github.com/fenceproxy/fenceproxy/store/badger"
	"github.com/fenceproxy/fenceproxy/store/etcd"
	"github.com/fenceproxy/fenceproxy/tokensig"
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
	store      storage.Store // Badger's (store/badger) or etcd's (store/etcd)
	badger     *badger.Store // the embedded store, nil in cluster mode: it keeps the clean-stop mark
	cluster    *cluster      // cluster mode (FENCEPROXY_STORE=etcd), nil otherwise
	barrier    *fence.Barrier
	leases     *lease.Manager
	ready      *readiness
	proxySrv   *http.Server
	controlSrv *http.Server
	peerLn     net.Listener // cluster mode only
	peerSrv    *http.Server // cluster mode only

	snapshotTimer *time.Timer     // releases the store's open snapshot after the start-up grace
	watchCtx      context.Context // the lease watcher's, ended by stopWatch
	stopWatch     context.CancelFunc
	background    sync.WaitGroup // the lease watcher, once Run started it

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
// then on and are served once Run runs. It logs "fenceproxy started" with
// the configuration.
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
	stop := opts.Stop
	if stop == nil {
		stop = context.Background()
	}
	s := &Server{cfg: cfg, log: log}
	// Undo what was bound or opened when a later step fails.
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()

	if s.proxyLn, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("FENCEPROXY_LISTEN: %w", err)
	}
	undo = append(undo, func() { s.proxyLn.Close() })
	if s.controlLn, err = net.Listen("tcp", cfg.ControlListen); err != nil {
		return nil, fmt.Errorf("FENCEPROXY_CONTROL_LISTEN: %w", err)
	}
	undo = append(undo, func() { s.controlLn.Close() })

	var cleanStart, newStore bool
	var store storage.Store
	var etcdCfg clientv3.Config
	var etcdRequests prometheus.Histogram
	if cfg.Store == "etcd" {
		if s.peerLn, err = net.Listen("tcp", cfg.PeerListen); err != nil {
			return nil, fmt.Errorf("FENCEPROXY_PEER_LISTEN: %w", err)
		}
		undo = append(undo, func() { s.peerLn.Close() })
		if etcdCfg, err = etcdClientConfig(cfg); err != nil {
			return nil, err
		}
		etcdRequests = prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fenceproxy_etcd_request_seconds",
			Help:    "Duration of the store's requests to etcd (Gets and Txns: raises, group-committed, lease updates, upload records), failed ones included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		})
		var es *etcd.Store
		err := retryEtcd(stop, log, "open the store in etcd", func() (err error) {
			es, err = etcd.Open(etcdCfg, etcd.Options{Prefix: cfg.EtcdPrefix, CacheBytes: int64(cfg.CacheSize),
				MaxTxnOps: cfg.EtcdMaxTxnOps, ObserveRequest: func(d time.Duration) { etcdRequests.Observe(d.Seconds()) },
				Guard: func(resource string) (string, int64, error) { return s.cluster.guard(resource) }})
			return err
		}, nil)
		if err != nil && stop.Err() != nil {
			return nil, fmt.Errorf("FENCEPROXY_ETCD_ENDPOINTS: %w", err)
		}
		if err != nil {
			return nil, fmt.Errorf("FENCEPROXY_ETCD_ENDPOINTS: %w (for %s; is etcd running and reachable there?)", err, etcdStartBudget)
		}
		store = es
		undo = append(undo, func() { closeStore(es, storeCloseTimeout, log) })
		// No clean-stop mark and no start-up grace: a shard's new owner
		// waits out the lock-delay after an unclean loss instead.
		cleanStart = true
	} else {
		ts, err := badger.Open(cfg.DataDir, badger.Options{Logger: log, MinFreeSpace: uint64(cfg.MinFreeSpace), CacheBytes: int64(cfg.CacheSize)})
		if err != nil {
			return nil, fmt.Errorf("open FENCEPROXY_DATA_DIR: %w", err)
		}
		store, s.badger = ts, ts
		undo = append(undo, func() { closeStore(ts, storeCloseTimeout, log) })
		// Taken (removed durably) before any write is forwarded: a crash of this
		// process must never pass for a clean stop.
		if cleanStart, err = ts.TakeCleanStop(); err != nil {
			return nil, fmt.Errorf("FENCEPROXY_DATA_DIR: %w", err)
		}
		// A store without records is new (or was never written through): no
		// earlier write can be in flight, so a missing mark is no crash.
		newStore = ts.EmptyAtOpen()
	}
	s.store = store

	metrics := prometheus.NewRegistry()
	proxyMetrics := proxy.NewMetrics(metrics)
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fenceproxy_fenced_resources",
			Help: "Resources with a maximum above 0 held in memory now (within FENCEPROXY_CACHE_SIZE).",
		}, func() float64 { return float64(store.Resources()) }))
	warning := ""
	if cfg.Mode == "observe" {
		warning = "OBSERVE MODE: stale and invalid writes are logged and counted but FORWARDED; nothing is fenced"
		log.Warn(warning)
	}

	// Signed-token mode: the lease API signs the tokens it issues, and the
	// proxy forwards only writes whose token carries a valid signature.
	var authenticate func(*http.Request, []string, uint64) error
	var signer control.Signer
	tokenKeys, err := cfg.TokenKeyBytes()
	if err != nil {
		return nil, fmt.Errorf("FENCEPROXY_TOKEN_KEY: %w", err)
	}
	if len(tokenKeys) > 0 {
		keys, err := tokensig.New(tokenKeys)
		if err != nil {
			return nil, fmt.Errorf("FENCEPROXY_TOKEN_KEY: %w", err)
		}
		authenticate, signer = proxy.SignedTokens(keys), keys
	}
	upstreamCAs, err := cfg.UpstreamCAs()
	if err != nil {
		return nil, fmt.Errorf("FENCEPROXY_UPSTREAM_CA_FILE: %w", err)
	}

	// One barrier for every raise: writes, lease acquires, admin raises.
	fopts := fenceOptionsFrom(cfg)
	if !cleanStart && !newStore {
		// Writes of the previous process may still be in flight.
		fopts.StartGrace = cfg.AbandonGrace
	}
	fopts.ObserveRaise = proxyMetrics.ObserveRaise
	if s.barrier, err = fence.New(store, fopts); err != nil {
		return nil, err
	}
	popts := proxy.OptionsFrom(cfg)
	popts.UpstreamCAs, popts.Logger, popts.Metrics, popts.Authenticate = upstreamCAs, log, proxyMetrics, authenticate
	if cfg.S3 != "off" {
		popts.Uploads = store
	}
	s.watchCtx, s.stopWatch = context.WithCancel(context.Background())
	undo = append(undo, s.stopWatch)
	if cfg.S3 == "resign" {
		if popts.Gateway, err = newGateway(s.watchCtx, cfg, log); err != nil {
			return nil, err
		}
	}
	if cfg.Store == "etcd" {
		s.cluster = newCluster(cfg, store.(*etcd.Store), s.barrier, log)
		popts.Owner = s.cluster.proxyOwner
		metrics.MustRegister(s.cluster, s.cluster.forwards, etcdRequests)
	}
	p, err := proxy.New(s.barrier, popts)
	if err != nil {
		return nil, err
	}
	if fopts.StartGrace > 0 {
		log.Info("start-up grace: no clean-stop mark (a crash, a kill, a stop that timed out or one in observe mode), so writes on resources "+
			"that had a maximum at start wait out the abandon grace once", "until", time.Now().Add(cfg.AbandonGrace).UTC().Format(time.RFC3339Nano))
	}
	// The proxy's start-up grace reads maxima as they were at open; after it
	// the read view would only keep old versions alive.
	s.snapshotTimer = time.AfterFunc(fopts.StartGrace, store.ReleaseOpenSnapshot)

	s.ready = &readiness{store: store}
	if s.cluster != nil {
		s.ready.cluster = s.cluster.ready
	}
	lopts := leaseOptionsFrom(cfg)
	lopts.Logger = log
	if s.cluster != nil {
		lopts.Watched = s.cluster.owns
	}
	s.leases = lease.NewManager(store, s.barrier, lopts)
	metrics.MustRegister(s.leases.Collector())
	// Pools: a claim is decided in the pool's owner (cluster mode) and
	// granted as a lease on the shard's name, on that name's owner.
	var poolLeases pool.Leases = s.leases
	if s.cluster != nil {
		poolLeases = newClusterLeases(s.cluster, s.leases, cfg.LeaseToken)
	}
	pm := pool.NewMetrics()
	pools := pool.New(store, poolLeases, pm.Events())
	pm.Attach(pools)
	metrics.MustRegister(pm)
	build := buildinfo.Read()
	metrics.MustRegister(buildInfoGauge(build))

	errorLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	s.proxySrv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          errorLog,
	}
	copts := control.Options{
		Leases:        s.leases,
		Metrics:       metrics,
		Warning:       warning,
		LeaseToken:    cfg.LeaseToken,
		ResourceDepth: cfg.ResourceDepth,
		Admin:         adminFences{store: store, fence: s.barrier},
		AdminToken:    cfg.AdminToken,
		Signer:        signer,
	}
	copts.Pools = pools
	if s.cluster != nil {
		copts.Owner = s.cluster.controlOwner
	}
	controlHandler := control.Handler(s.ready, log, copts)
	s.controlSrv = &http.Server{
		Handler:           controlHandler,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          errorLog,
	}
	if s.cluster != nil {
		s.peerSrv = &http.Server{
			Handler:           s.cluster.peerHandler(p, controlHandler),
			ReadHeaderTimeout: readHeaderTimeout,
			IdleTimeout:       idleTimeout,
			MaxHeaderBytes:    maxHeaderBytes + 4<<10, // the peer headers on top of the client's
			ErrorLog:          errorLog,
		}
		// Last: from here on this replica takes its share of the shards.
		if err := s.cluster.start(stop, etcdCfg); err != nil {
			return nil, err
		}
		undo = append(undo, func() { s.cluster.stop(context.Background(), true) })
	}

	log.Info("fenceproxy started",
		"version", build.Version, "revision", build.RevisionOrUnknown(), "modified", build.Modified, "go_version", build.GoVersion,
		"listen", s.proxyLn.Addr().String(), "control_listen", s.controlLn.Addr().String(),
		"upstream", cfg.Upstream.Redacted(), "data_dir", cfg.DataDir,
		"token_header", cfg.TokenHeader, "unfenced_methods", cfg.UnfencedMethods,
		"resource_depth", cfg.ResourceDepth, "require_token", cfg.RequireToken,
		"drain_timeout", cfg.DrainTimeout.String(), "shutdown_timeout", cfg.ShutdownTimeout.String(),
		"upstream_dial_timeout", cfg.UpstreamDialTimeout.String(),
		"upstream_response_timeout", cfg.UpstreamResponseTimeout.String(), "upstream_fast_path", cfg.UpstreamFastPath,
		"upstream_unsent_max", cfg.UpstreamUnsentMax.String(),
		"abandon_grace", cfg.AbandonGrace.String(), "upload_idle_timeout", cfg.UploadIdleTimeout.String(),
		"max_token_jump", cfg.MaxTokenJump, "allow_path_params", cfg.AllowPathParams,
		"lease_grace", leaseGraceText(cfg.LeaseGrace), "lease_revoke_after", revokeAfterText(cfg.LeaseRevokeAfter),
		"lease_min_ttl", cfg.LeaseMinTTL.String(), "lease_max_ttl", cfg.LeaseMaxTTL.String(), "lease_token_set", cfg.LeaseToken != "",
		"signed_tokens", signer != nil,
		"log_level", cfg.LogLevel.String(), "admin_api", cfg.AdminToken != "", "mode", cfg.Mode,
		"tls", cfg.TLSCertFile != "", "control_tls", cfg.ControlTLSCertFile != "", "upstream_ca_file", cfg.UpstreamCAFile,
		"s3", cfg.S3, "s3_domains", cfg.S3Domains, "s3_bucket_writes", cfg.S3BucketWrites,
		"min_free_space", cfg.MinFreeSpace.String(), "cache_size", cfg.CacheSize.String(), "clean_start", cleanStart, "new_store", newStore,
		"store", cfg.Store)
	if s.cluster != nil {
		log.Info("cluster mode", "etcd_endpoints", cfg.EtcdEndpoints, "etcd_prefix", cfg.EtcdPrefix, "etcd_tls", cfg.EtcdCAFile != "" || cfg.EtcdCertFile != "",
			"etcd_user", cfg.EtcdUsername, "shards", cfg.Shards, "replica_id", cfg.ReplicaID, "peer_listen", s.peerLn.Addr().String(),
			"peer_advertise", cfg.PeerAdvertise, "shard_ttl", cfg.ShardTTL.String(), "lock_delay", cfg.LockDelay.String(),
			"lock_delay_min", cfg.LockDelayMin().String())
	}
	return s, nil
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

// fenceOptionsFrom returns the barrier options that cfg sets, field for
// field; the rest (StartGrace, Clock, ObserveRaise) stay zero.
func fenceOptionsFrom(cfg config.Config) fence.Options {
	return fence.Options{
		DrainTimeout: cfg.DrainTimeout,
		AbandonGrace: cfg.AbandonGrace,
		MaxTokenJump: cfg.MaxTokenJump,
	}
}

// leaseOptionsFrom returns the lease manager options that cfg sets (the
// LEASE_* variables), field for field; the rest (Now, Logger) stay nil.
func leaseOptionsFrom(cfg config.Config) lease.Options {
	return lease.Options{
		MinTTL:      cfg.LeaseMinTTL,
		MaxTTL:      cfg.LeaseMaxTTL,
		Grace:       cfg.LeaseGrace,
		RevokeAfter: cfg.LeaseRevokeAfter,
	}
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
	s.background.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.background.Done()
		s.leases.Watch(s.watchCtx, leaseWatchInterval)
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
		s.cluster.stop(sctx, false)
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
		s.cluster.stop(context.Background(), true)
	}
	s.stopWatch()
	s.background.Wait()
	s.snapshotTimer.Stop()

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
