// Package cluster is one replica's part in cluster mode
// (FENCEPROXY_STORE=etcd): the store in etcd, the shard ownership over
// package shard, the count of requests per shard that a handover drains,
// the routing of a write or a named control call to its shard's owner (here,
// forwarded over the peer listener, or 503 shard_unavailable), the peer
// listener's handler, the pool leases that run on their name's owner, and
// the ownership's metrics. See docs/CLUSTER.md.
//
// New binds the peer listener and opens the store, Start joins the cluster
// and takes this replica's share of the shards, Stop hands them over.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/shard"
	"github.com/fenceproxy/fenceproxy/store/etcd"
)

// Options are what cluster mode needs, field for field from the
// configuration.
type Options struct {
	// Etcd is the etcd client configuration (endpoints, TLS, user): the
	// store and the ownership each open a client of it.
	Etcd clientv3.Config
	// Prefix is the etcd key prefix of every key (FENCEPROXY_ETCD_PREFIX).
	Prefix string
	// CacheBytes bounds the store's cache of maxima, in bytes.
	CacheBytes int64
	// MaxTxnOps is etcd's --max-txn-ops, the most operations in one Txn.
	MaxTxnOps int
	// Shards is the shard count N (FENCEPROXY_SHARDS).
	Shards int
	// ShardDepth is how many leading segments of a resource key decide its
	// shard (FENCEPROXY_SHARD_DEPTH; 0: the whole key). Prefix fences need
	// it: one with at least as many segments has its keys' shard.
	ShardDepth int
	// ReplicaID names this replica among the live ones.
	ReplicaID string
	// PeerListen is the peer listener's address (host:port); PeerAdvertise
	// the address other replicas reach it at.
	PeerListen, PeerAdvertise string
	// PeerSecrets are FENCEPROXY_PEER_SECRET's secrets: the first is sent,
	// any is accepted.
	PeerSecrets []string
	// ShardTTL is the ownership lease's TTL; LockDelay the wait after an
	// unclean loss (0: none).
	ShardTTL, LockDelay time.Duration
	// HandoverTimeout bounds a planned handover's drain of a shard.
	HandoverTimeout time.Duration
	// DrainTimeout is the longest wait of a write at the barrier (the
	// owner's): a forwarded client's Expect: 100-continue waits as long.
	DrainTimeout time.Duration
	// DialTimeout bounds a connection to an owner; ResponseTimeout is the
	// backend's longest answer, added to DrainTimeout for an owner's.
	DialTimeout, ResponseTimeout time.Duration
	// S3 is S3 mode: the proxy listener's refusals are S3 <Error> bodies.
	S3 bool
	// Logger receives the log lines. nil: slog.Default().
	Logger *slog.Logger
}

// Cluster is this replica's part in cluster mode. Build it with New, hand
// its store to the barrier, then Start it.
type Cluster struct {
	opts    Options
	log     *slog.Logger
	store   *etcd.Store
	peerLn  net.Listener
	barrier *fence.Barrier   // set by Start
	owner   *shard.Owner     // set by Start
	cli     *clientv3.Client // the ownership's own etcd client

	// inflight counts, per shard, the writes and named control calls that
	// entered before their ownership check and have not ended: a handover
	// waits for it, so a request that passed the check is never missed.
	inflight []atomic.Int64
	// forgotten holds, per shard, the ownership epoch for which the
	// store's cached maxima of the shard were dropped and the barrier's
	// prefix fences of the shard reloaded: what another owner raised
	// meanwhile is read from etcd.
	forgotten []atomic.Int64
	forgetMu  sync.Mutex

	peer *httputil.ReverseProxy

	// placed latches once Ready saw every shard with an owner and this
	// replica's own shards admitting: before, a fresh cluster would answer
	// 503 shard_unavailable to the writes /readyz let in. After, a shard
	// between owners does not take the replica out (it forwards the rest).
	placed atomic.Bool

	forwards     *prometheus.CounterVec // by result
	etcdRequests prometheus.Histogram
	stopOnce     sync.Once
}

// New binds the peer listener and opens the store in etcd, retrying for up
// to 30 s while etcd cannot be reached (stop ends the retries sooner). The
// ownership waits for Start. Errors: the peer listener cannot be bound
// (naming FENCEPROXY_PEER_LISTEN), etcd unreachable (naming
// FENCEPROXY_ETCD_ENDPOINTS, with stop's cause when it ended). Nothing
// stays bound or open after an error.
func New(stop context.Context, opts Options) (_ *Cluster, err error) {
	c := newCluster(opts)
	if c.peerLn, err = net.Listen("tcp", opts.PeerListen); err != nil {
		return nil, fmt.Errorf("FENCEPROXY_PEER_LISTEN: %w", err)
	}
	err = retryEtcd(stop, c.log, "open the store in etcd", func() (err error) {
		c.store, err = etcd.Open(opts.Etcd, etcd.Options{Prefix: opts.Prefix, CacheBytes: opts.CacheBytes,
			MaxTxnOps: opts.MaxTxnOps, ObserveRequest: func(d time.Duration) { c.etcdRequests.Observe(d.Seconds()) },
			Guard: c.guard})
		return err
	}, nil)
	if err != nil {
		c.peerLn.Close()
		if stop.Err() != nil {
			return nil, fmt.Errorf("FENCEPROXY_ETCD_ENDPOINTS: %w", err)
		}
		return nil, fmt.Errorf("FENCEPROXY_ETCD_ENDPOINTS: %w (for %s; is etcd running and reachable there?)", err, etcdStartBudget)
	}
	return c, nil
}

// newCluster opens nothing: it prepares the counts, the metrics and the
// forwarding.
func newCluster(opts Options) *Cluster {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Cluster{
		opts: opts, log: opts.Logger,
		inflight:  make([]atomic.Int64, opts.Shards),
		forgotten: make([]atomic.Int64, opts.Shards),
	}
	c.newMetrics()
	c.newForwarding()
	return c
}

// Store is the store in etcd, for the barrier, leases, pools and the
// control API. Its caller closes it, after Stop.
func (c *Cluster) Store() *etcd.Store { return c.store }

// Listener is the peer listener, bound by New. Its caller serves it with
// PeerHandler and closes it.
func (c *Cluster) Listener() net.Listener { return c.peerLn }

// Start connects the shard ownership to etcd (a client of its own, so that
// keepalives never queue behind the store's transactions) and starts
// acquiring this replica's share; a handover drains barrier's writes of the
// shard. It retries like New. Errors: etcd unreachable, the shard count
// stored differs (naming both and FENCEPROXY_SHARDS), the options.
func (c *Cluster) Start(stop context.Context, barrier *fence.Barrier) error {
	c.barrier = barrier
	cli, err := clientv3.New(c.opts.Etcd)
	if err != nil {
		return fmt.Errorf("FENCEPROXY_ETCD_ENDPOINTS: %w", err)
	}
	var o *shard.Owner
	err = retryEtcd(stop, c.log, "join the cluster", func() (err error) {
		o, err = shard.Start(context.Background(), cli, shard.Options{
			Prefix:       c.opts.Prefix,
			Shards:       c.opts.Shards,
			Depth:        c.opts.ShardDepth,
			ID:           c.opts.ReplicaID,
			Advertise:    c.opts.PeerAdvertise,
			TTL:          c.opts.ShardTTL,
			LockDelay:    lockDelay(c.opts.LockDelay),
			DrainTimeout: c.opts.HandoverTimeout,
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
			return fmt.Errorf("FENCEPROXY_SHARDS, FENCEPROXY_SHARD_DEPTH: %w", err)
		}
		return fmt.Errorf("cluster: %w", err)
	}
	c.owner, c.cli = o, cli
	c.checkEtcdVersions(stop)
	return nil
}

// minEtcdMinor is the oldest etcd minor release with the lease fixes the
// ownership relies on (3.5; docs/CLUSTER.md).
const minEtcdMinor = 5

// checkEtcdVersions warns about each endpoint whose etcd is older than
// 3.5: it runs, but keepalives and lease expiry there have known bugs.
// An endpoint that does not answer within a second is passed over.
func (c *Cluster) checkEtcdVersions(stop context.Context) {
	for _, ep := range c.cli.Endpoints() {
		ctx, cancel := context.WithTimeout(stop, time.Second)
		st, err := c.cli.Status(ctx, ep)
		cancel()
		if err != nil {
			c.log.Debug("etcd: could not read the version", "endpoint", ep, "error", err.Error())
			continue
		}
		if old, ok := etcdBefore(st.Version, 3, minEtcdMinor); ok && old {
			c.log.Warn("etcd: this member runs a release older than 3.5, whose lease keepalive and expiry have known bugs the shard ownership relies on being fixed; upgrade it (docs/CLUSTER.md, Sizing etcd)",
				"endpoint", ep, "version", st.Version)
		}
	}
}

// etcdBefore reports whether version ("3.4.23") is below major.minor; ok
// is false when version does not parse.
func etcdBefore(version string, major, minor int) (before, ok bool) {
	var ma, mi int
	if _, err := fmt.Sscanf(version, "%d.%d", &ma, &mi); err != nil {
		return false, false
	}
	return ma < major || (ma == major && mi < minor), true
}

// Stop hands this replica's shards over and leaves the cluster, once:
// drained with the "released" marker (the next owners admit at once) within
// ctx, or, with now or after ctx, dropped with the lease (the next owners
// wait the lock-delay). It closes the ownership's etcd client. Before
// Start it does nothing.
func (c *Cluster) Stop(ctx context.Context, now bool) {
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

// Ready is /readyz's cluster part: the replica's etcd lease is confirmed
// (its validity has not ended), no other live replica uses its REPLICA_ID,
// and, until it first holds, every shard has an owner in this replica's
// view and those it holds admit (not in a lock-delay): a write it lets in
// is admitted or forwarded, not answered 503 shard_unavailable.
func (c *Cluster) Ready() error {
	if c.owner == nil {
		return errors.New("cluster: not started")
	}
	st := c.owner.Stats()
	if st.DuplicateID {
		return fmt.Errorf("cluster: another live replica uses FENCEPROXY_REPLICA_ID %q; this one takes no shards", c.opts.ReplicaID)
	}
	if !c.owner.Valid() {
		return fmt.Errorf("cluster: this replica's etcd lease is not confirmed (no keepalive answered within FENCEPROXY_SHARD_TTL %s less its margin): it admits no write", c.opts.ShardTTL)
	}
	if c.placed.Load() {
		return nil
	}
	unowned, waiting := 0, 0
	for n := range c.opts.Shards {
		if _, ok := c.owner.OwnerOf(n); !ok {
			unowned++
		} else if _, held := c.owner.State(n); held {
			if _, ok := c.owner.MayAdmit(n); !ok {
				waiting++
			}
		}
	}
	if unowned > 0 || waiting > 0 {
		return fmt.Errorf("cluster: joining: %d of %d shards have no owner yet; of the shards this replica took, %d are in their lock-delay (FENCEPROXY_LOCK_DELAY %s, waited only after an unclean handover)",
			unowned, c.opts.Shards, waiting, c.opts.LockDelay)
	}
	if c.placed.CompareAndSwap(false, true) {
		c.log.Info("cluster: every shard has an owner; ready", "shards", c.opts.Shards, "owned_here", len(c.owner.Owned()))
	}
	return nil
}

// guard is etcd.Options.Guard: the store commits a write of resource
// only while the owner key of its shard is the one this replica created
// (the grant's epoch), so a replica that stalled past its ownership cannot
// commit a raise, lease or reset that the next owner would not see.
func (c *Cluster) guard(resource string) (string, int64, error) {
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
