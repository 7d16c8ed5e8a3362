package cluster

import "github.com/prometheus/client_golang/prometheus"

// newMetrics makes the forwarding's and the store's metrics.
func (c *Cluster) newMetrics() {
	c.forwards = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fenceproxy_peer_forwards_total",
		Help: "Requests forwarded to the replica that owns their shard, by result: ok (an answer came back), unreachable (not sent: 503), refused (the owner refused this replica's PEER_SECRET: 503), failed (sent, no answer: 502).",
	}, []string{"result"})
	for _, r := range []string{"ok", "unreachable", "failed", "refused"} {
		c.forwards.WithLabelValues(r)
	}
	c.etcdRequests = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fenceproxy_etcd_request_seconds",
		Help:    "Duration of the store's requests to etcd (Gets and Txns: raises, group-committed, lease updates, upload records), failed ones included.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
}

// Collectors are cluster mode's metrics, to register once: the shard
// ownership's counters (read at each scrape), the forwards to owners by
// result, and the durations of the store's etcd requests.
func (c *Cluster) Collectors() []prometheus.Collector {
	return []prometheus.Collector{ownershipMetrics{c}, c.forwards, c.etcdRequests}
}

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

// ownershipMetrics exports the shard ownership's counters (shard.Stats),
// read at each scrape; nothing before Start.
type ownershipMetrics struct{ c *Cluster }

func (m ownershipMetrics) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(m, ch) }

func (m ownershipMetrics) Collect(ch chan<- prometheus.Metric) {
	if m.c.owner == nil {
		return
	}
	st := m.c.owner.Stats()
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
