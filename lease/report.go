package lease

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// States counts the stored leases by their state now.
func (m *Manager) States() (map[State]int, error) {
	now := m.opts.Now()
	counts := map[State]int{}
	err := m.store.EachLease(func(name string, rec []byte) error {
		l, err := decode(name, rec)
		if err != nil {
			return err
		}
		counts[m.StateAt(*l, now)]++
		return nil
	})
	return counts, err
}

// Watch checks every interval, until ctx is done, for holders that have not
// renewed within the revoke threshold, and logs each one once per renew
// ("lease holder is suspect"), before its lease expires.
func (m *Manager) Watch(ctx context.Context, every time.Duration) {
	reported := map[string]time.Time{} // lease name -> RenewedAt already reported
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := m.opts.Now()
		seen := map[string]bool{}
		err := m.store.EachLease(func(name string, rec []byte) error {
			if m.opts.Watched != nil && !m.opts.Watched(name) {
				return nil
			}
			l, err := decode(name, rec)
			if err != nil || m.StateAt(*l, now) != StateSuspect {
				return err
			}
			seen[name] = true
			if !reported[name].Equal(l.RenewedAt) {
				reported[name] = l.RenewedAt
				m.opts.Logger.Warn("lease holder is suspect: no renew within the revoke threshold", "lease", name,
					"holder", l.Holder, "token", l.Token, "renewed_at", l.RenewedAt, "expires_at", l.ExpiresAt)
			}
			return nil
		})
		if err != nil {
			m.opts.Logger.Error("lease watch failed", "error", err.Error())
		}
		for name := range reported {
			if !seen[name] {
				delete(reported, name)
			}
		}
	}
}

var leasesDesc = prometheus.NewDesc("fenceproxy_leases",
	"Leases by state (held, suspect: no renew within FENCEPROXY_LEASE_REVOKE_AFTER, grace, expired, released), counted at scrape time.",
	[]string{"state"}, nil)

var removedDesc = prometheus.NewDesc("fenceproxy_lease_records_removed_total",
	"Records of leases expired or released for longer than their grace, TTL and FENCEPROXY_LEASE_RETENTION that the sweep removed (their fences stay).",
	nil, nil)

// Collector returns a Prometheus collector of fenceproxy_leases{state} and
// fenceproxy_lease_records_removed_total.
func (m *Manager) Collector() prometheus.Collector { return leaseCollector{m} }

type leaseCollector struct{ m *Manager }

func (c leaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- leasesDesc; ch <- removedDesc }

func (c leaseCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(removedDesc, prometheus.CounterValue, float64(c.m.Removed()))
	counts, err := c.m.States()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(leasesDesc, err)
		return
	}
	for _, st := range []State{StateHeld, StateSuspect, StateGrace, StateExpired, StateReleased} {
		ch <- prometheus.MustNewConstMetric(leasesDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
}
