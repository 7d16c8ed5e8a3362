package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fenceproxy/fenceproxy/cluster"
	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/control"
	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/internal/buildinfo"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/pool"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/store/badger"
	"github.com/fenceproxy/fenceproxy/tokensig"
)

// starting is New at work: the server being built, and what one of its
// steps hands to a later one.
type starting struct {
	*Server
	stop context.Context // ends the retries of etcd at start
	undo []func()        // what was bound or opened, undone in reverse if a step fails

	cleanStart, newStore bool          // the clean-stop mark was there; the store was empty
	startGrace           time.Duration // the barrier's start-up grace
	metrics              *prometheus.Registry
	proxyMetrics         *proxy.Metrics
	warning              string // observe mode's, shown on /readyz
	authenticate         func(*http.Request, []string, uint64) error
	signer               control.Signer // signed-token mode: the lease API signs its tokens
	proxy                *proxy.Proxy
	pools                *pool.Pools
	build                buildinfo.Info
	maxConns             int            // MAX_CONNECTIONS as the open-file limit allows; 0: no limit
	tracingExport        config.OTLP    // with TRACING: where spans go
	proxyLimit           *limitListener // the proxy listener's, nil without a limit
}

// steps are New's steps, in order.
func (st *starting) steps() []func() error {
	return []func() error{st.listen, st.openStore, st.newMetrics, st.startTracing, st.signedTokens, st.buildBarrier,
		st.buildProxy, st.buildLeases, st.buildControl, st.startCluster}
}

// rollback undoes what the steps so far bound or opened.
func (st *starting) rollback() {
	for i := len(st.undo) - 1; i >= 0; i-- {
		st.undo[i]()
	}
}

// listen binds both listeners, first, so that a port clash leaves no store
// directory behind.
func (st *starting) listen() (err error) {
	if st.proxyLn, err = net.Listen("tcp", st.cfg.Listen); err != nil {
		return fmt.Errorf("FENCEPROXY_LISTEN: %w", err)
	}
	if st.maxConns = st.maxConnections(); st.maxConns > 0 {
		st.proxyLimit = newLimitListener(st.proxyLn, st.maxConns, st.log)
		st.proxyLn = st.proxyLimit
	}
	st.undo = append(st.undo, func() { st.proxyLn.Close() })
	if st.controlLn, err = net.Listen("tcp", st.cfg.ControlListen); err != nil {
		return fmt.Errorf("FENCEPROXY_CONTROL_LISTEN: %w", err)
	}
	st.undo = append(st.undo, func() { st.controlLn.Close() })
	return nil
}

// maxConnections is MAX_CONNECTIONS as the open-file limit allows it: each
// connection may hold 2 descriptors (the client's and, during an upload,
// the backend's), and the store, the control listener and the cluster need
// some (fdReserve). 0: no limit.
func (st *starting) maxConnections() int {
	want := st.cfg.MaxConnections
	limit := openFileLimit()
	if want <= 0 || limit == 0 || uint64(want)*2+fdReserve <= limit {
		return want
	}
	allowed := 1
	if limit > fdReserve+2 {
		allowed = int((limit - fdReserve) / 2)
	}
	st.log.Warn("FENCEPROXY_MAX_CONNECTIONS is above what the open-file limit allows (2 descriptors per connection plus a reserve); "+
		"lowered to fit: raise the limit (ulimit -n, LimitNOFILE=) to keep the configured value",
		"max_connections", want, "lowered_to", allowed, "rlimit_nofile", limit, "reserve", fdReserve)
	return allowed
}

// fdReserve are the descriptors kept out of MAX_CONNECTIONS' reach: the
// store's files, the control and peer listeners and their connections.
const fdReserve = 512

// openStore opens the token store: in etcd with the cluster (cluster mode),
// else Badger's in DATA_DIR, taking its clean-stop mark.
func (st *starting) openStore() error {
	if st.cfg.Store == "etcd" {
		return st.openCluster()
	}
	ts, err := badger.Open(st.cfg.DataDir, badger.Options{Logger: st.log, MinFreeSpace: uint64(st.cfg.MinFreeSpace), CacheBytes: int64(st.cfg.CacheSize)})
	if err != nil {
		return fmt.Errorf("open FENCEPROXY_DATA_DIR: %w", err)
	}
	st.store, st.badger = ts, ts
	st.undo = append(st.undo, func() { closeStore(ts, storeCloseTimeout, st.log) })
	// Taken (removed durably) before any write is forwarded: a crash of this
	// process must never pass for a clean stop.
	if st.cleanStart, err = ts.TakeCleanStop(); err != nil {
		return fmt.Errorf("FENCEPROXY_DATA_DIR: %w", err)
	}
	// A store without records is new (or was never written through): no
	// earlier write can be in flight, so a missing mark is no crash.
	st.newStore = ts.EmptyAtOpen()
	return nil
}

// openCluster binds the peer listener and opens the store in etcd; the
// ownership waits for startCluster.
func (st *starting) openCluster() error {
	opts, err := clusterOptionsFrom(st.cfg)
	if err != nil {
		return err
	}
	opts.Logger = st.log
	if st.cluster, err = cluster.New(st.stop, opts); err != nil {
		return err
	}
	st.peerLn = st.cluster.Listener()
	st.undo = append(st.undo, func() { st.peerLn.Close() })
	st.store = st.cluster.Store()
	st.undo = append(st.undo, func() { closeStore(st.store, storeCloseTimeout, st.log) })
	// No clean-stop mark and no start-up grace: a shard's new owner
	// waits out the lock-delay after an unclean loss instead.
	st.cleanStart = true
	return nil
}

// newMetrics makes the registry the control API serves (with the upstream
// probe's gauge), and says so when nothing is fenced (observe mode).
func (st *starting) newMetrics() error {
	st.metrics = prometheus.NewRegistry()
	st.proxyMetrics = proxy.NewMetrics(st.metrics)
	if l := st.proxyLimit; l != nil {
		l.metrics = st.proxyMetrics
		st.metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fenceproxy_connections_open",
			Help: "Client connections the proxy listener holds open now (bounded by FENCEPROXY_MAX_CONNECTIONS).",
		}, func() float64 { return float64(l.open()) }))
	}
	store := st.store
	st.upstream = newUpstreamProbe(st.cfg, st.log)
	st.metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenceproxy_upstream_up",
		Help: "1 while the last TCP connection attempt to FENCEPROXY_UPSTREAM's host and port succeeded, 0 while it failed (every FENCEPROXY_UPSTREAM_PROBE_INTERVAL).",
	}, st.upstream.up))
	st.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fenceproxy_fenced_resources",
			Help: "Resources with a maximum above 0 held in memory now (within FENCEPROXY_CACHE_SIZE).",
		}, func() float64 { return float64(store.Resources()) }))
	if st.cfg.Mode == "observe" {
		st.warning = "OBSERVE MODE: stale and invalid writes are logged and counted but FORWARDED; nothing is fenced"
		st.log.Warn(st.warning)
	}
	return nil
}

// signedTokens sets up signed-token mode: the lease API signs the tokens it
// issues, and the proxy forwards only writes whose token carries a valid
// signature.
func (st *starting) signedTokens() error {
	tokenKeys, err := st.cfg.TokenKeyBytes()
	if err != nil {
		return fmt.Errorf("FENCEPROXY_TOKEN_KEY: %w", err)
	}
	if len(tokenKeys) == 0 {
		return nil
	}
	keys, err := tokensig.New(tokenKeys)
	if err != nil {
		return fmt.Errorf("FENCEPROXY_TOKEN_KEY: %w", err)
	}
	// In S3 mode a prefix fence P/ covers the resource P too (PrefixOwnName).
	st.authenticate, st.signer = proxy.SignedTokens(keys, fenceOptionsFrom(st.cfg).PrefixOwnName), keys
	return nil
}

// buildBarrier builds the one barrier for every raise: writes, lease
// acquires, admin raises.
func (st *starting) buildBarrier() (err error) {
	fopts := fenceOptionsFrom(st.cfg)
	if !st.cleanStart && !st.newStore {
		// Writes of the previous process may still be in flight.
		fopts.StartGrace = st.cfg.AbandonGrace
	}
	fopts.ObserveRaise = st.proxyMetrics.ObserveRaise
	st.startGrace = fopts.StartGrace
	st.barrier, err = fence.New(st.store, fopts)
	return err
}

// buildProxy builds the proxy listener's handler: in S3 gateway mode with
// its gateway, in cluster mode routing writes to their shard's owner.
func (st *starting) buildProxy() (err error) {
	cfg := st.cfg
	popts := proxyOptionsFrom(cfg)
	if popts.UpstreamCAs, err = cfg.UpstreamCAs(); err != nil {
		return fmt.Errorf("FENCEPROXY_UPSTREAM_CA_FILE: %w", err)
	}
	popts.Logger, popts.Metrics, popts.Authenticate = st.log, st.proxyMetrics, st.authenticate
	if st.tracing != nil {
		popts.Tracer = st.tracing.Tracer(tracerName)
	}
	if cfg.S3 != "off" {
		popts.MultipartRecords = st.store
	}
	st.watchCtx, st.stopWatch = context.WithCancel(context.Background())
	st.undo = append(st.undo, st.stopWatch)
	if cfg.S3 == "resign" {
		if popts.Gateway, err = newGateway(st.watchCtx, cfg, st.log); err != nil {
			return err
		}
	}
	if st.cluster != nil {
		popts.Owner = st.cluster.ProxyOwner
		st.metrics.MustRegister(st.cluster.Collectors()...)
	}
	if st.proxy, err = proxy.New(st.barrier, popts); err != nil {
		return err
	}
	if st.startGrace > 0 {
		st.log.Info("start-up grace: no clean-stop mark (a crash, a kill, a stop that timed out or one in observe mode), so writes on resources "+
			"that had a maximum at start wait out the abandon grace once", "until", time.Now().Add(cfg.AbandonGrace).UTC().Format(time.RFC3339Nano))
	}
	// The proxy's start-up grace reads maxima as they were at open; after it
	// the read view would only keep old versions alive.
	st.snapshotTimer = time.AfterFunc(st.startGrace, st.store.ReleaseOpenSnapshot)
	return nil
}

// buildLeases builds /readyz's view, the lease manager and the pools.
func (st *starting) buildLeases() error {
	st.ready = &readiness{store: st.store}
	if st.cfg.ReadyNeedsUpstream {
		st.ready.upstream = st.upstream.Ready
	}
	lopts := leaseOptionsFrom(st.cfg)
	lopts.Logger = st.log
	if st.cluster != nil {
		st.ready.cluster = st.cluster.Ready
		lopts.Watched = st.cluster.Owns
	}
	st.leases = lease.NewManager(st.store, st.barrier, lopts)
	st.metrics.MustRegister(st.leases.Collector())
	// Pools: a claim is decided in the pool's owner (cluster mode) and
	// granted as a lease on the shard's name, on that name's owner.
	var poolLeases pool.Leases = st.leases
	if st.cluster != nil {
		poolLeases = cluster.NewLeases(st.cluster, st.leases, st.cfg.LeaseToken)
	}
	pm := pool.NewMetrics()
	st.pools = pool.New(st.store, poolLeases, pm.Events())
	pm.Attach(st.pools)
	st.metrics.MustRegister(pm)
	st.build = buildinfo.Read()
	st.metrics.MustRegister(buildInfoGauge(st.build))
	return nil
}

// buildControl builds the control API and the HTTP servers of the
// listeners: the proxy's, the control API's, and in cluster mode the peer
// listener's, which serves both handlers to other replicas.
func (st *starting) buildControl() error {
	cfg := st.cfg
	copts := control.Options{
		Leases:        st.leases,
		Metrics:       st.metrics,
		Warning:       st.warning,
		LeaseToken:    cfg.LeaseToken,
		ResourceDepth: cfg.ResourceDepth,
		PrefixFence:   st.barrier.CheckPrefix,
		Admin:         adminFences{store: st.store, fence: st.barrier},
		AdminToken:    cfg.AdminToken,
		Signer:        st.signer,
		Pools:         st.pools,
	}
	if cfg.S3 != "off" {
		copts.Names = s3.ResourceName // the key a name's writes resolve to
	}
	if st.cluster != nil {
		copts.Owner = st.cluster.ControlOwner
	}
	controlHandler := control.Handler(st.ready, st.log, copts)
	st.proxySrv = st.httpServer(st.proxy, maxHeaderBytes)
	if l, srv := st.proxyLimit, st.proxySrv; l != nil {
		// At the cap, idle keep-alive connections close (and answers close
		// theirs), so that the slots go to the connections waiting.
		l.full = func(full bool) { srv.SetKeepAlivesEnabled(!full) }
	}
	st.controlSrv = st.httpServer(controlHandler, maxHeaderBytes)
	if st.cluster != nil {
		// The peer headers on top of the client's.
		st.peerSrv = st.httpServer(st.cluster.PeerHandler(st.proxy, controlHandler), maxHeaderBytes+4<<10)
	}
	return nil
}

// httpServer is a listener's server of h, with the listener limits.
func (st *starting) httpServer(h http.Handler, maxHeader int) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeader,
		ErrorLog:          slog.NewLogLogger(st.log.Handler(), slog.LevelWarn),
	}
}

// startCluster starts the shard ownership, last: from here on this replica
// takes its share of the shards.
func (st *starting) startCluster() error {
	if st.cluster == nil {
		return nil
	}
	if err := st.cluster.Start(st.stop, st.barrier); err != nil {
		return err
	}
	st.undo = append(st.undo, func() { st.cluster.Stop(context.Background(), true) })
	return nil
}

// logStarted logs "fenceproxy started" with the configuration, and in
// cluster mode "cluster mode" with its own.
func (st *starting) logStarted() {
	cfg, build := st.cfg, st.build
	leaseAPI, leaseGuarded := cfg.LeaseAPIGuard()
	st.log.Info("fenceproxy started",
		"version", build.Version, "revision", build.RevisionOrUnknown(), "modified", build.Modified, "go_version", build.GoVersion,
		"listen", st.proxyLn.Addr().String(), "listen_reach", reach(st.proxyLn.Addr()),
		"control_listen", st.controlLn.Addr().String(), "control_listen_reach", reach(st.controlLn.Addr()),
		"lease_api", leaseAPI, "lease_api_guarded", leaseGuarded,
		"upstream", cfg.Upstream.Redacted(), "data_dir", cfg.DataDir,
		"token_header", cfg.TokenHeader, "unfenced_methods", cfg.UnfencedMethods,
		"resource_depth", cfg.ResourceDepth, "require_token", cfg.RequireToken,
		"drain_timeout", cfg.DrainTimeout.String(), "shutdown_timeout", cfg.ShutdownTimeout.String(),
		"upstream_dial_timeout", cfg.UpstreamDialTimeout.String(), "upstream_probe_interval", cfg.UpstreamProbeInterval.String(),
		"ready_needs_upstream", cfg.ReadyNeedsUpstream,
		"upstream_response_timeout", cfg.UpstreamResponseTimeout.String(), "upstream_fast_path", cfg.UpstreamFastPath,
		"upstream_unsent_max", cfg.UpstreamUnsentMax.String(),
		"abandon_grace", cfg.AbandonGrace.String(), "upload_idle_timeout", cfg.UploadIdleTimeout.String(),
		"upload_min_rate", cfg.UploadMinRate.String(), "upload_rate_window", cfg.UploadRateWindow.String(),
		"max_uploads", cfg.MaxUploads, "max_connections", st.maxConns,
		"max_token_jump", cfg.MaxTokenJump, "allow_path_params", cfg.AllowPathParams,
		"lease_grace", leaseGraceText(cfg.LeaseGrace), "lease_revoke_after", revokeAfterText(cfg.LeaseRevokeAfter),
		"lease_min_ttl", cfg.LeaseMinTTL.String(), "lease_max_ttl", cfg.LeaseMaxTTL.String(), "lease_token_set", cfg.LeaseToken != "",
		"signed_tokens", st.signer != nil,
		"log_level", cfg.LogLevel.String(), "access_log", cfg.AccessLog, "admin_api", cfg.AdminToken != "", "mode", cfg.Mode,
		"tls", cfg.TLSCertFile != "", "control_tls", cfg.ControlTLSCertFile != "", "upstream_ca_file", cfg.UpstreamCAFile,
		"s3", cfg.S3, "s3_domains", cfg.S3Domains, "s3_bucket_writes", cfg.S3BucketWrites,
		"min_free_space", cfg.MinFreeSpace.String(), "cache_size", cfg.CacheSize.String(), "clean_start", st.cleanStart, "new_store", st.newStore,
		"store", cfg.Store, "tracing", cfg.Tracing)
	if cfg.Tracing {
		st.log.Info("tracing: a span per request on the proxy listener, exported by OTLP",
			"otlp_protocol", st.tracingExport.Protocol, "otlp_endpoint", st.tracingExport.Endpoint)
	}
	if st.cluster != nil {
		st.log.Info("cluster mode", "etcd_endpoints", cfg.EtcdEndpoints, "etcd_prefix", cfg.EtcdPrefix, "etcd_tls", cfg.EtcdCAFile != "" || cfg.EtcdCertFile != "",
			"etcd_user", cfg.EtcdUsername, "shards", cfg.Shards, "shard_depth", cfg.ShardDepth, "replica_id", cfg.ReplicaID, "peer_listen", st.peerLn.Addr().String(), "peer_listen_reach", reach(st.peerLn.Addr()),
			"peer_advertise", cfg.PeerAdvertise, "shard_ttl", cfg.ShardTTL.String(), "lock_delay", cfg.LockDelay.String(),
			"lock_delay_min", cfg.LockDelayMin().String())
	}
}

// reach says who can connect to a bound listener: "loopback only" (this
// host), "all interfaces" (0.0.0.0 or ::), or "this address only".
func reach(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	switch {
	case err != nil:
		return "unknown"
	case ap.Addr().IsLoopback():
		return "loopback only"
	case ap.Addr().IsUnspecified():
		return "all interfaces"
	default:
		return "this address only"
	}
}
