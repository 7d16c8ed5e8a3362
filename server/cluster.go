package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/pkg/v3/logutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/control"
	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/shard"
	"github.com/fenceproxy/fenceproxy/store/etcd"
	"github.com/fenceproxy/fenceproxy/wire"
)

// Headers of a request forwarded to the owner over the peer listener. The
// owner removes both before its handlers see the request.
const (
	// headerPeerSecret carries FENCEPROXY_PEER_SECRET.
	headerPeerSecret = "Fenceproxy-Peer-Secret"
	// headerPeerTarget names the owner's handler: "proxy" or "control".
	headerPeerTarget = "Fenceproxy-Peer-Target"
)

// drainPoll is how often a handover looks whether a shard's writes are done.
const drainPoll = 5 * time.Millisecond

// fromPeerKey marks the context of a request that came over the peer
// listener: it is never forwarded again.
type fromPeerKey struct{}

// cluster is this replica's part in cluster mode (FENCEPROXY_STORE=etcd):
// the shard ownership, the count of writes per shard that a handover drains,
// and the forwarding to a shard's owner over the peer listener. See
// docs/CLUSTER.md.
type cluster struct {
	cfg     config.Config
	log     *slog.Logger
	store   *etcd.Store
	barrier *fence.Barrier
	owner   *shard.Owner     // set by start
	cli     *clientv3.Client // the ownership's own etcd client

	// inflight counts, per shard, the writes and named control calls that
	// entered before their ownership check and have not ended: a handover
	// waits for it, so a request that passed the check is never missed.
	inflight []atomic.Int64
	// forgotten holds, per shard, the ownership epoch for which the
	// store's cached maxima of the shard were dropped: what another owner
	// raised meanwhile is read from etcd.
	forgotten []atomic.Int64
	forgetMu  sync.Mutex

	peer    *httputil.ReverseProxy
	peerLn  net.Listener
	peerSrv *http.Server

	forwards *prometheus.CounterVec // by result
	stopOnce sync.Once
}

// newCluster opens nothing: it prepares the forwarding and the counts.
func newCluster(cfg config.Config, store *etcd.Store, barrier *fence.Barrier, log *slog.Logger) *cluster {
	c := &cluster{
		cfg: cfg, log: log, store: store, barrier: barrier,
		inflight:  make([]atomic.Int64, cfg.Shards),
		forgotten: make([]atomic.Int64, cfg.Shards),
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_peer_forwards_total",
			Help: "Requests forwarded to the replica that owns their shard, by result: ok (an answer came back), unreachable (not sent: 503), refused (the owner refused this replica's PEER_SECRET: 503), failed (sent, no answer: 502).",
		}, []string{"result"}),
	}
	for _, r := range []string{"ok", "unreachable", "failed", "refused"} {
		c.forwards.WithLabelValues(r)
	}
	c.peer = &httputil.ReverseProxy{
		Rewrite:        c.rewrite,
		Transport:      peerTransport(cfg.UpstreamDialTimeout, cfg.DrainTimeout, cfg.DrainTimeout+cfg.UpstreamResponseTimeout+5*time.Second),
		FlushInterval:  -1,
		BufferPool:     proxy.CopyBuffers,
		ErrorHandler:   c.forwardError,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ModifyResponse: c.checkPeerAnswer,
	}
	return c
}

// peerTransport sends forwarded requests: no proxy from the environment, no
// compression added, connections kept for reuse. A client's Expect:
// 100-continue holds its body back until the owner admits the write (up to
// expect, the owner's longest wait at its barrier), as without the hop. An
// owner that stalls (a frozen process still accepts connections) is given
// up on after answer: its longest wait at the barrier plus the backend's.
func peerTransport(dial, expect, answer time.Duration) *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ExpectContinueTimeout: expect,
		ResponseHeaderTimeout: answer,
	}
}

// start connects the shard ownership to etcd (a client of its own, so that
// keepalives never queue behind the store's transactions) and starts
// acquiring this replica's share. Errors: etcd unreachable, the shard count
// stored differs (naming both), the options.
func (c *cluster) start(stop context.Context, clientCfg clientv3.Config) error {
	cli, err := clientv3.New(clientCfg)
	if err != nil {
		return fmt.Errorf("FENCEPROXY_ETCD_ENDPOINTS: %w", err)
	}
	var o *shard.Owner
	err = retryEtcd(stop, c.log, "join the cluster", func() (err error) {
		o, err = shard.Start(context.Background(), cli, shard.Options{
			Prefix:       c.cfg.EtcdPrefix,
			Shards:       c.cfg.Shards,
			ID:           c.cfg.ReplicaID,
			Advertise:    c.cfg.PeerAdvertise,
			TTL:          c.cfg.ShardTTL,
			LockDelay:    lockDelay(c.cfg.LockDelay),
			DrainTimeout: c.cfg.ShutdownTimeout,
			Drain:        c.drain, // the shard package logs acquisitions and losses
			Logger:       c.log,
		})
		return err
	}, func(err error) bool {
		return errors.Is(err, shard.ErrShardCount) || errors.Is(err, shard.ErrDuplicateID)
	})
	if err != nil {
		cli.Close()
		if errors.Is(err, shard.ErrShardCount) {
			return fmt.Errorf("FENCEPROXY_SHARDS: %w", err)
		}
		return fmt.Errorf("cluster: %w", err)
	}
	c.owner, c.cli = o, cli
	return nil
}

// stop hands this replica's shards over and leaves the cluster, once:
// drained with the "released" marker (the next owners admit at once) within
// ctx, or, with now or after ctx, dropped with the lease (the next owners
// wait the lock-delay). It closes the ownership's etcd client.
func (c *cluster) stop(ctx context.Context, now bool) {
	c.stopOnce.Do(func() {
		if c.owner == nil {
			return
		}
		if now {
			done, cancel := context.WithCancel(ctx)
			cancel()
			ctx = done
		}
		start, before := time.Now(), c.owner.Stats()
		err := c.owner.Close(ctx)
		st := c.owner.Stats()
		st.ReleasedPlanned -= before.ReleasedPlanned
		st.ReleasedUndrained -= before.ReleasedUndrained
		if err != nil {
			c.log.Warn("left the cluster without handing every shard over; their next owners wait the lock-delay",
				"error", err.Error(), "released_planned", st.ReleasedPlanned, "released_undrained", st.ReleasedUndrained)
		} else {
			c.log.Info("left the cluster: every shard handed over", "took", time.Since(start).Round(time.Millisecond).String(),
				"released_planned", st.ReleasedPlanned, "released_undrained", st.ReleasedUndrained)
		}
		c.cli.Close()
	})
}

// owns reports whether this replica holds the shard of name now.
func (c *cluster) owns(name string) bool {
	if c.owner == nil {
		return false
	}
	_, ok := c.owner.State(c.shardOf(name))
	return ok
}

// guard is etcd.Options.Guard: the store commits a write of resource
// only while the owner key of its shard is the one this replica created
// (the grant's epoch), so a replica that stalled past its ownership cannot
// commit a raise, lease or reset that the next owner would not see.
func (c *cluster) guard(resource string) (string, int64, error) {
	if c.owner == nil {
		return "", 0, errors.New("cluster: not started")
	}
	n := c.shardOf(resource)
	g, ok := c.owner.State(n)
	if !ok {
		return "", 0, fmt.Errorf("this replica does not hold shard %d", n)
	}
	return c.owner.OwnerKey(n), g.Epoch, nil
}

// lockDelay is LOCK_DELAY as shard.Options takes it: 0s is none.
func lockDelay(d time.Duration) time.Duration {
	if d == 0 {
		return shard.NoLockDelay
	}
	return d
}

// etcdStartBudget bounds the retries of a start step that failed on
// something passing in etcd (a leader election, a member restarting).
const etcdStartBudget = 30 * time.Second

// retryEtcd runs step until it succeeds, fails for good (permanent, when
// set, says so), etcdStartBudget has passed or stop ended, logging each
// failure; it returns the last error (stop's cause when it ended).
func retryEtcd(stop context.Context, log *slog.Logger, what string, step func() error, permanent func(error) bool) error {
	deadline := time.Now().Add(etcdStartBudget)
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 4*time.Second) {
		err := step()
		if err == nil || (permanent != nil && permanent(err)) || time.Now().Add(wait).After(deadline) {
			return err
		}
		log.Warn("etcd: "+what+" failed; retrying", "error", err.Error(), "in", wait.String())
		select {
		case <-stop.Done():
			return fmt.Errorf("stopped while retrying (%w): %w", context.Cause(stop), err)
		case <-time.After(wait):
		}
	}
}

// shardOf is the shard of resource.
func (c *cluster) shardOf(resource string) int { return shard.Of(resource, c.cfg.Shards) }

// drain is shard.Options.Drain: it returns once no write or named control
// call of shard n that passed its ownership check is running, and no write
// on the shard's resources is unfinished in the barrier (abandoned ones
// through their abandon grace).
func (c *cluster) drain(ctx context.Context, n int) error {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for c.inflight[n].Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d requests of shard %d still running: %w", c.inflight[n].Load(), n, ctx.Err())
		case <-t.C:
		}
	}
	return c.barrier.WaitIdleWhere(ctx, func(r string) bool { return c.shardOf(r) == n }, drainPoll)
}

// placement is where the requests on a set of shards go.
type placement struct {
	shards  []int
	local   bool // this replica may admit them all now
	grants  []shard.Grant
	forward shard.Member  // local false: the owner of them all, when there is one
	why     string        // neither: why no replica may take them now
	wait    time.Duration // neither, in a lock-delay here: until it ends
}

// enter counts the request in flight on its shards and then decides where it
// goes: the count comes first, so that a handover that starts after the
// ownership check waits for the request. The counts are taken back unless
// the route is local; then leave must be called.
func (c *cluster) enter(ctx context.Context, names []string) placement {
	rt := placement{shards: make([]int, 0, 1)}
	for _, name := range names {
		if n := c.shardOf(name); !slices.Contains(rt.shards, n) {
			rt.shards = append(rt.shards, n)
		}
	}
	for _, n := range rt.shards {
		c.inflight[n].Add(1)
	}
	rt.local = true
	for _, n := range rt.shards {
		g, ok := c.owner.MayAdmit(n)
		if !ok {
			rt.local = false
			break
		}
		rt.grants = append(rt.grants, g)
	}
	if rt.local {
		c.forgetOnce(rt.grants)
		return rt
	}
	c.leave(rt)
	rt.grants = nil
	held := false
	var owners []shard.Member
	for _, n := range rt.shards {
		if g, ok := c.owner.State(n); ok {
			held = true
			rt.wait = max(rt.wait, time.Until(g.AdmitAfter))
		}
		m, ok := c.owner.OwnerOf(n)
		if !ok {
			rt.why = fmt.Sprintf("shard %d has no owner now (a replica is taking it over)", n)
			return rt
		}
		if !slices.Contains(owners, m) {
			owners = append(owners, m)
		}
	}
	switch {
	case held:
		rt.why = fmt.Sprintf("this replica owns shard %d but may not admit its writes now (waiting out the lock-delay after an unclean handover, handing it over, or cut off from etcd)", rt.shards[0])
	case len(owners) > 1:
		rt.why = fmt.Sprintf("the request touches %d shards owned by different replicas; cluster mode fences a request in one replica (RESOURCE_DEPTH can put related keys in one resource)", len(rt.shards))
	case owners[0].ID == c.cfg.ReplicaID:
		rt.why = "etcd names this replica the owner, but it does not hold the shard (its view is catching up)"
	case ctx.Value(fromPeerKey{}) != nil:
		rt.why = "forwarded by another replica, but this one no longer owns the shard (it moved)"
	default:
		rt.forward = owners[0]
	}
	return rt
}

// leave ends what enter counted.
func (c *cluster) leave(rt placement) {
	for _, n := range rt.shards {
		c.inflight[n].Add(-1)
	}
}

// forgetOnce drops the store's cached maxima of each granted shard once per
// ownership epoch, before the first request of that ownership reads them.
func (c *cluster) forgetOnce(grants []shard.Grant) {
	for _, g := range grants {
		if c.forgotten[g.Shard].Load() == g.Epoch {
			continue
		}
		c.forgetMu.Lock()
		if c.forgotten[g.Shard].Load() != g.Epoch {
			n := g.Shard
			c.store.Forget(func(r string) bool { return c.shardOf(r) == n })
			c.forgotten[n].Store(g.Epoch)
		}
		c.forgetMu.Unlock()
	}
}

// valid reports whether this replica still holds every grant, its validity
// not passed (shard.Owner.Holds: atomic loads and a boot-time clock read).
func (c *cluster) valid(grants []shard.Grant) bool {
	for _, g := range grants {
		if !c.owner.Holds(g) {
			return false
		}
	}
	return true
}

// validUntil is when the first of grants' validities ends as they stand
// now (shard.Owner.ValidUntil), a moment already past once one no longer
// holds, the zero time when none ends (validity off).
func (c *cluster) validUntil(grants []shard.Grant) time.Time {
	var end time.Time
	for _, g := range grants {
		u, ok := c.owner.ValidUntil(g)
		if !ok {
			return time.Now().Add(-time.Nanosecond)
		}
		if !u.IsZero() && (end.IsZero() || u.Before(end)) {
			end = u
		}
	}
	return end
}

// proxyOwner is proxy.Options.Owner.
func (c *cluster) proxyOwner(r *http.Request, resources []string) (proxy.Ownership, error) {
	rt := c.enter(r.Context(), resources)
	switch {
	case rt.local:
	case rt.forward.Addr != "":
		return proxy.Ownership{Forward: c.forwardTo(rt.forward, "proxy", resources[0])}, nil
	default:
		return proxy.Ownership{}, unavailable{fmt.Errorf("%w: %s", proxy.ErrShardUnavailable, rt.why), rt.wait}
	}
	// The upstream exchange follows the ownership, never the client.
	ctx, cancel := context.Context(context.WithoutCancel(r.Context())), context.CancelFunc(func() {})
	var cancels []context.CancelFunc
	for _, n := range rt.shards {
		sctx, scancel, err := c.owner.Context(ctx, n)
		if err != nil {
			for _, f := range cancels {
				f()
			}
			cancel()
			c.leave(rt)
			return proxy.Ownership{}, fmt.Errorf("%w: %v", proxy.ErrShardUnavailable, err)
		}
		ctx = sctx
		cancels = append(cancels, scancel)
	}
	grants := rt.grants
	return proxy.Ownership{
		Context:    ctx,
		Valid:      func() bool { return c.valid(grants) },
		ValidUntil: func() time.Time { return c.validUntil(grants) },
		Done: func() {
			for _, f := range cancels {
				f()
			}
			cancel()
			c.leave(rt)
		},
	}, nil
}

// controlOwner is control.Options.Owner.
func (c *cluster) controlOwner(r *http.Request, name string) (func(), http.Handler, error) {
	rt := c.enter(r.Context(), []string{name})
	switch {
	case rt.local:
		return func() { c.leave(rt) }, nil, nil
	case rt.forward.Addr != "":
		return nil, c.forwardTo(rt.forward, "control", name), nil
	default:
		return nil, nil, unavailable{fmt.Errorf("%w: %s", control.ErrShardUnavailable, rt.why), rt.wait}
	}
}

// unavailable is a refusal while no replica may admit a shard's writes,
// with how long until this replica may (a lock-delay), for Retry-After.
type unavailable struct {
	err  error
	wait time.Duration
}

func (u unavailable) Error() string             { return u.err.Error() }
func (u unavailable) Unwrap() error             { return u.err }
func (u unavailable) RetryAfter() time.Duration { return u.wait }

type peerAddrKey struct{}
type peerTargetKey struct{}

type peerResourceKey struct{}

// forwardTo returns the handler that sends a request on resource whole to
// the owner m's handler target ("proxy" or "control").
func (c *cluster) forwardTo(m shard.Member, target, resource string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), peerAddrKey{}, m.Addr)
		ctx = context.WithValue(context.WithValue(ctx, peerTargetKey{}, target), peerResourceKey{}, resource)
		c.peer.ServeHTTP(w, r.WithContext(ctx))
	})
}

// headerPeerRefused marks the peer listener's own refusal of a request
// without the peer secret, so that the forwarding replica tells it from an
// answer of the owner's handlers.
const headerPeerRefused = "Fenceproxy-Peer-Refused"

// errPeerSecret: the owner refused this replica's PEER_SECRET.
var errPeerSecret = errors.New("the owner replica refused this replica's FENCEPROXY_PEER_SECRET: the replicas' secret lists share no secret")

// checkPeerAnswer is the forwarding's ModifyResponse.
func (c *cluster) checkPeerAnswer(resp *http.Response) error {
	if resp.Header.Get(headerPeerRefused) != "" {
		return errPeerSecret
	}
	c.forwards.WithLabelValues("ok").Inc()
	return nil
}

// rewrite is the forwarding's Rewrite: the request as the client sent it
// (Host, the path's bytes, query, headers, X-Forwarded-* included), to the
// owner's peer address, with the peer secret and the target handler.
func (c *cluster) rewrite(pr *httputil.ProxyRequest) {
	in, out := pr.In, pr.Out
	out.URL.Scheme, out.URL.Host = "http", in.Context().Value(peerAddrKey{}).(string)
	out.Host = in.Host
	// The target's bytes as received: a re-encoded path could name another
	// resource or break a signature over it.
	if raw, _, _ := strings.Cut(in.RequestURI, "?"); strings.HasPrefix(raw, "/") && !strings.HasPrefix(raw, "//") {
		out.URL.Opaque = raw
	}
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		if v, ok := in.Header[h]; ok {
			out.Header[h] = v
		}
	}
	out.Header.Set(headerPeerSecret, c.cfg.PeerSecrets[0])
	out.Header.Set(headerPeerTarget, in.Context().Value(peerTargetKey{}).(string))
}

// forwardError answers a forward that failed: 503 shard_unavailable (with
// Retry-After) when the owner could not be reached, so nothing was sent, or
// refused this replica's peer secret (which it checks before anything else);
// 502 when the request was sent and no answer came (its outcome unknown).
func (c *cluster) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	addr, _ := r.Context().Value(peerAddrKey{}).(string)
	resource, _ := r.Context().Value(peerResourceKey{}).(string)
	attrs := []any{"peer", addr, "resource", resource, "method", r.Method, "error", err.Error()}
	var op *net.OpError
	switch {
	case errors.Is(err, errPeerSecret):
		c.forwards.WithLabelValues("refused").Inc()
		c.log.Error("owner replica refused the peer secret: every replica's FENCEPROXY_PEER_SECRET list must share a secret", attrs...)
		c.refuse(w, r, wire.Problem{Status: http.StatusServiceUnavailable, Reason: wire.ReasonShardUnavailable, Title: "Shard unavailable",
			Resource: resource, Detail: "the replica that owns this resource's shard refused this replica's peer secret (a configuration error); nothing was forwarded"})
		return
	case errors.As(err, &op) && op.Op == "dial":
		c.forwards.WithLabelValues("unreachable").Inc()
		c.log.Warn("write refused: the owner replica is unreachable", attrs...)
		c.refuse(w, r, wire.Problem{Status: http.StatusServiceUnavailable, Reason: wire.ReasonShardUnavailable, Title: "Shard unavailable",
			Resource: resource, Detail: "the replica that owns this resource's shard could not be reached; nothing was forwarded"})
		return
	}
	if r.Context().Err() != nil {
		return // the client went away
	}
	c.forwards.WithLabelValues("failed").Inc()
	c.log.Warn("forward to the owner replica failed", attrs...)
	c.writeProblem(w, r, wire.Problem{Status: http.StatusBadGateway, Title: http.StatusText(http.StatusBadGateway), Resource: resource,
		Detail: "the replica that owns this resource's shard did not answer; the write may or may not have been applied"})
}

// refuse answers a refusal of the proxy's own: Fencing-Refused and
// Retry-After, as every 503 the proxy gives.
func (c *cluster) refuse(w http.ResponseWriter, r *http.Request, p wire.Problem) {
	w.Header().Set(wire.HeaderRefused, p.Reason)
	w.Header().Set("Retry-After", "1")
	c.writeProblem(w, r, p)
}

// writeProblem answers p as the proxy would: an S3 <Error> in S3 mode on
// the proxy listener, else a problem.
func (c *cluster) writeProblem(w http.ResponseWriter, r *http.Request, p wire.Problem) {
	if c.cfg.S3 != "off" && r.Context().Value(peerTargetKey{}) == "proxy" {
		s3.WriteError(w, p.Status, s3.ErrorOf(p, r.URL.Path))
		return
	}
	wire.WriteProblem(w, p)
}

// peerHandler serves the peer listener: requests forwarded by other
// replicas, with the peer secret, to the proxy or the control API.
func (c *cluster) peerHandler(proxyH, controlH http.Handler) http.Handler {
	secrets := make([][]byte, len(c.cfg.PeerSecrets))
	for i, s := range c.cfg.PeerSecrets {
		secrets[i] = []byte(s)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := []byte(r.Header.Get(headerPeerSecret)), 0
		for _, s := range secrets {
			ok |= subtle.ConstantTimeCompare(got, s) // every one compared: no timing of which
		}
		if ok != 1 {
			c.log.Error("peer request refused: wrong or missing peer secret (every replica's FENCEPROXY_PEER_SECRET list must share a secret)",
				"remote", r.RemoteAddr, "method", r.Method)
			w.Header().Set(headerPeerRefused, "secret")
			wire.WriteProblem(w, wire.Problem{Status: http.StatusForbidden, Reason: wire.ReasonForbidden, Title: "Forbidden",
				Detail: "the peer listener serves only other fenceproxy replicas (FENCEPROXY_PEER_SECRET)"})
			return
		}
		target := r.Header.Get(headerPeerTarget)
		r.Header.Del(headerPeerSecret)
		r.Header.Del(headerPeerTarget)
		r = r.WithContext(context.WithValue(r.Context(), fromPeerKey{}, true))
		switch target {
		case "proxy":
			proxyH.ServeHTTP(w, r)
		case "control":
			controlH.ServeHTTP(w, r)
		default:
			wire.WriteProblem(w, wire.Problem{Status: http.StatusBadRequest, Reason: wire.ReasonBadRequest, Title: "Bad peer request",
				Detail: "unknown " + headerPeerTarget})
		}
	})
}

// ready is /readyz's cluster part: the replica's etcd lease is confirmed
// (its validity has not ended), and no other live replica uses its REPLICA_ID.
func (c *cluster) ready() error {
	if c.owner == nil {
		return errors.New("cluster: not started")
	}
	st := c.owner.Stats()
	if st.DuplicateID {
		return fmt.Errorf("cluster: another live replica uses FENCEPROXY_REPLICA_ID %q; this one takes no shards", c.cfg.ReplicaID)
	}
	if !c.owner.Valid() {
		return fmt.Errorf("cluster: this replica's etcd lease is not confirmed (no keepalive answered within FENCEPROXY_SHARD_TTL %s less its margin): it admits no write", c.cfg.ShardTTL)
	}
	return nil
}

// Describe and Collect export the shard ownership's counters, read at each
// scrape.
func (c *cluster) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

var (
	descShardsOwned = prometheus.NewDesc("fenceproxy_shards_owned", "Shards this replica holds now (admitting, waiting out a lock-delay or handing over).", nil, nil)
	descAcquired    = prometheus.NewDesc("fenceproxy_shard_acquisitions_total", "Shards this replica acquired, by kind: planned (the last owner handed it over drained), unclean (its key went without a handover: the lock-delay applies), new (never owned).", []string{"kind"}, nil)
	descReleased    = prometheus.NewDesc("fenceproxy_shard_releases_total", "Shards this replica handed over, by kind: planned (drained, with the marker), undrained (without it: the next owner waits the lock-delay).", []string{"kind"}, nil)
	descLost        = prometheus.NewDesc("fenceproxy_shard_losses_total", "Shards this replica lost without a handover (its key or lease went).", nil, nil)
	descLockWaits   = prometheus.NewDesc("fenceproxy_shard_lock_delay_waits_total", "Acquisitions that had to wait out a lock-delay: unclean ones, and planned ones made while the last owner still waited out one.", nil, nil)
	descLockSeconds = prometheus.NewDesc("fenceproxy_shard_lock_delay_seconds_total", "Sum of those waits, in seconds.", nil, nil)
	descKAFailures  = prometheus.NewDesc("fenceproxy_shard_keepalive_failures_total", "etcd keepalive requests of the ownership lease that failed.", nil, nil)
	descLapses      = prometheus.NewDesc("fenceproxy_shard_validity_lapses_total", "Times this replica's ownership validity ended (no confirmed keepalive in time): it admitted nothing until the next one.", nil, nil)
	descMembers     = prometheus.NewDesc("fenceproxy_cluster_members", "Live replicas in this replica's view of etcd.", nil, nil)
)

func (c *cluster) Collect(ch chan<- prometheus.Metric) {
	if c.owner == nil {
		return
	}
	st := c.owner.Stats()
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	ch <- prometheus.MustNewConstMetric(descShardsOwned, gauge, float64(st.Owned))
	ch <- prometheus.MustNewConstMetric(descAcquired, counter, float64(st.AcquiredPlanned), "planned")
	ch <- prometheus.MustNewConstMetric(descAcquired, counter, float64(st.AcquiredUnclean), "unclean")
	ch <- prometheus.MustNewConstMetric(descAcquired, counter, float64(st.AcquiredNew), "new")
	ch <- prometheus.MustNewConstMetric(descReleased, counter, float64(st.ReleasedPlanned), "planned")
	ch <- prometheus.MustNewConstMetric(descReleased, counter, float64(st.ReleasedUndrained), "undrained")
	ch <- prometheus.MustNewConstMetric(descLost, counter, float64(st.Lost))
	ch <- prometheus.MustNewConstMetric(descLockWaits, counter, float64(st.LockDelayWaits))
	ch <- prometheus.MustNewConstMetric(descLockSeconds, counter, st.LockDelayWaitTotal.Seconds())
	ch <- prometheus.MustNewConstMetric(descKAFailures, counter, float64(st.KeepAliveFailures))
	ch <- prometheus.MustNewConstMetric(descLapses, counter, float64(st.ValidityLapses))
	ch <- prometheus.MustNewConstMetric(descMembers, gauge, float64(st.MembersSeen))
}

// etcdClientConfig is the etcd client configuration of cfg: endpoints, TLS,
// user and password.
func etcdClientConfig(cfg config.Config) (clientv3.Config, error) {
	tlsCfg, err := cfg.EtcdTLS()
	if err != nil {
		return clientv3.Config{}, fmt.Errorf("FENCEPROXY_ETCD_CA_FILE / _CERT_FILE: %w", err)
	}
	eps := make([]string, len(cfg.EtcdEndpoints))
	for i, e := range cfg.EtcdEndpoints {
		eps[i] = strings.TrimSpace(e)
	}
	// The client's own log (zap, JSON on stderr, as etcd's): warnings and
	// errors only; its info lines are per connection.
	zl, err := logutil.CreateDefaultZapLogger(zapcore.WarnLevel)
	if err != nil {
		return clientv3.Config{}, fmt.Errorf("etcd client log: %w", err)
	}
	return clientv3.Config{
		Logger:      zl,
		Endpoints:   eps,
		DialTimeout: 5 * time.Second,
		TLS:         tlsCfg,
		Username:    cfg.EtcdUsername,
		Password:    cfg.EtcdPassword,
	}, nil
}

// clusterLeases is pool.Leases in cluster mode. A pool decides its claims
// in the owner of the pool's name, but each shard's lease ("{pool}/{shard}")
// belongs to the barrier of its own name's owner: Acquire and Release run
// here when this replica may admit that name now, else on its owner, over
// the peer listener's control API; the rest reads the store, as anywhere.
type clusterLeases struct {
	c          *cluster
	local      *lease.Manager
	leaseToken string // FENCEPROXY_LEASE_TOKEN, for the owner's lease API
	hc         *http.Client
}

func newClusterLeases(c *cluster, local *lease.Manager, leaseToken string) *clusterLeases {
	return &clusterLeases{c: c, local: local, leaseToken: leaseToken,
		hc: &http.Client{Transport: c.peer.Transport, Timeout: c.cfg.DrainTimeout + 10*time.Second}}
}

func (l *clusterLeases) List(prefix, after string, limit int) ([]lease.Entry, error) {
	return l.local.List(prefix, after, limit)
}
func (l *clusterLeases) GraceEnds(le lease.Lease) time.Time { return l.local.GraceEnds(le) }
func (l *clusterLeases) Check(holder string, ttl time.Duration) error {
	return l.local.Check(holder, ttl)
}
func (l *clusterLeases) Now() time.Time { return l.local.Now() }

// Acquire is lease.Manager.Acquire on the name's owner.
func (l *clusterLeases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (lease.Lease, error) {
	// A new request of this replica's, even inside a call forwarded here.
	ctx = context.WithValue(ctx, fromPeerKey{}, nil)
	rt := l.c.enter(ctx, []string{name})
	if rt.local {
		defer l.c.leave(rt)
		return l.local.Acquire(ctx, name, holder, ttl)
	}
	return l.remote(ctx, rt, http.MethodPost, name, wire.LeaseRequest{Holder: holder, TTL: ttl.String()})
}

// Release is lease.Manager.Release on the name's owner.
func (l *clusterLeases) Release(name, holder string, token uint64) (lease.Lease, error) {
	ctx := context.Background()
	rt := l.c.enter(ctx, []string{name})
	if rt.local {
		defer l.c.leave(rt)
		return l.local.Release(name, holder, token)
	}
	t := wire.Token(token)
	return l.remote(ctx, rt, http.MethodDelete, name, wire.LeaseRequest{Holder: holder, Token: &t})
}

// remote sends a lease call to the owner's control API over the peer
// listener and maps its answer back: 409 lease_held is lease.ErrHeld,
// lease_lost lease.ErrLost; no owner, or one that refused, is
// control.ErrShardUnavailable.
func (l *clusterLeases) remote(ctx context.Context, rt placement, method, name string, body wire.LeaseRequest) (lease.Lease, error) {
	if rt.forward.Addr == "" {
		return lease.Lease{}, unavailable{fmt.Errorf("%w: %s", control.ErrShardUnavailable, rt.why), rt.wait}
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, method, "http://"+rt.forward.Addr+control.LeasePrefix+name, bytes.NewReader(b))
	if err != nil {
		return lease.Lease{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headerPeerSecret, l.c.cfg.PeerSecrets[0])
	req.Header.Set(headerPeerTarget, "control")
	if l.leaseToken != "" {
		req.Header.Set("Authorization", "Bearer "+l.leaseToken)
	}
	resp, err := l.hc.Do(req)
	if err != nil {
		return lease.Lease{}, fmt.Errorf("%w: the owner replica %s: %v", control.ErrShardUnavailable, rt.forward.ID, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		var p wire.Problem
		_ = json.Unmarshal(data, &p)
		switch {
		case p.Reason == wire.ReasonLeaseHeld:
			return lease.Lease{}, fmt.Errorf("%w (on replica %s)", lease.ErrHeld, rt.forward.ID)
		case p.Reason == wire.ReasonLeaseLost:
			return lease.Lease{}, fmt.Errorf("%w (on replica %s)", lease.ErrLost, rt.forward.ID)
		case resp.StatusCode == http.StatusServiceUnavailable || resp.Header.Get(headerPeerRefused) != "":
			return lease.Lease{}, fmt.Errorf("%w: the owner replica %s answered %d: %s", control.ErrShardUnavailable, rt.forward.ID, resp.StatusCode, p.Detail)
		}
		return lease.Lease{}, fmt.Errorf("the owner replica %s answered %s %s with %d: %s", rt.forward.ID, method, name, resp.StatusCode, p.Detail)
	}
	l.c.forwards.WithLabelValues("ok").Inc()
	l.c.log.Debug("pool lease call run on the owner replica", "method", method, "lease", name, "peer", rt.forward.ID)
	var wl wire.Lease
	if err := json.Unmarshal(data, &wl); err != nil {
		return lease.Lease{}, fmt.Errorf("the owner replica %s answered %s %s: %w", rt.forward.ID, method, name, err)
	}
	ttl, _ := time.ParseDuration(wl.TTL)
	return lease.Lease{Name: name, Holder: wl.Holder, Token: uint64(wl.Token), TTL: ttl, AcquiredAt: wl.AcquiredAt,
		RenewedAt: wl.RenewedAt, ExpiresAt: wl.ExpiresAt, Released: wl.State == string(lease.StateReleased)}, nil
}
