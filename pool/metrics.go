package pool

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the pool metrics, all with a pool label (pools are few: one
// series per pool and state):
//
//	fenceproxy_pool_shards{pool,state}         gauge, shards by state (free, held, suspect, grace, done), at scrape
//	fenceproxy_pool_holders{pool}              gauge, live holders, at scrape
//	fenceproxy_pool_claims_total{pool,result}  counter, claims: granted, sticky (granted the shard it held last), none
//	fenceproxy_pool_hand_back_asks_total{pool} counter, shards asked back in renew answers (one per shard per answer)
//	fenceproxy_pool_done_total{pool}           counter, shards marked done
type Metrics struct {
	claims   *prometheus.CounterVec
	handBack *prometheus.CounterVec
	done     *prometheus.CounterVec
	p        *Pools
}

var (
	shardsDesc = prometheus.NewDesc("fenceproxy_pool_shards",
		"Pool shards by state (free, held, suspect, grace, done), counted at scrape time.", []string{"pool", "state"}, nil)
	holdersDesc = prometheus.NewDesc("fenceproxy_pool_holders",
		"Live holders of a pool (holding a shard, or waiting for one), counted at scrape time.", []string{"pool"}, nil)
)

// NewMetrics returns the pool metrics; Events feeds its counters, and
// Collect reads the pools of p (set it with Attach once built).
func NewMetrics() *Metrics {
	return &Metrics{
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fenceproxy_pool_claims_total",
			Help: "Pool claims by result: granted, sticky (the shard the holder held last), none (no shard for the holder now)."}, []string{"pool", "result"}),
		handBack: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fenceproxy_pool_hand_back_asks_total",
			Help: "Shards a renew answer asked a holder above its share to hand back."}, []string{"pool"}),
		done: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fenceproxy_pool_done_total",
			Help: "Pool shards marked done."}, []string{"pool"}),
	}
}

// Events returns the hooks that count claims, hand-back asks and dones.
func (m *Metrics) Events() Events {
	return Events{
		Claimed: func(pool string, sticky bool) {
			r := "granted"
			if sticky {
				r = "sticky"
			}
			m.claims.WithLabelValues(pool, r).Inc()
		},
		NoShard:  func(pool string) { m.claims.WithLabelValues(pool, "none").Inc() },
		HandBack: func(pool string, n int) { m.handBack.WithLabelValues(pool).Add(float64(n)) },
		Done:     func(pool string) { m.done.WithLabelValues(pool).Inc() },
	}
}

// Attach sets the pools whose state Collect reports.
func (m *Metrics) Attach(p *Pools) { m.p = p }

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- shardsDesc
	ch <- holdersDesc
	m.claims.Describe(ch)
	m.handBack.Describe(ch)
	m.done.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.claims.Collect(ch)
	m.handBack.Collect(ch)
	m.done.Collect(ch)
	if m.p == nil {
		return
	}
	err := m.p.Each(func(st Status) error {
		counts := map[string]int{}
		for _, s := range st.Shards {
			counts[s.State]++
		}
		for _, state := range []string{StateFree, StateHeld, StateSuspect, StateGrace, StateDone} {
			ch <- prometheus.MustNewConstMetric(shardsDesc, prometheus.GaugeValue, float64(counts[state]), st.Pool, state)
		}
		ch <- prometheus.MustNewConstMetric(holdersDesc, prometheus.GaugeValue, float64(len(st.Holders)), st.Pool)
		return nil
	})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(shardsDesc, err)
	}
}
