package proxy

import (
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/wire"
)

// decision is what the proxy did with a request, as the access log names it.
type decision uint8

const (
	decidedNone        decision = iota // the handler ended before deciding
	decidedAdmitted                    // a fenced write admitted through the barrier and forwarded
	decidedUnfenced                    // forwarded unchecked (a read, or no token with REQUIRE_TOKEN=false)
	decidedRefused                     // refused by the proxy; nothing forwarded
	decidedToOwner                     // cluster mode: sent whole to the replica that owns its shard
	decidedUploadAbort                 // S3: the creator's abort of its multipart upload, outside the barrier
	decidedObserve                     // observe mode: checked without the barrier, forwarded
)

var decisionNames = [...]string{"", "admitted", "unfenced", "refused", "to_owner", "upload_abort", "observe"}

// Bounds of what a client controls in an access log line.
const (
	logPathMax   = 1024 // an S3 key is at most 1024 bytes
	logHostMax   = 256
	logMethodMax = 32
	logResources = 8 // names listed of a write with more (a DeleteObjects has up to 1,000)
)

// answered counts the request in the metrics of method and status class,
// with Settings.AccessLog logs it, and with Options.Tracer ends its span,
// the line and the span with the same fields (outcome). An exchange the
// handler aborted (http.ErrAbortHandler: a client gone, a backend that
// broke off its answer) before any status is counted as 499, as the proxy
// logs it.
func (p *Proxy) answered(ex *exchange, start time.Time) {
	d := time.Since(start)
	status := ex.rw.status
	if status == 0 {
		status = http.StatusOK // net/http's answer to a handler that wrote nothing
		if !ex.done {
			status = 499
		}
	}
	logged := p.opts.AccessLog && p.log.Enabled(ex.client, slog.LevelInfo)
	if logged || ex.span != nil {
		o := ex.outcome(status)
		// The line and the span before the count: a test that waits for
		// the count sees the line, and the span in the exporter's queue.
		if logged {
			p.accessLog(ex, o, d)
		}
		if ex.span != nil {
			p.endSpan(ex, o)
		}
	}
	p.opts.Metrics.answered(ex.r.Method, status, d)
}

// outcome is what an exchange came to, as its access line and its span
// tell it.
type outcome struct {
	status   int    // the status sent; 499 when the exchange was aborted before one
	upstream int    // the backend's status when it answered, 0 otherwise
	reason   string // the answer's Fencing-Refused, or observe mode's reason; "" when none
}

// outcome is the exchange's outcome, status the status sent.
func (ex *exchange) outcome(status int) outcome {
	o := outcome{status: status, reason: ex.reason}
	if o.reason == "" {
		o.reason = ex.rw.Header().Get(wire.HeaderRefused)
	}
	if ex.forwarded && !ex.rw.failed && ex.rw.status != 0 {
		o.upstream = ex.rw.status
	}
	return o
}

// accessLog writes the request's access log line: one record at info,
// message "access", with log=access and these attributes (those in
// brackets only when they apply):
//
//	method, host, path   as received: the target's path without its query (a
//	                     query may carry credentials), bounded to 1024 bytes
//	                     ([path_bytes]: its length when cut)
//	[s3_op]              S3 mode: the operation as the proxy read it
//	[resource]           a fenced write's first resource; [resources] and
//	                     [resource_count] when it has more (at most 8 listed)
//	[prefix]             X-Fencing-Prefix, the prefix fence the token is for
//	[token]              the fencing token, when valid
//	decision             admitted, unfenced, refused, to_owner, upload_abort
//	                     or observe ("" when the handler ended before one)
//	[reason]             the answer's Fencing-Refused (also for an admitted
//	                     upload cut later), or in observe mode what enforce
//	                     mode would have refused for
//	status               the status sent; 499 when the exchange was aborted
//	                     before one
//	[upstream_status]    the backend's status, when it answered
//	bytes_in, bytes_out  request body bytes forwarded (read from the client
//	                     for the backend or, to_owner, the owner replica; in
//	                     S3 gateway mode the payload of its signed chunks; 0
//	                     for a refusal), response body bytes written
//	duration_ms          arrival to the end of the handling, the barrier's
//	                     release included, in milliseconds
//	remote               the client's address (the TCP peer)
//	[request_id]         the answer's X-Amz-Request-Id (S3: the store's, or
//	                     the proxy's own on its refusals)
//	[key_id]             S3 gateway mode: the verified access key id
//	[aborted]            true: the handler aborted the exchange (no answer,
//	                     or one cut short)
//	[trace_id]           with tracing on, the request's trace (the client's
//	                     own when it sent a traceparent)
func (p *Proxy) accessLog(ex *exchange, o outcome, d time.Duration) {
	r := ex.r
	var buf [24]slog.Attr // one allocation of the record's overflow at most
	a := append(buf[:0], slog.String("log", "access"), slog.String("method", clip(r.Method, logMethodMax)),
		slog.String("host", clip(r.Host, logHostMax)))
	path, _, _ := strings.Cut(r.RequestURI, "?")
	a = append(a, slog.String("path", clip(path, logPathMax)))
	if len(path) > logPathMax {
		a = append(a, slog.Int("path_bytes", len(path)))
	}
	if ex.s3.Op.Name != "" {
		a = append(a, slog.String("s3_op", ex.s3.Op.Name))
	}
	if n := len(ex.resources); n > 0 {
		a = append(a, slog.String("resource", ex.resources[0]))
		if n > 1 {
			a = append(a, slog.Any("resources", ex.resources[:min(n, logResources)]), slog.Int("resource_count", n))
		}
	}
	if ex.prefix != "" {
		a = append(a, slog.String("prefix", ex.prefix))
	}
	if ex.tokenText != "" {
		a = append(a, slog.String("token", ex.tokenText))
	}
	a = append(a, slog.String("decision", decisionNames[ex.decision]))
	if o.reason != "" {
		a = append(a, slog.String("reason", o.reason))
	}
	a = append(a, slog.Int("status", o.status))
	if o.upstream != 0 {
		a = append(a, slog.Int("upstream_status", o.upstream))
	}
	a = append(a, slog.Int64("bytes_in", ex.in.n.Load()), slog.Int64("bytes_out", ex.rw.written),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000), slog.String("remote", r.RemoteAddr))
	if id := ex.rw.Header().Get(s3.HeaderRequestID); id != "" {
		a = append(a, slog.String("request_id", clip(id, logHostMax)))
	}
	if ex.keyID != "" {
		a = append(a, slog.String("key_id", ex.keyID))
	}
	if !ex.done {
		a = append(a, slog.Bool("aborted", true))
	}
	if ex.span != nil {
		if sc := ex.span.SpanContext(); sc.HasTraceID() {
			a = append(a, slog.String("trace_id", sc.TraceID().String()))
		}
	}
	p.log.LogAttrs(ex.client, slog.LevelInfo, "access", a...)
}

// clip returns s cut to at most n bytes, at the start of a UTF-8 sequence.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
