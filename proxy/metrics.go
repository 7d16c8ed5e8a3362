package proxy

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceproxy/fenceproxy/wire"
)

// Metrics are the proxy's Prometheus metrics. None has a per-resource label:
// resources are unbounded.
type Metrics struct {
	// fenceproxy_requests_total{decision}: every request by what the proxy
	// did: forwarded (a fenced write admitted), unfenced (passed unchecked),
	// upload_abort (S3: a holder that lost its resource aborted its own
	// multipart upload, forwarded outside the barrier), or the refusal reason (stale, missing, malformed, bad_resource,
	// hop_by_hop, unsupported, drain_timeout, store_error, client_gone,
	// signature, jump, overloaded).
	// In observe mode a would-be refusal counts as observe_<reason>.
	Requests *prometheus.CounterVec
	// fenceproxy_upstream_errors_total{kind}: failed upstream exchanges by
	// kind: timeout (504), client_gone (499), other (502), upload_cut (a
	// larger token cut a smaller token's upload off, 409), upload_timeout
	// (the client paused its upload past the idle timeout, 408),
	// upload_too_slow (the body came slower than FENCEPROXY_UPLOAD_MIN_RATE,
	// 408), bad_body
	// (the client broke its request body's framing or ended it early, 400),
	// ownership_ended (cluster mode: the shard's ownership ended during the
	// upload, 503), key_revoked (S3 gateway mode: the upload's key was
	// removed, 403).
	UpstreamErrors *prometheus.CounterVec
	// fenceproxy_upstream_duration_seconds{fenced}: time from forwarding to
	// the end of the upstream exchange.
	UpstreamDuration *prometheus.HistogramVec
	// fenceproxy_raise_duration_seconds: time to make a raise durable,
	// whatever made it (ObserveRaise, as fence.Options.ObserveRaise).
	RaiseDuration prometheus.Histogram
	// fenceproxy_inflight_requests: requests being forwarded now.
	InFlight prometheus.Gauge
	// fenceproxy_s3_upload_records_total{event}: S3 multipart upload
	// records recorded (a CreateMultipartUpload's token), removed (the
	// upload completed or was aborted) and failed (a record that could not
	// be written or removed; see the log).
	UploadRecords *prometheus.CounterVec
	// fenceproxy_uploads_in_flight: requests with a body in the proxy now
	// (what FENCEPROXY_MAX_UPLOADS bounds).
	UploadsInFlight prometheus.GaugeFunc
	// fenceproxy_overload_total{limit}: uploads refused with 503 overloaded
	// (limit="uploads", FENCEPROXY_MAX_UPLOADS), and connections that found
	// the proxy listener at FENCEPROXY_MAX_CONNECTIONS and waited in the
	// listen backlog (limit="connections", counted by package server).
	Overload *prometheus.CounterVec
	// fenceproxy_http_requests_total{method,code}: every request the proxy
	// answered (or aborted), by method (one of Methods, else "other") and
	// the class of the status sent ("2xx" to "5xx", "other"; an aborted
	// exchange with no status is 499, "4xx").
	HTTPRequests *prometheus.CounterVec
	// fenceproxy_http_request_duration_seconds{method,code}: time from the
	// request's arrival to the end of its handling (the barrier's release
	// included), by the same labels; a series appears with its first request.
	HTTPDuration *prometheus.HistogramVec

	uploads atomic.Pointer[atomic.Int64] // the proxy's count, once New ran
	// Children of the known label values, looked up once: WithLabelValues
	// hashes and locks on every call, which showed in the per-request profile.
	decisions map[string]prometheus.Counter
	durations [2]prometheus.Observer // fenced=false, fenced=true
	// Per method and status class: counters created up front (so rates
	// start at 0), histograms on first use (75 of them would mostly be
	// empty buckets on every scrape).
	byCode    [len(Methods)][len(codeClasses)]prometheus.Counter
	durByCode [len(Methods)][len(codeClasses)]atomic.Pointer[observer]
}

// observer boxes a histogram child for an atomic.Pointer.
type observer struct{ prometheus.Observer }

// Methods are the method label values of fenceproxy_http_requests_total and
// fenceproxy_http_request_duration_seconds: HTTP's, S3's and WebDAV's; any
// other method (methods are case-sensitive) counts as "other", so that a
// client cannot add series.
var Methods = [...]string{"GET", "HEAD", "PUT", "POST", "DELETE", "PATCH", "OPTIONS",
	"PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "other"}

// codeClasses are the code label values: a status's class, "other" for
// one outside 200-599 (a backend may answer 600-999).
var codeClasses = [...]string{"2xx", "3xx", "4xx", "5xx", "other"}

// methodIndex is method's index in Methods, the last ("other") when it is
// none of the others. A switch: no hashing, no allocation.
func methodIndex(method string) int {
	switch method {
	case "GET":
		return 0
	case "HEAD":
		return 1
	case "PUT":
		return 2
	case "POST":
		return 3
	case "DELETE":
		return 4
	case "PATCH":
		return 5
	case "OPTIONS":
		return 6
	case "PROPFIND":
		return 7
	case "PROPPATCH":
		return 8
	case "MKCOL":
		return 9
	case "COPY":
		return 10
	case "MOVE":
		return 11
	case "LOCK":
		return 12
	case "UNLOCK":
		return 13
	}
	return len(Methods) - 1
}

// codeIndex is status's index in codeClasses.
func codeIndex(status int) int {
	if status < 200 || status > 599 {
		return len(codeClasses) - 1
	}
	return status/100 - 2
}

// NewMetrics creates the proxy's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_requests_total",
			Help: "Requests by decision: forwarded, unfenced, upload_abort, or the refusal reason (observe_<reason> in observe mode).",
		}, []string{"decision"}),
		UpstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_upstream_errors_total",
			Help: "Failed upstream exchanges by kind: timeout (504), client_gone (499), other (502), upload_cut (409), upload_timeout (408), upload_too_slow (408), bad_body (400), ownership_ended (503), key_revoked (403).",
		}, []string{"kind"}),
		UpstreamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fenceproxy_upstream_duration_seconds",
			Help:    "Time from forwarding a request to the end of its upstream exchange, by fenced=true|false.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14), // 0.5 ms .. ~75 s
		}, []string{"fenced"}),
		RaiseDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fenceproxy_raise_duration_seconds",
			Help:    "Time to make a raised maximum durable (fsync included).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12), // 0.1 ms .. ~6 s
		}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenceproxy_inflight_requests",
			Help: "Requests being forwarded to the backend now.",
		}),
	}
	m.UploadRecords = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fenceproxy_s3_upload_records_total",
		Help: "S3 multipart upload records by event: recorded, removed, failed (see the log).",
	}, []string{"event"})
	for _, e := range []string{"recorded", "removed", "failed"} {
		m.UploadRecords.WithLabelValues(e)
	}
	m.UploadsInFlight = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fenceproxy_uploads_in_flight",
		Help: "Requests with a body in the proxy now (bounded by FENCEPROXY_MAX_UPLOADS).",
	}, func() float64 {
		if n := m.uploads.Load(); n != nil {
			return float64(n.Load())
		}
		return 0
	})
	m.Overload = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fenceproxy_overload_total",
		Help: "Uploads refused with 503 overloaded (limit=uploads, FENCEPROXY_MAX_UPLOADS) and connections that waited in the listen backlog (limit=connections, FENCEPROXY_MAX_CONNECTIONS).",
	}, []string{"limit"})
	m.Overload.WithLabelValues("uploads")
	m.Overload.WithLabelValues("connections")
	m.HTTPRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fenceproxy_http_requests_total",
		Help: "Requests on the proxy listener by method (other: a method not listed) and class of the status sent (2xx..5xx, other); an aborted exchange with no status counts as 4xx (499).",
	}, []string{"method", "code"})
	m.HTTPDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fenceproxy_http_request_duration_seconds",
		Help:    "Time from a request's arrival on the proxy listener to the end of its handling, by method and class of the status sent.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 14), // as fenceproxy_upstream_duration_seconds
	}, []string{"method", "code"})
	for i, method := range Methods {
		for j, code := range codeClasses {
			m.byCode[i][j] = m.HTTPRequests.WithLabelValues(method, code)
		}
	}
	reg.MustRegister(m.Requests, m.UpstreamErrors, m.UpstreamDuration, m.RaiseDuration, m.InFlight, m.UploadRecords,
		m.UploadsInFlight, m.Overload, m.HTTPRequests, m.HTTPDuration)
	// Known series start at 0, so rates and dashboards work before the first event.
	for _, d := range []string{"forwarded", "unfenced", "upload_abort", wire.ReasonStale, wire.ReasonMissing, wire.ReasonMalformed, wire.ReasonBadResource, wire.ReasonAmbiguous,
		wire.ReasonHopByHop, wire.ReasonUnsupported, wire.ReasonDrainTimeout, wire.ReasonStoreError, wire.ReasonClientGone,
		wire.ReasonSignature, wire.ReasonJump, wire.ReasonPrefixLimit, wire.ReasonOverloaded} {
		if m.decisions == nil {
			m.decisions = make(map[string]prometheus.Counter)
		}
		m.decisions[d] = m.Requests.WithLabelValues(d)
	}
	m.durations = [2]prometheus.Observer{m.UpstreamDuration.WithLabelValues("false"), m.UpstreamDuration.WithLabelValues("true")}
	for _, k := range []string{"timeout", "client_gone", "other", "upload_cut", "upload_timeout", "upload_too_slow", "bad_body", "ownership_ended", "key_revoked"} {
		m.UpstreamErrors.WithLabelValues(k)
	}
	return m
}

func (m *Metrics) decision(d string) {
	if m == nil {
		return
	}
	if c, ok := m.decisions[d]; ok {
		c.Inc()
		return
	}
	m.Requests.WithLabelValues(d).Inc() // observe_<reason>
}

// answered counts a request that ended with status after d, in
// fenceproxy_http_requests_total and fenceproxy_http_request_duration_seconds.
func (m *Metrics) answered(method string, status int, d time.Duration) {
	if m == nil {
		return
	}
	i, j := methodIndex(method), codeIndex(status)
	m.byCode[i][j].Inc()
	o := m.durByCode[i][j].Load()
	if o == nil {
		o = &observer{m.HTTPDuration.WithLabelValues(Methods[i], codeClasses[j])}
		m.durByCode[i][j].Store(o) // a racing first request stores the same child
	}
	o.Observe(d.Seconds())
}

// countUploads makes fenceproxy_uploads_in_flight read n.
func (m *Metrics) countUploads(n *atomic.Int64) {
	if m != nil {
		m.uploads.Store(n)
	}
}

// Overloaded counts one refusal or wait at limit ("uploads",
// "connections") in fenceproxy_overload_total. Safe on a nil *Metrics.
func (m *Metrics) Overloaded(limit string) {
	if m != nil {
		m.Overload.WithLabelValues(limit).Inc()
	}
}

func (m *Metrics) multipartRecord(event string) {
	if m != nil {
		m.UploadRecords.WithLabelValues(event).Inc()
	}
}

func (m *Metrics) upstreamError(kind string) {
	if m != nil {
		m.UpstreamErrors.WithLabelValues(kind).Inc()
	}
}

// forwarding counts a request in flight and returns the func that ends it.
func (m *Metrics) forwarding(fenced bool) func() {
	if m == nil {
		return func() {}
	}
	start := time.Now()
	m.InFlight.Inc()
	obs := m.durations[0]
	if fenced {
		obs = m.durations[1]
	}
	return func() {
		m.InFlight.Dec()
		obs.Observe(time.Since(start).Seconds())
	}
}

// ObserveRaise records how long a durable raise took, in
// fenceproxy_raise_duration_seconds; fence.Options.ObserveRaise takes it.
// Safe on a nil *Metrics.
func (m *Metrics) ObserveRaise(d time.Duration) {
	if m != nil {
		m.RaiseDuration.Observe(d.Seconds())
	}
}
