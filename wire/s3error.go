package wire

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"net/http"
	"strconv"
	"strings"
)

// HeaderS3RequestID carries an S3 error body's RequestId on the answer, as
// S3 does.
const HeaderS3RequestID = "X-Amz-Request-Id"

// S3Error is the body of the proxy's own answers in S3 mode
// (FENCEPROXY_S3=pass), in the shape of S3's error responses, so that S3
// clients show Code and Message instead of a bare status:
//
//	<?xml version="1.0" encoding="UTF-8"?>
//	<Error><Code>StaleFencingToken</Code><Message>...</Message><Resource>/bkt/key</Resource><RequestId>...</RequestId></Error>
type S3Error struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`      // S3ErrorCode of the problem
	Message   string   `xml:"Message"`   // the problem's detail with its resource, token and current maximum
	Resource  string   `xml:"Resource"`  // the request path
	RequestID string   `xml:"RequestId"` // unique per answer; also in X-Amz-Request-Id
}

// s3Codes is the one table from refusal reasons to S3 error codes. Codes S3
// itself defines are used where one fits (a client may already handle it);
// the fencing refusals have their own. Statuses stay the problem's.
var s3Codes = map[string]string{
	ReasonStale:        "StaleFencingToken",            // 409, also an upload cut off by a larger token
	ReasonMissing:      "MissingFencingToken",          // 428
	ReasonMalformed:    "InvalidFencingToken",          // 400
	ReasonBadResource:  "InvalidURI",                   // 400: no fenceable resource, or a Host that is no S3 domain
	ReasonHopByHop:     "InvalidRequest",               // 400
	ReasonUnsupported:  "NotImplemented",               // 400: a write the proxy cannot fence
	ReasonBadBody:      "IncompleteBody",               // 400: the body broke its framing or ended early
	ReasonMalformedXML: "MalformedXML",                 // 400: a DeleteObjects body S3 would not read either
	ReasonSignature:    "InvalidFencingTokenSignature", // 403
	ReasonForbidden:    "AccessDenied",                 // 403
	ReasonJump:         "FencingTokenTooFarAhead",      // 403
	ReasonDrainTimeout: "FencingDrainTimeout",          // 503 with Retry-After
	ReasonStoreError:   "ServiceUnavailable",           // 503 with Retry-After
	ReasonShardUnavailable: "ServiceUnavailable",       // 503 with Retry-After
	ReasonClientGone:   "RequestCanceled",              // 499, logged; nobody reads it
	ReasonInternal:     "InternalError",                // 500
}

// s3StatusCodes are the codes of the proxy's answers without a reason (not
// refusals: no Fencing-Refused), by status.
var s3StatusCodes = map[int]string{
	http.StatusRequestTimeout: "RequestTimeout", // the upload paused past the upload idle timeout (S3's own code)
	http.StatusBadGateway:     "BadGateway",     // the backend could not be reached or the exchange failed
	http.StatusGatewayTimeout: "GatewayTimeout", // the backend did not answer in time
}

// S3ErrorCode returns the S3 error code of p: its reason's, or for an
// answer without a reason its status's; InvalidRequest for any other 4xx and
// InternalError for any other status.
func S3ErrorCode(p Problem) string {
	if p.S3Code != "" {
		return p.S3Code
	}
	if code, ok := s3Codes[p.Reason]; ok {
		return code
	}
	if code, ok := s3StatusCodes[p.Status]; ok {
		return code
	}
	if p.Status >= 400 && p.Status < 500 {
		return "InvalidRequest"
	}
	return "InternalError"
}

// S3ErrorOf returns the S3 error body of p for a request whose path is path:
// Code from S3ErrorCode, Message the problem's detail (its title when it has
// none) followed by the resource, token and current maximum it does not
// already name, and a new RequestID.
func S3ErrorOf(p Problem, path string) S3Error {
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
	return S3Error{Code: S3ErrorCode(p), Message: msg, Resource: path, RequestID: NewS3RequestID()}
}

// NewS3RequestID returns a random request id: 16 upper-case hex digits, as
// S3's own.
func NewS3RequestID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return strings.ToUpper(hex.EncodeToString(b[:]))
}

// WriteS3Error writes e as the whole response with status, Content-Type
// application/xml, Content-Length, Cache-Control: no-store and
// X-Amz-Request-Id. Headers set on w before stay.
func WriteS3Error(w http.ResponseWriter, status int, e S3Error) {
	body, _ := xml.Marshal(e) // strings only: cannot fail
	body = append([]byte(xml.Header[:len(xml.Header)-1]), body...)
	h := w.Header()
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set(HeaderS3RequestID, e.RequestID)
	w.WriteHeader(status)
	w.Write(body)
}
