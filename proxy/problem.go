package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/wire"
)

// refuse is the one place where the proxy's own refusals become HTTP
// responses: a problem (problemFor), Fencing-Refused, and for a 409
// Fencing-Current-Token, written by writeProblem (an S3 <Error> in S3 mode).
// It logs once; internal causes (store errors) stay out of the body.
func (p *Proxy) refuse(ex *exchange, err error) {
	pb, level := p.problemFor(err)
	pb.Token = ex.tokenText
	if pb.Resource == "" {
		pb.Resource = ex.resource()
	}
	h := ex.w.Header()
	if pb.CurrentToken != "" {
		h.Set(wire.HeaderCurrentToken, pb.CurrentToken)
	}
	if pb.Status == http.StatusServiceUnavailable {
		h.Set("Retry-After", wire.RetryAfter(err))
	}
	h.Set(wire.HeaderRefused, pb.Reason)
	p.opts.Metrics.decision(pb.Reason)
	p.logRefusal(ex, level, pb, err)
	p.writeProblem(ex.w, ex.r, pb)
	if ex.rawBody != nil {
		lingerDrainBody(ex.w, ex.r, ex.rawBody) // not the decoder in front of it
	} else {
		lingerDrain(ex.w, ex.r)
	}
}

// Bounds of lingerDrain: enough for an SDK's usual part or object, short
// enough that a refused client holds a handler only briefly.
const (
	lingerBytes = 16 << 20
	lingerTime  = 2 * time.Second
)

// lingerDrain reads and discards what an HTTP/1 client still sends of the
// body of a request refused without reading it, after the answer is flushed,
// up to lingerBytes or lingerTime. A client that sends its body whatever
// the answer (one without Expect: 100-continue, or aws-sdk-go-v2, whose
// requests carry Expect but which net/http's Transport does not wait on)
// then gets to read the refusal; closing on its unread bytes would reset the
// connection under its write, and it would see a reset instead of the
// answer. A client that honours Expect sends nothing and closes on the
// answer's "Connection: close". Nothing read is forwarded.
func lingerDrain(w http.ResponseWriter, r *http.Request) {
	if !hasBody(r) {
		return
	}
	lingerDrainBody(w, r, r.Body)
}

// lingerDrainBody is lingerDrain of body, r's body as net/http reads it.
func lingerDrainBody(w http.ResponseWriter, r *http.Request, body io.Reader) {
	if r.ProtoMajor != 1 {
		return
	}
	rc := http.NewResponseController(w)
	if rc.Flush() != nil || rc.SetReadDeadline(time.Now().Add(lingerTime)) != nil {
		return
	}
	_, _ = io.CopyN(io.Discard, body, lingerBytes)
	_ = rc.SetReadDeadline(time.Time{})
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

// problemFor maps one of the proxy's errors to its problem (status, reason,
// title, detail, and the resource the error concerns) and log level: the
// table of the proxy's refusals.
func (p *Proxy) problemFor(err error) (wire.Problem, slog.Level) {
	pb := wire.Problem{Detail: err.Error(), Resource: fence.ResourceOf(err)}
	level := slog.LevelInfo
	var stale *fence.StaleError
	switch {
	case errors.As(err, &stale):
		pb.Status, pb.Reason, pb.Title = http.StatusConflict, wire.ReasonStale, "Stale fencing token"
		pb.CurrentToken = strconv.FormatUint(stale.Current, 10)
	case errors.Is(err, fence.ErrTokenMissing):
		pb.Status, pb.Reason, pb.Title = http.StatusPreconditionRequired, wire.ReasonMissing, "Fencing token required"
		pb.Detail = "this method is a fenced write; send the fencing token in the " + p.tokenHeader + " header"
	case errors.Is(err, fence.ErrTokenMalformed):
		pb.Status, pb.Reason, pb.Title = http.StatusBadRequest, wire.ReasonMalformed, "Malformed fencing token"
	case errors.Is(err, ErrSignature):
		pb.Status, pb.Reason, pb.Title = http.StatusForbidden, wire.ReasonSignature, "Fencing token signature refused"
		level = slog.LevelWarn
	case errors.Is(err, ErrForbidden):
		pb.Status, pb.Reason, pb.Title = http.StatusForbidden, wire.ReasonForbidden, "Forbidden"
		level = slog.LevelWarn
	case errors.Is(err, s3.ErrAccessDenied), errors.Is(err, ErrKeyRevoked):
		pb.Status, pb.Reason, pb.Title = http.StatusForbidden, wire.ReasonForbidden, "Access denied"
		level = slog.LevelWarn
	case errors.Is(err, fence.ErrJump):
		pb.Status, pb.Reason, pb.Title = http.StatusForbidden, wire.ReasonJump, "Fencing token jumps too far"
		level = slog.LevelWarn
	case errors.Is(err, fence.ErrBadResource):
		pb.Status, pb.Reason, pb.Title = http.StatusBadRequest, wire.ReasonBadResource, "No fenceable resource"
		if errors.Is(err, s3.ErrHost) { // the Host is at fault, not the path
			pb.Detail = strings.TrimPrefix(pb.Detail, fence.ErrBadResource.Error()+": ")
		}
	case errors.Is(err, s3.ErrAmbiguous):
		pb.Status, pb.Reason, pb.Title = http.StatusBadRequest, wire.ReasonAmbiguous, "Ambiguous request"
	case errors.Is(err, s3.ErrMalformedDelete):
		pb.Status, pb.Reason, pb.Title = http.StatusBadRequest, wire.ReasonMalformedXML, "Malformed DeleteObjects body"
	case errors.Is(err, errUnsupported), errors.Is(err, s3.ErrInBody):
		pb.Status, pb.Reason, pb.Title = http.StatusBadRequest, wire.ReasonUnsupported, "Write cannot be fenced"
	case errors.Is(err, ErrHopByHop):
		pb.Status, pb.Reason, pb.Title = http.StatusBadRequest, wire.ReasonHopByHop, "Hop-by-hop header refused"
	case errors.Is(err, errBadBody):
		pb.Status, pb.Reason, pb.Title = http.StatusBadRequest, wire.ReasonBadBody, "Malformed request body"
	case errors.Is(err, fence.ErrDrainTimeout):
		pb.Status, pb.Reason, pb.Title = http.StatusServiceUnavailable, wire.ReasonDrainTimeout, "Smaller-token writes still in flight"
		pb.Detail = "writes with smaller tokens on this resource did not finish within the drain timeout; nothing was forwarded, retry later"
		level = slog.LevelWarn
	case errors.Is(err, ErrShardUnavailable):
		pb.Status, pb.Reason, pb.Title = http.StatusServiceUnavailable, wire.ReasonShardUnavailable, "Shard unavailable"
		level = slog.LevelWarn
	case errors.Is(err, fence.ErrStore):
		pb.Status, pb.Reason, pb.Title = http.StatusServiceUnavailable, wire.ReasonStoreError, "Fencing store unavailable"
		pb.Detail = "the maximum could not be read or made durable; nothing was forwarded"
		level = slog.LevelError
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// The client went away while waiting at the barrier; 499 is for the log,
		// the answer is only written in case someone still reads.
		pb.Status, pb.Reason, pb.Title = 499, wire.ReasonClientGone, "Client closed request"
	default:
		pb.Status, pb.Reason, pb.Title = http.StatusInternalServerError, wire.ReasonInternal, "Internal error"
		pb.Detail = ""
		level = slog.LevelError
	}
	if p.s3 != nil {
		// S3 mode: the code of the one table, and S3's own status for a
		// refused signature (400 for a malformed one).
		pb.S3Code, pb.Status = s3.Code(err, pb.Reason, pb.Status)
	}
	return pb, level
}

// errPriorKnowledge: the HTTP/2 connection preface on a listener that speaks
// HTTP/1.1 only (400 bad_resource: the target * names no resource).
var errPriorKnowledge = fmt.Errorf("%w: HTTP/2 with prior knowledge (the PRI * HTTP/2.0 preface) is not served on this listener; "+
	"use HTTP/1.1, or HTTP/2 over TLS (FENCEPROXY_TLS_CERT_FILE), where it is negotiated by ALPN", fence.ErrBadResource)

// priorKnowledge answers the HTTP/2 connection preface, which net/http hands
// to the handler of a listener without h2c: 400 bad_resource as for any
// other target "*" but OPTIONS, with Connection: close (what follows are
// HTTP/2 frames, not requests), logged as what it is rather than as a
// refused write.
func (p *Proxy) priorKnowledge(ex *exchange) {
	pb, level := p.problemFor(errPriorKnowledge)
	pb.Detail = strings.TrimPrefix(pb.Detail, fence.ErrBadResource.Error()+": ")
	h := ex.w.Header()
	h.Set(wire.HeaderRefused, pb.Reason)
	h.Set("Connection", "close")
	p.opts.Metrics.decision(pb.Reason)
	p.log.LogAttrs(ex.r.Context(), level, "HTTP/2 prior knowledge on a listener without h2c; answered in HTTP/1.1 and closed",
		slog.String("reason", pb.Reason), slog.Int("status", pb.Status), slog.String("remote", ex.r.RemoteAddr))
	p.writeProblem(ex.w, ex.r, pb)
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

// secretQueryParams are query parameters that carry credentials: presigned S3
// URLs (SigV4 and SigV2) sign with them. Matched case-insensitively.
var secretQueryParams = []string{"x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature", "awsaccesskeyid"}

// logTarget is the request target for logs, with the values of credential
// query parameters replaced by REDACTED: logs are read more widely than the
// secrets they would leak.
func logTarget(r *http.Request) string {
	path, query, ok := strings.Cut(r.RequestURI, "?")
	if !ok {
		return r.RequestURI
	}
	parts := strings.Split(query, "&")
	for i, part := range parts {
		name, _, hasValue := strings.Cut(part, "=")
		if unescaped, err := url.QueryUnescape(name); err == nil {
			name = unescaped
		}
		if hasValue && slices.Contains(secretQueryParams, strings.ToLower(name)) {
			parts[i] = part[:strings.IndexByte(part, '=')+1] + "REDACTED"
		}
	}
	return path + "?" + strings.Join(parts, "&")
}
