package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Response headers on every refusal made by the proxy itself, so a client can
// tell it from the backend's own 4xx/5xx.
const (
	HeaderRefused      = "Fencing-Refused"       // the refusal reason, e.g. stale
	HeaderCurrentToken = "Fencing-Current-Token" // on 409: the resource's maximum
)

// Refusal reasons (Fencing-Refused values and the problem's "reason" member).
const (
	ReasonStale        = "stale"
	ReasonMissing      = "missing"
	ReasonMalformed    = "malformed"
	ReasonBadResource  = "bad_resource"
	ReasonHopByHop     = "hop_by_hop"
	ReasonDrainTimeout = "drain_timeout"
	ReasonStoreError   = "store_error"
	ReasonClientGone   = "client_gone"
	ReasonUnsupported  = "unsupported"
	ReasonSignature    = "signature"
	ReasonJump         = "jump"
)

// problem is an RFC 9457 problem details body. Tokens are decimal strings:
// 64-bit integers lose precision in JavaScript.
type problem struct {
	Type         string `json:"type"`
	Title        string `json:"title"`
	Status       int    `json:"status"`
	Detail       string `json:"detail,omitempty"`
	Reason       string `json:"reason,omitempty"`
	Resource     string `json:"resource,omitempty"`
	Token        string `json:"token,omitempty"`
	CurrentToken string `json:"current_token,omitempty"`
}

func writeProblem(w http.ResponseWriter, pb problem) {
	if pb.Type == "" {
		pb.Type = "about:blank"
	}
	body, _ := json.Marshal(pb)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(pb.Status)
	w.Write(append(body, '\n'))
}

// refuse is the one place where the proxy's own errors become HTTP responses.
// It logs once; internal causes (store errors) stay out of the body.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, resource, token string, err error) {
	pb, level := p.problemFor(err)
	pb.Token = token
	if pb.Resource == "" {
		pb.Resource = resource
	}
	if pb.CurrentToken != "" {
		w.Header().Set(HeaderCurrentToken, pb.CurrentToken)
	}
	if pb.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set(HeaderRefused, pb.Reason)
	p.opts.Metrics.decision(pb.Reason)
	p.logRefusal(r, level, pb.Status, pb.Reason, pb.Resource, token, pb.CurrentToken, err)
	writeProblem(w, pb)
}

// problemFor maps one of the proxy's errors to its problem (status, reason,
// title, detail) and log level.
func (p *Proxy) problemFor(err error) (problem, slog.Level) {
	pb := problem{Detail: err.Error()}
	level := slog.LevelInfo
	var stale *StaleError
	switch {
	case errors.As(err, &stale):
		pb.Status, pb.Reason, pb.Title = http.StatusConflict, ReasonStale, "Stale fencing token"
		pb.Resource = stale.Resource // a COPY or MOVE may be stale on its Destination
		pb.CurrentToken = strconv.FormatUint(stale.Current, 10)
	case errors.Is(err, ErrTokenMissing):
		pb.Status, pb.Reason, pb.Title = http.StatusPreconditionRequired, ReasonMissing, "Fencing token required"
		pb.Detail = "this method is a fenced write; send the fencing token in the " + http.CanonicalHeaderKey(p.opts.TokenHeader) + " header"
	case errors.Is(err, ErrTokenMalformed):
		pb.Status, pb.Reason, pb.Title = http.StatusBadRequest, ReasonMalformed, "Malformed fencing token"
	case errors.Is(err, ErrSignature):
		pb.Status, pb.Reason, pb.Title = http.StatusForbidden, ReasonSignature, "Fencing token signature refused"
		level = slog.LevelWarn
	case errors.Is(err, ErrJump):
		pb.Status, pb.Reason, pb.Title = http.StatusForbidden, ReasonJump, "Fencing token jumps too far"
		level = slog.LevelWarn
	case errors.Is(err, ErrBadResource):
		pb.Status, pb.Reason, pb.Title = http.StatusBadRequest, ReasonBadResource, "No fenceable resource"
	case errors.Is(err, errUnsupported):
		pb.Status, pb.Reason, pb.Title = http.StatusBadRequest, ReasonUnsupported, "Write cannot be fenced"
	case errors.Is(err, ErrHopByHop):
		pb.Status, pb.Reason, pb.Title = http.StatusBadRequest, ReasonHopByHop, "Hop-by-hop header refused"
	case errors.Is(err, ErrDrainTimeout):
		pb.Status, pb.Reason, pb.Title = http.StatusServiceUnavailable, ReasonDrainTimeout, "Smaller-token writes still in flight"
		pb.Detail = "writes with smaller tokens on this resource did not finish within the drain timeout; nothing was forwarded, retry later"
		level = slog.LevelWarn
	case errors.Is(err, ErrStore):
		pb.Status, pb.Reason, pb.Title = http.StatusServiceUnavailable, ReasonStoreError, "Fencing store unavailable"
		pb.Detail = "the maximum could not be read or made durable; nothing was forwarded"
		level = slog.LevelError
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// The client went away while waiting at the barrier; 499 is for the log,
		// the answer is only written in case someone still reads.
		pb.Status, pb.Reason, pb.Title = 499, ReasonClientGone, "Client closed request"
	default:
		pb.Status, pb.Reason, pb.Title = http.StatusInternalServerError, "internal", "Internal error"
		pb.Detail = ""
		level = slog.LevelError
	}
	return pb, level
}

func (p *Proxy) logRefusal(r *http.Request, level slog.Level, status int, reason, resource, token, current string, err error) {
	p.log.LogAttrs(r.Context(), level, "write refused",
		slog.String("reason", reason), slog.Int("status", status),
		slog.String("resource", resource), slog.String("token", token), slog.String("current_token", current),
		slog.String("method", r.Method), slog.String("target", logTarget(r)),
		slog.String("remote", r.RemoteAddr), slog.String("error", err.Error()))
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
