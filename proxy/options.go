package proxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Settings are a Proxy's plain values. Field names are those of the
// FENCEPROXY_* variables (package config), whose defaults are the only ones:
// New checks the values and fills in none.
type Settings struct {
	Upstream        *url.URL // backend base URL; a path in it is joined in front of the inbound path
	TokenHeader     string   // header carrying the token (TOKEN_HEADER)
	UnfencedMethods []string // methods passed unchecked, case-sensitive (UNFENCED_METHODS)
	ResourceDepth   int      // 0: the whole path is the resource; N: its first N segments
	AllowPathParams bool     // a raw ';' in a write's path passes (fence.Resolver.PathParams); false: 400
	// S3 is "off" (a generic backend: the resource is the request path),
	// "pass" (the backend speaks S3: the resource is {bucket}/{key}, in path
	// or virtual-hosted style below S3Domains; any other Host is refused
	// with 400), or "resign" (gateway mode: pass's reading, with
	// Options.Gateway verifying and re-signing). "" is off.
	S3        string
	S3Domains []string // the host names workers use for the proxy (S3_DOMAINS)
	// S3VirtualHosted maps a Host {bucket}.{domain} to the bucket
	// (S3_VIRTUAL_HOSTED); false: path style only, such a Host is refused.
	S3VirtualHosted bool
	// S3BucketWrites is what S3 mode does with a write to a bucket's
	// configuration (s3.BucketConfig): "refuse" (400 unsupported; "" too),
	// "pass" (forwarded unfenced) or "fence" (fenced on the bucket's name).
	// CreateBucket passes unfenced unless it is "fence".
	S3BucketWrites string
	// S3UploadRecordTTL is how long a multipart upload's record is kept when
	// no Complete or Abort through the proxy removes it
	// (S3_UPLOAD_RECORD_TTL); above 0 when Options.MultipartRecords is set.
	S3UploadRecordTTL time.Duration
	RequireToken      bool // false: fenced methods without a token are forwarded unchecked
	// Mode is "enforce" or "observe": observe logs and counts what would be
	// refused but forwards everything, for rolling fenceproxy out. Maxima are
	// still raised.
	Mode string

	DialTimeout       time.Duration // upstream connect; past it 502
	ResponseTimeout   time.Duration // upstream response headers after the request was sent; past it 504
	UploadIdleTimeout time.Duration // longest pause between body bytes of any request (fenced or not); past it 408
	UpstreamFastPath  bool          // small plain-HTTP requests through package upstream's fast path
	UpstreamUnsentMax int           // bytes the kernel holds unsent per backend connection (upstream.Options.UnsentMax); 0: the system's

	// UploadMinRate, with UploadRateWindow, is the slowest any request's
	// body, fenced or not, may arrive (bytes/s, UPLOAD_MIN_RATE): every
	// UploadRateWindow of time spent waiting for the client's body must
	// bring UploadMinRate × UploadRateWindow bytes, or the upload is cut
	// off before its end (408). Time the backend takes to read is not
	// counted. 0: no minimum.
	UploadMinRate    int64
	UploadRateWindow time.Duration // above 0 when UploadMinRate is
	// MaxUploads bounds the requests with a body in flight (MAX_UPLOADS):
	// one more is refused with 503 overloaded and Retry-After before
	// anything of it is forwarded or any maximum touched. 0: no bound.
	MaxUploads int
	// AccessLog writes one record per request to Options.Logger at info,
	// with the attribute log=access, once the request's handling ended
	// (ACCESS_LOG; its fields are accessLog's). Nothing is written while
	// Logger is not enabled at info. false: none, and no cost.
	AccessLog bool
}

// Options configures a Proxy: its Settings, and what it is given besides:
// stores, hooks, where logs and metrics go. Every field but Settings may be
// nil; each says what nil means.
type Options struct {
	Settings

	// MultipartRecords, in S3 mode, remembers which fencing token created
	// each multipart upload, so that the upload's holder can still abort it
	// after a takeover (an abort applies no data). nil: an abort is fenced
	// as any object write, and a holder that lost its resource leaves its
	// upload.
	MultipartRecords MultipartRecords
	// Gateway, required with S3 "resign" (gateway mode), verifies every
	// request's SigV4 signature and its key's grants before anything else,
	// and signs every forwarded request with the store's credentials. nil:
	// no gateway (New refuses S3 "resign" without one).
	Gateway S3Gateway
	// UpstreamCAs are the roots for an https upstream. nil: the system roots.
	UpstreamCAs *x509.CertPool

	Logger  *slog.Logger // nil: discard
	Metrics *Metrics     // nil: none
	// Tracer, when set, traces every request on the proxy listener: a
	// server span each, its parent the client's W3C trace context, ended
	// with the access log's fields, and a client span around the call to
	// the backend, whose traceparent the backend gets (trace.go). nil: no
	// tracing, and no cost.
	Tracer trace.Tracer

	// Authenticate, when set, runs for every request before it is admitted
	// or forwarded: for a fenced write once its token and resources are
	// known, for any other request with resources nil and token 0. An error
	// refuses the request with 403: reason signature when it wraps
	// ErrSignature (SignedTokens), forbidden otherwise. nil: no check beyond
	// the fence itself.
	Authenticate func(r *http.Request, resources []string, token uint64) error
	// Transport sends requests to the backend. nil: package upstream's
	// client, built from the timeouts, UpstreamCAs and UpstreamFastPath.
	Transport http.RoundTripper

	// Owner, in cluster mode, decides where the barrier of a fenced write's
	// resources runs. It is called once the write is resolved and
	// authenticated, before the barrier and before its body is read (but a
	// DeleteObjects's, whose keys are its resources). It returns this
	// replica's Ownership, or one with Forward set (another replica owns the
	// resources: the request goes to it whole), or an error: the write is
	// refused, with 503 shard_unavailable when it wraps ErrShardUnavailable.
	// nil: this process owns every resource (one process).
	Owner func(r *http.Request, resources []string) (Ownership, error)
}

// Ownership is what Options.Owner grants one fenced write.
type Ownership struct {
	// Forward, when set, sends the request whole to the replica that owns
	// its resources and writes that replica's answer; the other fields are
	// then unused.
	Forward http.Handler
	// Context bounds the upstream exchange instead of the client's context
	// (which a forwarded write never follows): cancelled when the ownership
	// ends. nil: none.
	Context context.Context
	// Valid reports whether the ownership still holds. It is checked before
	// every read of the body and before its last bytes are handed over, so
	// that a replica that stalled past its validity never completes an
	// upload. nil: always.
	Valid func() bool
	// ValidUntil returns when the ownership's validity ends as it stands
	// now (a renewal moves it later; the zero time: no end). The upstream
	// exchange must end by then: the fast path makes it its connection's
	// deadline when it writes the request (upstream.WithValidUntil), the
	// Transport path follows Context. nil: no bound but Context.
	ValidUntil func() time.Time
	// Done is called once when the write is over: refused, or forwarded and
	// answered or abandoned. nil: none.
	Done func()
}

// ErrShardUnavailable is wrapped by Options.Owner's errors when no replica
// may admit the write now (503 shard_unavailable, with Retry-After).
var ErrShardUnavailable = errors.New("no replica may admit writes of this resource's shard now")

// errOwnershipEnded: this replica's ownership of the write's shard ended
// (its validity passed, the shard was lost) while the body was still
// being sent; it was cut off before its end (503 shard_unavailable).
var errOwnershipEnded = fmt.Errorf("%w: this replica's ownership of the shard ended while the body was being sent; the upload was cut off", ErrShardUnavailable)
