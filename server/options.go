package server

import (
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/logutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"

	"github.com/fenceproxy/fenceproxy/cluster"
	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/lease"
)

// fenceOptionsFrom returns the barrier options that cfg sets, field for
// field; the rest (StartGrace, Clock, ObserveRaise) stay zero.
func fenceOptionsFrom(cfg config.Config) fence.Options {
	return fence.Options{
		DrainTimeout: cfg.DrainTimeout,
		AbandonGrace: cfg.AbandonGrace,
		MaxTokenJump: cfg.MaxTokenJump,
		PrefixBytes:  int64(cfg.PrefixFencesSize),
		// In cluster mode the keys below a prefix may have other owners,
		// unless shards follow the first SHARD_DEPTH segments of a key.
		NoPrefixFences: cfg.Store == "etcd" && cfg.ShardDepth == 0,
		PrefixSegments: shardDepth(cfg),
		// In S3 mode the resource P is also the object P/ (a directory
		// marker), which lies below the prefix fence P/; in plain mode a
		// WebDAV or file-system store opens P/ as P (fence.Resolver.Alias).
		PrefixOwnName: true,
		// Outside S3 mode the backend may be a WebDAV or REST server, which
		// applies a DELETE, MOVE or COPY of a collection to what lies below.
		Collections: cfg.S3 == "off",
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
		Retention:   cfg.LeaseRetention,
	}
}

// clusterOptionsFrom returns the cluster mode options that cfg sets (the
// ETCD_*, SHARD*, PEER_* and REPLICA_ID variables, and the timeouts the
// forwarding follows); Logger stays nil. Errors: the etcd client's TLS
// files or log.
func clusterOptionsFrom(cfg config.Config) (cluster.Options, error) {
	etcd, err := etcdClientConfig(cfg)
	if err != nil {
		return cluster.Options{}, err
	}
	return cluster.Options{
		Etcd:            etcd,
		Prefix:          cfg.EtcdPrefix,
		CacheBytes:      int64(cfg.CacheSize),
		MaxTxnOps:       cfg.EtcdMaxTxnOps,
		Shards:          cfg.Shards,
		ShardDepth:      cfg.ShardDepth,
		ReplicaID:       cfg.ReplicaID,
		PeerListen:      cfg.PeerListen,
		PeerAdvertise:   cfg.PeerAdvertise,
		PeerSecrets:     cfg.PeerSecrets,
		ShardTTL:        cfg.ShardTTL,
		LockDelay:       cfg.LockDelay,
		HandoverTimeout: cfg.ShutdownTimeout,
		DrainTimeout:    cfg.DrainTimeout,
		DialTimeout:     cfg.UpstreamDialTimeout,
		ResponseTimeout: cfg.UpstreamResponseTimeout,
		S3:              cfg.S3 != "off",
	}, nil
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

// shardDepth is SHARD_DEPTH where it applies: in cluster mode.
func shardDepth(cfg config.Config) int {
	if cfg.Store != "etcd" {
		return 0
	}
	return cfg.ShardDepth
}
