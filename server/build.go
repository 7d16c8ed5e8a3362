package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceproxy/fenceproxy/internal/buildinfo"
)

// buildInfoGauge is fenceproxy_build_info{version, revision, goversion}, always
// 1: which build runs, for dashboards and alerts that join on it.
func buildInfoGauge(b buildinfo.Info) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenceproxy_build_info",
		Help: "Always 1; the labels name the running build: the module version, the VCS revision (unknown when none was stamped) and the Go version.",
		ConstLabels: prometheus.Labels{
			"version":   b.Version,
			"revision":  b.RevisionOrUnknown(),
			"goversion": b.GoVersion,
		},
	}, func() float64 { return 1 })
}
