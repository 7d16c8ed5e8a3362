package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/control"
	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/tokensig"
	"github.com/fenceproxy/fenceproxy/tokenstore"
)

// Proxy listener limits: slow-header clients are cut off and header blocks are
// bounded before any handler runs.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 64 << 10
)

// Run runs the command named by args[0] ("serve" when absent; "demo"; "-h")
// with environ (KEY=value pairs) as its environment, until ctx is done. It
// returns nil after a clean shutdown and an error when start-up fails, for
// example a configuration error naming the variable.
func Run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	return run(ctx, args, env.ToMap(environ), stdout, stderr, nil)
}

// addrs are the bound listener addresses, reported to tests and the demo.
type addrs struct{ Proxy, Control string }

func run(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer, onReady func(addrs)) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	if len(args) > 1 {
		return fmt.Errorf("%s takes no arguments (configuration comes from FENCEPROXY_* variables); run fenceproxy -h", cmd)
	}
	switch cmd {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		fmt.Fprint(stdout, config.Usage())
		return nil
	case "serve":
		return serve(ctx, environ, stderr, onReady)
	case "demo":
		return demo(ctx, environ, stdout, stderr, onReady)
	default:
		return fmt.Errorf("unknown command %q; run fenceproxy -h", cmd)
	}
}

const usage = `fenceproxy: an HTTP proxy that forwards a write to its backend only when the
write's fencing token is not below the largest token seen for its resource.

Usage:
  fenceproxy [serve]   run the proxy, configured by the variables below
  fenceproxy demo      run an in-memory S3 backend with the proxy in front of it
  fenceproxy -h        print this help

Configuration (environment variables):
`

func serve(ctx context.Context, environ map[string]string, stderr io.Writer, onReady func(addrs)) error {
	cfg, warnings, err := config.Parse(environ)
	if err != nil {
		return fmt.Errorf("invalid configuration (see fenceproxy -h):\n%w", err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	for _, w := range warnings {
		log.Warn(w)
	}

	// Bind first: a port clash then leaves no store directory behind.
	proxyLn, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("FENCEPROXY_LISTEN: %w", err)
	}
	defer proxyLn.Close()
	controlLn, err := net.Listen("tcp", cfg.ControlListen)
	if err != nil {
		return fmt.Errorf("FENCEPROXY_CONTROL_LISTEN: %w", err)
	}
	defer controlLn.Close()

	store, err := tokenstore.Open(cfg.DataDir, tokenstore.Options{Logger: log, MinFreeSpace: uint64(cfg.MinFreeSpace)})
	if err != nil {
		return fmt.Errorf("open FENCEPROXY_DATA_DIR: %w", err)
	}
	defer closeStore(store, storeCloseTimeout, log)
	// Taken (removed durably) before any write is forwarded: a crash of this
	// process must never pass for a clean stop.
	cleanStart, err := store.TakeCleanStop()
	if err != nil {
		return fmt.Errorf("FENCEPROXY_DATA_DIR: %w", err)
	}

	metrics := prometheus.NewRegistry()
	proxyMetrics := proxy.NewMetrics(metrics)
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fenceproxy_fenced_resources",
			Help: "Resources with a maximum above 0 held in memory now (at most 262,144).",
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
		return fmt.Errorf("FENCEPROXY_TOKEN_KEY: %w", err)
	}
	if len(tokenKeys) > 0 {
		keys, err := tokensig.New(tokenKeys)
		if err != nil {
			return fmt.Errorf("FENCEPROXY_TOKEN_KEY: %w", err)
		}
		authenticate, signer = proxy.SignedTokens(keys), keys
	}
	upstreamCAs, err := cfg.UpstreamCAs()
	if err != nil {
		return fmt.Errorf("FENCEPROXY_UPSTREAM_CA_FILE: %w", err)
	}
	// One barrier for every raise: writes, lease acquires, admin raises.
	startGrace := cfg.AbandonGrace
	if cleanStart {
		startGrace = 0 // no write of the previous process can be in flight
	}
	barrier, err := fence.New(store, fence.Options{
		DrainTimeout: cfg.DrainTimeout, AbandonGrace: cfg.AbandonGrace, StartGrace: startGrace,
		MaxTokenJump: cfg.MaxTokenJump, ObserveRaise: proxyMetrics.ObserveRaise,
	})
	if err != nil {
		return err
	}
	popts := proxy.OptionsFrom(cfg)
	popts.UpstreamCAs, popts.Logger, popts.Metrics, popts.Authenticate = upstreamCAs, log, proxyMetrics, authenticate
	p, err := proxy.New(barrier, popts)
	if err != nil {
		return err
	}
	if !cleanStart && cfg.AbandonGrace > 0 {
		log.Info("start-up grace: no clean-stop mark (a crash, a kill, or a first start), so writes on resources "+
			"that had a maximum at start wait out the abandon grace once", "until", time.Now().Add(cfg.AbandonGrace).UTC().Format(time.RFC3339Nano))
	}
	// The proxy's start-up grace reads maxima as they were at open; after it
	// the read view would only keep old versions alive.
	snapshotGrace := cfg.AbandonGrace
	if cleanStart {
		snapshotGrace = 0 // no start-up grace reads it
	}
	snapshotTimer := time.AfterFunc(snapshotGrace, store.ReleaseOpenSnapshot)
	defer snapshotTimer.Stop()
	ready := &readiness{Store: store}
	leases := lease.NewManager(store, barrier, lease.Options{
		MinTTL: cfg.LeaseMinTTL, MaxTTL: cfg.LeaseMaxTTL,
		Grace: cfg.LeaseGrace, RevokeAfter: cfg.LeaseRevokeAfter, Logger: log,
	})
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	go leases.Watch(watchCtx, time.Second)
	metrics.MustRegister(leases.Collector())
	errorLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	proxySrv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          errorLog,
	}
	controlSrv := &http.Server{
		Handler: control.Handler(ready, log, control.Options{
			Leases:        leases,
			Metrics:       metrics,
			Warning:       warning,
			LeaseToken:    cfg.LeaseToken,
			ResourceDepth: cfg.ResourceDepth,
			Admin:         adminFences{store: store, fence: barrier},
			AdminToken:    cfg.AdminToken,
			Signer:        signer,
		}),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          errorLog,
	}
	errc := make(chan error, 2)
	go func() {
		errc <- fmt.Errorf("proxy listener: %w", serveMaybeTLS(proxySrv, proxyLn, cfg.TLSCertFile, cfg.TLSKeyFile))
	}()
	go func() {
		errc <- fmt.Errorf("control listener: %w", serveMaybeTLS(controlSrv, controlLn, cfg.ControlTLSCertFile, cfg.ControlTLSKeyFile))
	}()
	log.Info("fenceproxy started",
		"listen", proxyLn.Addr().String(), "control_listen", controlLn.Addr().String(),
		"upstream", cfg.Upstream.Redacted(), "data_dir", cfg.DataDir,
		"token_header", cfg.TokenHeader, "unfenced_methods", cfg.UnfencedMethods,
		"resource_depth", cfg.ResourceDepth, "require_token", cfg.RequireToken,
		"drain_timeout", cfg.DrainTimeout.String(), "shutdown_timeout", cfg.ShutdownTimeout.String(),
		"upstream_dial_timeout", cfg.UpstreamDialTimeout.String(),
		"upstream_response_timeout", cfg.UpstreamResponseTimeout.String(), "upstream_fast_path", cfg.UpstreamFastPath,
		"abandon_grace", cfg.AbandonGrace.String(), "upload_idle_timeout", cfg.UploadIdleTimeout.String(),
		"max_token_jump", cfg.MaxTokenJump,
		"signed_tokens", signer != nil,
		"log_level", cfg.LogLevel.String(), "admin_api", cfg.AdminToken != "", "mode", cfg.Mode,
		"tls", cfg.TLSCertFile != "", "control_tls", cfg.ControlTLSCertFile != "", "upstream_ca_file", cfg.UpstreamCAFile,
		"min_free_space", cfg.MinFreeSpace.String(), "clean_start", cleanStart)
	if onReady != nil {
		onReady(addrs{Proxy: proxyLn.Addr().String(), Control: controlLn.Addr().String()})
	}

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: draining in-flight requests", "shutdown_timeout", cfg.ShutdownTimeout.String())
	case serveErr = <-errc:
		log.Error("listener failed; shutting down", "error", serveErr.Error())
	}
	// A fresh context: the root one is already done. /readyz answers 503
	// while the proxy drains, so the control listener closes last.
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	ready.draining.Store(true)
	// Observe mode forwards writes outside the fence's accounting: it never
	// vouches that none is in flight.
	clean := cfg.Mode != "observe"
	for _, srv := range []*http.Server{proxySrv, controlSrv} {
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("shutdown timeout passed; closing remaining connections", "error", err.Error())
			srv.Close()
			clean = false
		}
		if srv == proxySrv && clean {
			// Abandoned writes hold their barrier through the abandon grace;
			// only once none is left can the next start skip its own grace.
			if err := barrier.WaitIdle(sctx); err != nil {
				log.Warn("shutdown timeout passed with abandoned writes in their grace; the next start waits its start-up grace",
					"abandon_grace", cfg.AbandonGrace.String())
				clean = false
			}
		}
	}
	if clean {
		if err := store.MarkCleanStop(); err != nil {
			log.Warn("could not mark the stop as clean; the next start waits its start-up grace", "error", err.Error())
			clean = false
		}
	}
	log.Info("fenceproxy stopped", "clean_stop", clean)
	return serveErr
}

// storeCloseTimeout bounds Close of the token store at exit. Badger retries a
// failing memtable flush forever (a removed DATA_DIR); every maximum is
// fsynced already, so giving up on the flush loses nothing.
const storeCloseTimeout = 10 * time.Second

// closeStore closes store, giving up after timeout.
func closeStore(store *tokenstore.Store, timeout time.Duration, log *slog.Logger) {
	done := make(chan error, 1)
	go func() { done <- store.Close() }()
	select {
	case err := <-done:
		if err != nil {
			log.Error("closing the token store failed", "error", err.Error())
		}
	case <-time.After(timeout):
		log.Error("closing the token store did not finish; exiting without it (every maximum is already fsynced)",
			"timeout", timeout.String())
	}
}

// serveMaybeTLS serves srv on ln, with TLS when cert and key are set.
func serveMaybeTLS(srv *http.Server, ln net.Listener, cert, key string) error {
	if cert != "" {
		return srv.ServeTLS(ln, cert, key)
	}
	return srv.Serve(ln)
}

// readiness is the store as seen by /readyz: not ready once draining starts.
type readiness struct {
	*tokenstore.Store
	draining atomic.Bool
}

var errDraining = errors.New("shutting down")

func (r *readiness) Ready() error {
	if r.draining.Load() {
		return errDraining
	}
	return r.Store.Ready()
}

// adminFences is the admin API's view of the fences: listed from the store,
// raised and reset through the fence barrier, so an operator's raise cuts
// off and drains the smaller-token writes in flight like a write's raise.
type adminFences struct {
	store *tokenstore.Store
	fence *fence.Barrier
}

func (a adminFences) Raise(ctx context.Context, resource string, t uint64) (uint64, error) {
	return a.fence.Raise(ctx, resource, t)
}

func (a adminFences) Reset(ctx context.Context, resource string) (uint64, error) {
	return a.fence.Reset(ctx, resource, func() (uint64, error) { return a.store.Reset(resource) })
}

func (a adminFences) List(prefix, after string, limit int) ([]fence.Record, error) {
	return a.store.List(prefix, after, limit)
}
