package client

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/wire"
)

// Response headers that mark a refusal made by the proxy itself.
const (
	HeaderRefused      = wire.HeaderRefused      // the refusal reason, e.g. "stale"
	HeaderCurrentToken = wire.HeaderCurrentToken // on a stale 409: the resource's maximum
	HeaderResource     = wire.HeaderResource     // on a stale 409: the fence that refused, percent-encoded
)

// Fencing-Refused values. ReasonStale comes as a *StaleError; the others as
// a *RefusedError with that Reason (wire lists them all).
const (
	ReasonStale = wire.ReasonStale // 409: a newer holder took over; stop writing
	// ReasonSignature: 403 in signed-token mode, the write carried no valid
	// X-Fencing-Token-Signature for its token and resource. Not a takeover:
	// retrying with the same headers will not help.
	ReasonSignature = wire.ReasonSignature
	// ReasonJump: 403, the token is more than FENCEPROXY_MAX_TOKEN_JUMP above
	// the resource's maximum.
	ReasonJump = wire.ReasonJump
)

// maxProblemBody bounds how much of a refusal's problem+json body is read.
const maxProblemBody = 64 << 10

// ErrStale and ErrRefused match, with errors.Is, a *StaleError and any proxy
// refusal (a *StaleError or a *RefusedError).
var (
	ErrStale   = errors.New("fenceproxy: stale fencing token")
	ErrRefused = errors.New("fenceproxy: request refused by the proxy")
)

// StaleError is the proxy's 409 for a write whose token is below the
// resource's maximum: a newer holder has taken over, and this writer must
// stop. Nothing was forwarded to the backend.
type StaleError struct {
	// Resource is the fence that refused: the write's resource key or a
	// prefix fence above it ("jobs/out/part-7/"), from the problem's
	// "resource" or the Fencing-Resource header (an S3 <Error> body has it
	// only in its message); "" when the answer named none.
	Resource string
	Token    uint64 // the refused token (0 when not known)
	Current  uint64 // the resource's maximum: the token of the newer holder
}

func (e *StaleError) Error() string {
	res := ""
	if e.Resource != "" {
		res = fmt.Sprintf(" on %q", e.Resource)
	}
	tok := "token"
	if e.Token != 0 {
		tok = "token " + strconv.FormatUint(e.Token, 10)
	}
	return fmt.Sprintf("fenceproxy: stale fencing %s%s: the current token is %d", tok, res, e.Current)
}

// Is makes errors.Is(err, ErrStale) and errors.Is(err, ErrRefused) hold.
func (e *StaleError) Is(target error) bool { return target == ErrStale || target == ErrRefused }

// ErrorCode, ErrorMessage and ErrorFault make a StaleError a smithy.APIError
// with the proxy's S3 code (StaleFencingToken), as an SDK call without
// StackFencing reports it.
func (e *StaleError) ErrorCode() string {
	code, _ := s3.Code(nil, ReasonStale, http.StatusConflict)
	return code
}
func (e *StaleError) ErrorMessage() string          { return e.Error() }
func (e *StaleError) ErrorFault() smithy.ErrorFault { return smithy.FaultClient }

// RefusedError is any other refusal made by the proxy itself (missing or
// malformed token, bad resource, bad signature, token jump, drain timeout,
// store error, ...): the request was not forwarded.
type RefusedError struct {
	Status int    // HTTP status (400, 403, 428, 503, ...)
	Reason string // the Fencing-Refused value, e.g. "missing", "signature", "drain_timeout"
	Detail string // the problem's detail, or its title when it has none
	// Code is the S3 error code of an S3-mode answer's <Error> body ("" for
	// problem+json): in gateway mode a refused signature or grant has its
	// own (SignatureDoesNotMatch, InvalidAccessKeyId, AccessDenied, ...).
	Code string
}

func (e *RefusedError) Error() string {
	msg := fmt.Sprintf("fenceproxy: request refused (%d %s)", e.Status, e.Reason)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Is makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// ErrorCode, ErrorMessage and ErrorFault make a RefusedError a
// smithy.APIError with the proxy's S3 code: the <Error> body's, else the
// one for its reason and status (MissingFencingToken, FencingDrainTimeout,
// ...: s3.Code).
func (e *RefusedError) ErrorCode() string {
	if e.Code != "" {
		return e.Code
	}
	code, _ := s3.Code(nil, e.Reason, e.Status)
	return code
}
func (e *RefusedError) ErrorMessage() string { return e.Error() }
func (e *RefusedError) ErrorFault() smithy.ErrorFault {
	if e.Status >= 500 {
		return smithy.FaultServer
	}
	return smithy.FaultClient
}

// CheckResponse tells a refusal made by the proxy from the backend's own
// answers. It returns nil when resp carries no Fencing-Refused header (a
// backend's own 409 included), without touching the body. For a refusal it
// reads the problem+json body (at most 64 KiB), closes it and puts the bytes
// read back in resp.Body, and returns a *StaleError for a 409 with
// "Fencing-Refused: stale", a *RefusedError otherwise.
func CheckResponse(resp *http.Response) error {
	if resp == nil || len(resp.Header.Values(HeaderRefused)) == 0 {
		return nil
	}
	var pb wire.Problem
	if resp.Body != nil && resp.Body != http.NoBody {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxProblemBody))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(data))
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/xml") {
			// S3 mode's <Error> body: its Message is the detail; the
			// token is the request's own.
			var e struct{ Code, Message string }
			if xml.Unmarshal(data, &e) == nil {
				pb.Detail, pb.S3Code = e.Message, e.Code
				if resp.Request != nil {
					pb.Token = resp.Request.Header.Get(wire.DefaultTokenHeader)
				}
			}
		} else {
			_ = json.Unmarshal(data, &pb) // a body that is not a problem leaves the headers to speak
		}
	}
	return refusal(resp, pb)
}

// refusal builds the error of a response that carries Fencing-Refused, from
// its headers and (possibly empty) problem body.
func refusal(resp *http.Response, pb wire.Problem) error {
	reason := resp.Header.Get(HeaderRefused)
	if resp.StatusCode == http.StatusConflict && reason == ReasonStale {
		e := &StaleError{Resource: pb.Resource}
		if e.Resource == "" {
			e.Resource, _ = url.PathUnescape(resp.Header.Get(HeaderResource)) // "" when it does not decode
		}
		e.Token, _ = fence.ParseToken(pb.Token)
		cur := resp.Header.Get(HeaderCurrentToken)
		if cur == "" {
			cur = pb.CurrentToken
		}
		e.Current, _ = fence.ParseToken(cur)
		return e
	}
	detail := pb.Detail
	if detail == "" {
		detail = pb.Title
	}
	return &RefusedError{Status: resp.StatusCode, Reason: reason, Detail: detail, Code: pb.S3Code}
}

// AsStale reports whether err is, or wraps, a stale-token refusal. It finds a
// *StaleError (as returned by CheckResponse, or put in the error chain of an
// SDK call by S3Fencing/StackFencing), and otherwise digs through
// aws-sdk-go-v2/smithy-go response errors (*smithyhttp.ResponseError, which
// *awshttp.ResponseError wraps) for a 409 with "Fencing-Refused: stale": the
// SDK has consumed that body, so Current comes from Fencing-Current-Token,
// Resource from Fencing-Resource, and Token from the request's
// X-Fencing-Token header when it is known.
func AsStale(err error) (*StaleError, bool) {
	var se *StaleError
	if errors.As(err, &se) {
		return se, true
	}
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil || re.Response.Response == nil {
		return nil, false
	}
	resp := re.Response.Response
	if resp.StatusCode != http.StatusConflict || resp.Header.Get(HeaderRefused) != ReasonStale {
		return nil, false
	}
	se = refusal(resp, wire.Problem{}).(*StaleError)
	if resp.Request != nil {
		se.Token, _ = fence.ParseToken(resp.Request.Header.Get(DefaultHeader))
	}
	return se, true
}
