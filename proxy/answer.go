package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/upstream"
	"github.com/fenceproxy/fenceproxy/wire"
)

// refuse is the one place where the proxy's own refusals become HTTP
// responses: a problem (problemFor), Fencing-Refused, and for a 409
// Fencing-Current-Token and Fencing-Resource, written by writeProblem (an S3 <Error> in S3 mode).
// It logs once; internal causes (store errors) stay out of the body. A body
// cut while read before forwarding is answered as one cut on its way
// upstream (uploadStopped).
func (p *Proxy) refuse(ex *exchange, err error) {
	if err == errUploadIdle || err == errUploadSlow { // a body read before forwarding (DeleteObjects)
		p.uploadStopped(ex, err)
		return
	}
	pb, a := p.problemFor(err)
	pb.Token = ex.tokenText
	if pb.Resource == "" {
		pb.Resource = ex.resource()
	}
	h := ex.w.Header()
	if pb.CurrentToken != "" {
		h.Set(wire.HeaderCurrentToken, pb.CurrentToken)
		h.Set(wire.HeaderResource, wire.EscapeName(pb.Resource)) // the fence that refused, maybe a prefix above the key
	}
	if a.Retry {
		h.Set("Retry-After", wire.RetryAfter(err))
	}
	h.Set(wire.HeaderRefused, pb.Reason)
	p.opts.Metrics.decision(pb.Reason)
	ex.decision = decidedRefused
	p.logRefusal(ex, a.Level, pb, err)
	p.writeProblem(ex.w, ex.r, pb)
	if ex.rawBody != nil {
		lingerDrainBody(ex.w, ex.r, ex.rawBody) // not the decoder in front of it
	} else {
		lingerDrain(ex.w, ex.r)
	}
}

// upstreamError maps a failed upstream exchange: upload cut off by a larger
// token -> 409, upload paused past the idle timeout -> 408, a request body
// the client broke (bad framing, an early end) -> 400 bad_body, client gone
// -> 499 (logged only; the connection or stream is aborted, so that net/http
// sends no empty 200 in place of an answer), timeout -> 504, anything else ->
// 502. Nothing is retried: a write may have reached the backend. A write
// whose whole body was handed to the backend is abandoned: it keeps its
// resource's barrier closed for the abandon grace, since a slow backend may
// still apply it. A dial error (upstream.DialError) sent nothing.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if rw, ok := w.(*responseWriter); ok {
		rw.failed = true // what is sent now is the proxy's, not the backend's
	}
	ex := exchangeOf(r)
	if ex == nil { // a bodyless request that went through no barrier
		ex = &exchange{w: w, r: r, client: r.Context()}
	}
	if why := ex.stopReason(); why != nil {
		p.uploadStopped(ex, why)
		return
	}
	if errors.Is(err, ErrKeyRevoked) { // gatewayTransport sent nothing
		p.uploadStopped(ex, err)
		return
	}
	if ex.admitted && errors.Is(err, upstream.ErrPastValidity) {
		// The fast path found the ownership's validity over before it wrote
		// the request: nothing reached the backend.
		p.uploadStopped(ex, errOwnershipEnded)
		return
	}
	if ex.admitted && ex.up.State() != fence.Sent && ex.ownershipOver() {
		// The ownership ended (its context cancelled the exchange) before
		// the body was handed over whole: the backend cannot apply it.
		p.uploadStopped(ex, errOwnershipEnded)
		return
	}
	status, kind := http.StatusBadGateway, "other"
	gone := ex.client.Err() != nil
	var timeout interface{ Timeout() bool }
	detail := "the backend could not be reached or did not answer in time"
	switch {
	case gone:
		status, kind = 499, "client_gone" // nobody reads a response
	case ex.admitted && !dialError(err) && ex.ownershipOver():
		// Sent whole, then cut at the ownership's validity: the outcome is
		// unknown, as after a timeout.
		status, kind = http.StatusGatewayTimeout, "ownership_ended"
		detail = "this replica's ownership of the shard ended before the backend answered; the exchange was cut and the write may still be applied"
	case !dialError(err) && (errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &timeout) && timeout.Timeout())):
		status, kind = http.StatusGatewayTimeout, "timeout"
	}
	p.opts.Metrics.upstreamError(kind)
	// A dial error means the last attempt sent nothing; an earlier copy of a
	// replayable write may have gone out on a reused connection.
	abandoned := ex.admitted && ex.up.State() == fence.Sent && p.barrier.AbandonGrace() > 0 &&
		(!dialError(err) || (ex.traced && ex.wrote.Load() > 0))
	if abandoned {
		ex.up.Abandon()
	}
	if gone && ex.admitted && !abandoned {
		panic(http.ErrAbortHandler) // finish logs a gone client of a forwarded write once, as 499
	}
	ex.answered = true // logged here, once
	attrs := []slog.Attr{slog.String("method", r.Method), slog.String("target", logTarget(r)),
		slog.Int("status", status), slog.String("error", err.Error())}
	if abandoned {
		attrs = append(attrs, slog.String("resource", ex.resource()), slog.String("token", ex.tokenText),
			slog.String("abandon_grace", p.barrier.AbandonGrace().String()))
		p.log.LogAttrs(r.Context(), slog.LevelWarn, "upstream exchange failed after the whole write was sent; "+
			"larger tokens on its resource wait the abandon grace, as the backend may still apply it", attrs...)
	} else {
		p.log.LogAttrs(r.Context(), slog.LevelWarn, "upstream exchange failed", attrs...)
	}
	if status == 499 {
		// Nobody reads an answer, or the client only half-closed and would
		// read net/http's empty 200: abort the connection (HTTP/2: the stream).
		panic(http.ErrAbortHandler)
	}
	p.writeProblem(w, r, wire.Problem{Status: status, Title: http.StatusText(status), Detail: detail})
}

// uploadStopped answers a request whose upload stopped before its end: the
// backend did not get the whole body, so it cannot apply it and the barrier
// opens at once. A larger token's cut is 409, a client paused past the upload
// idle timeout 408; a body the client broke (bad chunked framing, fewer bytes
// than its length before its connection's read side or its HTTP/2 stream
// ended) is 400 bad_body while the client can still read, and a client that
// can no longer read is logged as 499 and its connection or stream aborted.
// One log line each.
func (p *Proxy) uploadStopped(ex *exchange, why error) {
	ex.answered = true
	r := ex.r
	attrs := []slog.Attr{slog.String("resource", ex.resource()), slog.String("token", ex.tokenText),
		slog.String("method", r.Method), slog.String("target", logTarget(r))}
	var pb wire.Problem
	switch {
	case why == errUploadCut:
		p.opts.Metrics.upstreamError("upload_cut")
		// The fence whose raise cut it: one of the write's resources, or a
		// prefix fence above or below one.
		stale := ex.up.CutBy()
		if stale == nil { // not the barrier's cut: the first resource's fence now
			name, current, _ := p.barrier.Fence(ex.resource())
			stale = &fence.StaleError{Resource: name, Token: ex.token, Current: current}
		}
		pb, _ = p.problemFor(stale)
		pb.Detail = errUploadCut.Error() + "; the backend did not get it whole"
		pb.Token = ex.tokenText
		ex.w.Header().Set(wire.HeaderRefused, pb.Reason)
		ex.w.Header().Set(wire.HeaderCurrentToken, pb.CurrentToken)
		ex.w.Header().Set(wire.HeaderResource, wire.EscapeName(pb.Resource))
		p.log.LogAttrs(r.Context(), slog.LevelInfo, "upload cut off by a larger token", append(attrs,
			slog.Int("status", pb.Status), slog.String("current_token", pb.CurrentToken))...)
	case why == errOwnershipEnded:
		p.opts.Metrics.upstreamError("ownership_ended")
		pb, _ = p.problemFor(why)
		pb.Token = ex.tokenText
		ex.w.Header().Set(wire.HeaderRefused, pb.Reason)
		ex.w.Header().Set("Retry-After", "1")
		p.log.LogAttrs(r.Context(), slog.LevelWarn, "upload cut off: this replica's ownership of the shard ended", append(attrs,
			slog.Int("status", pb.Status))...)
	case errors.Is(why, ErrKeyRevoked):
		p.opts.Metrics.upstreamError("key_revoked")
		pb, _ = p.problemFor(why)
		pb.Token = ex.tokenText
		ex.w.Header().Set(wire.HeaderRefused, pb.Reason)
		p.log.LogAttrs(r.Context(), slog.LevelWarn, "upload cut off: its S3 gateway key was revoked", append(attrs,
			slog.Int("status", pb.Status), slog.String("key_id", ex.keyID))...)
	case why == errUploadSlow:
		p.opts.Metrics.upstreamError("upload_too_slow")
		pb = wire.Problem{Status: http.StatusRequestTimeout, Title: "Request body too slow",
			Detail: fmt.Sprintf("the body arrived slower than %d bytes/s over %s; the upload was cut off and the backend did not get it whole",
				p.opts.UploadMinRate, p.opts.UploadRateWindow)}
		p.log.LogAttrs(r.Context(), slog.LevelInfo, "upload cut off: client sent its body slower than the minimum upload rate",
			append(attrs, slog.Int("status", pb.Status), slog.Int64("upload_min_rate", p.opts.UploadMinRate),
				slog.String("upload_rate_window", p.opts.UploadRateWindow.String()), slog.String("remote", r.RemoteAddr))...)
	case why == errUploadIdle:
		p.opts.Metrics.upstreamError("upload_timeout")
		pb = wire.Problem{Status: http.StatusRequestTimeout, Title: "Request body timeout",
			Detail: "no body bytes arrived within the upload idle timeout; the upload was cut off and the backend did not get it whole"}
		p.log.LogAttrs(r.Context(), slog.LevelInfo, "upload cut off: client paused past the upload idle timeout",
			append(attrs, slog.Int("status", pb.Status), slog.String("upload_idle_timeout", p.opts.UploadIdleTimeout.String()))...)
	default:
		if clientGone(ex, why) {
			p.opts.Metrics.upstreamError("client_gone")
			p.log.LogAttrs(r.Context(), slog.LevelInfo, "client went away during the upload", append(attrs,
				slog.Int("status", 499), slog.String("error", why.Error()))...)
			panic(http.ErrAbortHandler) // no answer, not even net/http's empty 200
		}
		p.opts.Metrics.upstreamError("bad_body")
		pb, _ = p.problemFor(fmt.Errorf("%w: %w", errBadBody, why))
		pb.Detail += "; the backend did not get it whole"
		pb.Token = ex.tokenText
		ex.w.Header().Set(wire.HeaderRefused, pb.Reason)
		p.log.LogAttrs(r.Context(), slog.LevelInfo, "request body malformed or cut short; the backend did not get it whole",
			append(attrs, slog.String("reason", pb.Reason), slog.Int("status", pb.Status),
				slog.String("remote", r.RemoteAddr), slog.String("error", why.Error()))...)
	}
	if r.ProtoMajor == 1 {
		ex.w.Header().Set("Connection", "close") // the rest of the body is still on the wire
	}
	p.writeProblem(ex.w, r, pb)
	if why != errUploadCut && why != errUploadIdle && why != errUploadSlow && ex.rawBody != nil {
		// A signed stream whose chunk failed its signature is still well
		// framed HTTP: read the rest, so that the client reads the answer
		// instead of a reset under its write.
		lingerDrainBody(ex.w, r, ex.rawBody)
	}
}

// clientGone reports whether err, met reading the client's body, leaves
// nobody to read an answer: over HTTP/1 the connection failed (an early end
// is not that: a client that half-closed still reads); over HTTP/2 the stream
// was reset or its connection lost, which ends its context.
func clientGone(ex *exchange, err error) bool {
	if ex.r.ProtoMajor >= 2 {
		return ex.client.Err() != nil
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, net.ErrClosed)
}

// answers is the table of the proxy's refusals: each error's status,
// reason, title and log level. The first row whose error matches wins;
// problemFor adds what a row cannot say.
var answers = wire.Answers{
	{Err: fence.ErrStale, Status: http.StatusConflict, Reason: wire.ReasonStale, Title: "Stale fencing token", Level: slog.LevelInfo},
	{Err: fence.ErrTokenMissing, Status: http.StatusPreconditionRequired, Reason: wire.ReasonMissing, Title: "Fencing token required", Level: slog.LevelInfo},
	{Err: fence.ErrTokenMalformed, Status: http.StatusBadRequest, Reason: wire.ReasonMalformed, Title: "Malformed fencing token", Level: slog.LevelInfo},
	{Err: ErrSignature, Status: http.StatusForbidden, Reason: wire.ReasonSignature, Title: "Fencing token signature refused", Level: slog.LevelWarn},
	{Err: ErrForbidden, Status: http.StatusForbidden, Reason: wire.ReasonForbidden, Title: "Forbidden", Level: slog.LevelWarn},
	{Err: s3.ErrAccessDenied, Status: http.StatusForbidden, Reason: wire.ReasonForbidden, Title: "Access denied", Level: slog.LevelWarn},
	{Err: ErrKeyRevoked, Status: http.StatusForbidden, Reason: wire.ReasonForbidden, Title: "Access denied", Level: slog.LevelWarn},
	{Err: fence.ErrJump, Status: http.StatusForbidden, Reason: wire.ReasonJump, Title: "Fencing token jumps too far", Level: slog.LevelWarn},
	{Err: fence.ErrBadResource, Status: http.StatusBadRequest, Reason: wire.ReasonBadResource, Title: "No fenceable resource", Level: slog.LevelInfo},
	{Err: s3.ErrAmbiguous, Status: http.StatusBadRequest, Reason: wire.ReasonAmbiguous, Title: "Ambiguous request", Level: slog.LevelInfo},
	{Err: s3.ErrMalformedDelete, Status: http.StatusBadRequest, Reason: wire.ReasonMalformedXML, Title: "Malformed DeleteObjects body", Level: slog.LevelInfo},
	{Err: errUnsupported, Status: http.StatusBadRequest, Reason: wire.ReasonUnsupported, Title: "Write cannot be fenced", Level: slog.LevelInfo},
	{Err: s3.ErrInBody, Status: http.StatusBadRequest, Reason: wire.ReasonUnsupported, Title: "Write cannot be fenced", Level: slog.LevelInfo},
	{Err: ErrHopByHop, Status: http.StatusBadRequest, Reason: wire.ReasonHopByHop, Title: "Hop-by-hop header refused", Level: slog.LevelInfo},
	{Err: errBadBody, Status: http.StatusBadRequest, Reason: wire.ReasonBadBody, Title: "Malformed request body", Level: slog.LevelInfo},
	{Err: fence.ErrDrainTimeout, Status: http.StatusServiceUnavailable, Reason: wire.ReasonDrainTimeout, Title: "Smaller-token writes still in flight",
		Detail: "writes with smaller tokens on this resource did not finish within the drain timeout; nothing was forwarded, retry later",
		Retry:  true, Level: slog.LevelWarn},
	{Err: ErrShardUnavailable, Status: http.StatusServiceUnavailable, Reason: wire.ReasonShardUnavailable, Title: "Shard unavailable",
		Retry: true, Level: slog.LevelWarn},
	// Logged at debug: an attack would flood the log (overloaded warns at
	// most every 10 s instead).
	{Err: ErrOverloaded, Status: http.StatusServiceUnavailable, Reason: wire.ReasonOverloaded, Title: "Too many uploads in flight",
		Retry: true, Level: slog.LevelDebug},
	{Err: fence.ErrPrefixLimit, Status: http.StatusInsufficientStorage, Reason: wire.ReasonPrefixLimit, Title: "Too many prefix fences",
		Level: slog.LevelError},
	{Err: fence.ErrStore, Status: http.StatusServiceUnavailable, Reason: wire.ReasonStoreError, Title: "Fencing store unavailable",
		Detail: "the maximum could not be read or made durable; nothing was forwarded", Retry: true, Level: slog.LevelError},
	// The client went away while waiting at the barrier; 499 is for the log,
	// the answer is only written in case someone still reads.
	{Err: context.Canceled, Status: 499, Reason: wire.ReasonClientGone, Title: "Client closed request", Level: slog.LevelInfo},
	{Err: context.DeadlineExceeded, Status: 499, Reason: wire.ReasonClientGone, Title: "Client closed request", Level: slog.LevelInfo},
	{Status: http.StatusInternalServerError, Reason: wire.ReasonInternal, Title: "Internal error", Hide: true, Level: slog.LevelError},
}

// problemFor returns the problem of one of the proxy's errors (its row in
// answers, the resource the error concerns, and in S3 mode its S3 code) and
// the row.
func (p *Proxy) problemFor(err error) (wire.Problem, wire.Answer) {
	a := answers.Find(err)
	pb := a.Problem(err)
	pb.Resource = fence.ResourceOf(err)
	var stale *fence.StaleError
	switch {
	case a.Reason == wire.ReasonStale && errors.As(err, &stale):
		pb.CurrentToken = strconv.FormatUint(stale.Current, 10)
	case a.Reason == wire.ReasonMissing:
		pb.Detail = "this method is a fenced write; send the fencing token in the " + p.tokenHeader + " header"
	case a.Reason == wire.ReasonBadResource && errors.Is(err, s3.ErrHost): // the Host is at fault, not the path
		pb.Detail = strings.TrimPrefix(pb.Detail, fence.ErrBadResource.Error()+": ")
	}
	if p.s3 != nil {
		// S3 mode: the code of the one table, and S3's own status for a
		// refused signature (400 for a malformed one).
		pb.S3Code, pb.Status = s3.Code(err, pb.Reason, pb.Status)
	}
	return pb, a
}

// writeProblem writes one of the proxy's own answers as the whole response:
// in S3 mode an S3 <Error> body (s3.ErrorOf: the code from the one table of
// S3 codes, Resource the request path), so that S3 clients read its code and
// message; otherwise problem+json. Status and the headers set before are the
// same in both.
func (p *Proxy) writeProblem(w http.ResponseWriter, r *http.Request, pb wire.Problem) {
	if p.s3 == nil {
		wire.WriteProblem(w, pb)
		return
	}
	if pb.Reason == wire.ReasonForbidden {
		pb.Token = "" // a refused signature or grant is not about the token: keep it out of the message
	}
	s3.WriteError(w, pb.Status, s3.ErrorOf(pb, r.URL.Path))
}

func (p *Proxy) logRefusal(ex *exchange, level slog.Level, pb wire.Problem, err error) {
	r := ex.r
	msg := "write refused"
	if !mayWrite(r) {
		msg = "request refused"
	}
	attrs := []slog.Attr{slog.String("reason", pb.Reason), slog.Int("status", pb.Status),
		slog.String("resource", pb.Resource), slog.String("token", pb.Token), slog.String("current_token", pb.CurrentToken),
		slog.String("method", r.Method), slog.String("target", logTarget(r)),
		slog.String("remote", r.RemoteAddr), slog.String("error", err.Error())}
	if ex.keyID != "" {
		attrs = append(attrs, slog.String("key_id", ex.keyID))
	}
	p.log.LogAttrs(r.Context(), level, msg, attrs...)
}

// mayWrite reports a request whose method or method override is not a read
// (GET, HEAD, OPTIONS).
func mayWrite(r *http.Request) bool {
	for _, m := range methods(r) {
		if m != http.MethodGet && m != http.MethodHead && m != http.MethodOptions {
			return true
		}
	}
	return false
}
