package s3

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/fenceproxy/fenceproxy/s3/sigv4"
	"github.com/fenceproxy/fenceproxy/wire"
)

// HeaderRequestID carries an S3 error body's RequestId on the answer, as S3
// does.
const HeaderRequestID = "X-Amz-Request-Id"

// ErrAccessDenied: in S3 gateway mode, the verified key is not granted what
// the request does (403 AccessDenied).
var ErrAccessDenied = errors.New("access denied")

// ErrorBody is the body of the proxy's own answers in S3 mode, in the shape
// of S3's error responses, so that S3 clients show Code and Message instead
// of a bare status:
//
//	<?xml version="1.0" encoding="UTF-8"?>
//	<Error><Code>StaleFencingToken</Code><Message>...</Message><Resource>/bkt/key</Resource><RequestId>...</RequestId></Error>
type ErrorBody struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`      // the answer's code (Code)
	Message   string   `xml:"Message"`   // the problem's detail with its resource, token and current maximum
	Resource  string   `xml:"Resource"`  // the request path
	RequestID string   `xml:"RequestId"` // unique per answer; also in X-Amz-Request-Id
}

// errorCodes is the one table of the S3 codes of the proxy's answers. An
// error it names (the signature's, a grant's) has its own code and status,
// S3's for that cause; then each refusal reason has its code (S3's own where
// one fits, so that a client may already handle it; the fencing refusals
// have their own), and the answers without a reason one by status.
var errorCodes = []struct {
	err    error
	code   string
	status int
}{
	{sigv4.ErrAnonymous, "AccessDenied", http.StatusForbidden},
	{sigv4.ErrExpired, "AccessDenied", http.StatusForbidden},
	{sigv4.ErrUnsignedHeader, "AccessDenied", http.StatusForbidden},
	{sigv4.ErrTwoCredentials, "AccessDenied", http.StatusForbidden},
	{sigv4.ErrUnknownKey, "InvalidAccessKeyId", http.StatusForbidden},
	{sigv4.ErrSignatureMismatch, "SignatureDoesNotMatch", http.StatusForbidden},
	{sigv4.ErrSkew, "RequestTimeTooSkewed", http.StatusForbidden},
	{sigv4.ErrMalformed, "AuthorizationHeaderMalformed", http.StatusBadRequest},
	{sigv4.ErrMalformedQuery, "AuthorizationQueryParametersError", http.StatusBadRequest},
	{sigv4.ErrAlgorithm, "InvalidRequest", http.StatusBadRequest},
	{sigv4.ErrPayloadHash, "InvalidArgument", http.StatusBadRequest},
	{ErrAccessDenied, "AccessDenied", http.StatusForbidden},
}

var reasonCodes = map[string]string{
	wire.ReasonStale:            "StaleFencingToken",            // 409, also an upload cut off by a larger token
	wire.ReasonMissing:          "MissingFencingToken",          // 428
	wire.ReasonMalformed:        "InvalidFencingToken",          // 400
	wire.ReasonBadResource:      "InvalidURI",                   // 400: no fenceable resource, or a Host that is no S3 domain
	wire.ReasonAmbiguous:        "InvalidRequest",               // 400: a spelling stores read differently
	wire.ReasonHopByHop:         "InvalidRequest",               // 400
	wire.ReasonUnsupported:      "NotImplemented",               // 400: a write the proxy cannot fence
	wire.ReasonBadBody:          "IncompleteBody",               // 400: the body broke its framing or ended early
	wire.ReasonMalformedXML:     "MalformedXML",                 // 400: a DeleteObjects body S3 would not read either
	wire.ReasonSignature:        "InvalidFencingTokenSignature", // 403
	wire.ReasonForbidden:        "AccessDenied",                 // 403
	wire.ReasonJump:             "FencingTokenTooFarAhead",      // 403
	wire.ReasonDrainTimeout:     "FencingDrainTimeout",          // 503 with Retry-After
	wire.ReasonStoreError:       "ServiceUnavailable",           // 503 with Retry-After
	wire.ReasonPrefixLimit:      "InsufficientStorage",          // 507: FENCEPROXY_PREFIX_FENCES_SIZE reached
	wire.ReasonShardUnavailable: "ServiceUnavailable",           // 503 with Retry-After
	wire.ReasonOverloaded:       "SlowDown",                     // 503 with Retry-After: FENCEPROXY_MAX_UPLOADS reached
	wire.ReasonClientGone:       "RequestCanceled",              // 499, logged; nobody reads it
	wire.ReasonInternal:         "InternalError",                // 500
}

var statusCodes = map[int]string{
	http.StatusRequestTimeout: "RequestTimeout", // the upload paused past the upload idle timeout (S3's own code)
	http.StatusBadGateway:     "BadGateway",     // the backend could not be reached or the exchange failed
	http.StatusGatewayTimeout: "GatewayTimeout", // the backend did not answer in time
}

// Code returns the S3 error code and status of one of the proxy's answers:
// those of the cause err (nil: none) when the table names it, else the
// code of reason (a refusal) or of status (an answer without a reason) with
// status unchanged; InvalidRequest for any other 4xx and InternalError for
// any other status.
func Code(err error, reason string, status int) (string, int) {
	if err != nil {
		for _, c := range errorCodes {
			if errors.Is(err, c.err) {
				return c.code, c.status
			}
		}
	}
	if code, ok := reasonCodes[reason]; ok {
		return code, status
	}
	if code, ok := statusCodes[status]; ok {
		return code, status
	}
	if status >= 400 && status < 500 {
		return "InvalidRequest", status
	}
	return "InternalError", status
}

// ErrorOf returns the S3 error body of p for a request whose path is path:
// Code p.S3Code, or Code's for its reason and status when that is empty;
// Message the problem's detail (its title when it has none) followed by the
// resource, token and current maximum it does not already name; a new
// RequestID.
func ErrorOf(p wire.Problem, path string) ErrorBody {
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	var facts []string
	if p.Resource != "" && !strings.Contains(msg, strconv.Quote(p.Resource)) {
		facts = append(facts, "resource "+strconv.Quote(p.Resource))
	}
	if p.Token != "" && !strings.Contains(msg, "token "+p.Token) {
		facts = append(facts, "token "+p.Token)
	}
	if p.CurrentToken != "" && !strings.Contains(msg, "current maximum is "+p.CurrentToken) {
		facts = append(facts, "current maximum is "+p.CurrentToken)
	}
	if len(facts) > 0 {
		msg += " (" + strings.Join(facts, ", ") + ")"
	}
	code := p.S3Code
	if code == "" {
		code, _ = Code(nil, p.Reason, p.Status)
	}
	return ErrorBody{Code: code, Message: msg, Resource: path, RequestID: NewRequestID()}
}

// NewRequestID returns a random request id: 16 upper-case hex digits, as
// S3's own.
func NewRequestID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return strings.ToUpper(hex.EncodeToString(b[:]))
}

// WriteError writes e as the whole response with status, Content-Type
// application/xml, Content-Length, Cache-Control: no-store and
// X-Amz-Request-Id. Headers set on w before stay.
func WriteError(w http.ResponseWriter, status int, e ErrorBody) {
	body, _ := xml.Marshal(e) // strings only: cannot fail
	body = append([]byte(xml.Header[:len(xml.Header)-1]), body...)
	h := w.Header()
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderRequestID, e.RequestID)
	w.WriteHeader(status)
	w.Write(body)
}
