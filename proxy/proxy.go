// Package proxy forwards HTTP requests to one backend and fences writes: a
// write reaches the backend only when its fencing token is not below the
// durable maximum of the resource it touches, and only after every write with
// a smaller token on that resource has finished upstream. The decisions are
// the fencing core's (package fence); this package is the HTTP around them.
// See the project brief and Kleppmann 2016, "How to do distributed locking".
//
// The request path, top to bottom, is ServeHTTP: classify, resolve,
// authenticate, admit, rewrite and forward, finish.
package proxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/upstream"
	"github.com/fenceproxy/fenceproxy/wire"
)

// Options configures a Proxy. Field names are those of the FENCEPROXY_*
// variables (package config), whose defaults are the only ones: New checks
// the values and fills in none.
type Options struct {
	Upstream        *url.URL // backend base URL; a path in it is joined in front of the inbound path
	TokenHeader     string   // header carrying the token (TOKEN_HEADER)
	UnfencedMethods []string // methods passed unchecked, case-sensitive (UNFENCED_METHODS)
	ResourceDepth   int      // 0: the whole path is the resource; N: its first N segments
	AllowPathParams bool     // a raw ';' in a write's path passes (fence.Resolver.PathParams); false: 400
	// S3 is "off" (a generic backend: the resource is the request path) or
	// "pass" (the backend speaks S3: the resource is {bucket}/{key}, in path
	// or virtual-hosted style below S3Domains; any other Host is refused
	// with 400). "" is off.
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
	// Uploads, in S3 mode, remembers which fencing token created each
	// multipart upload, so that the upload's holder can still abort it after
	// a takeover (an abort applies no data). nil: an abort is fenced as any
	// object write, and a holder that lost its resource leaves its upload.
	Uploads UploadRecords
	// Gateway, required with S3 "resign" (gateway mode), verifies every
	// request's SigV4 signature and its key's grants before anything else,
	// and signs every forwarded request with the store's credentials.
	Gateway S3Gateway
	// S3UploadRecordTTL is how long an upload's record is kept when no
	// Complete or Abort through the proxy removes it (S3_UPLOAD_RECORD_TTL);
	// above 0 when Uploads is set.
	S3UploadRecordTTL time.Duration
	RequireToken      bool // false: fenced methods without a token are forwarded unchecked
	// Mode is "enforce" or "observe": observe logs and counts what would be
	// refused but forwards everything, for rolling fenceproxy out. Maxima are
	// still raised.
	Mode string

	DialTimeout       time.Duration  // upstream connect; past it 502
	ResponseTimeout   time.Duration  // upstream response headers after the request was sent; past it 504
	UploadIdleTimeout time.Duration  // longest pause between body bytes of a forwarded write; past it 408
	UpstreamFastPath  bool           // small plain-HTTP requests through package upstream's fast path
	UpstreamUnsentMax int            // bytes the kernel holds unsent per backend connection (upstream.Options.UnsentMax); 0: the system's
	UpstreamCAs       *x509.CertPool // roots for an https upstream; nil: the system roots

	Logger  *slog.Logger // nil: discard
	Metrics *Metrics     // nil: none

	// Authenticate, when set, runs for every request before it is admitted
	// or forwarded: for a fenced write once its token and resources are
	// known, for any other request with resources nil and token 0. An error
	// refuses the request with 403: reason signature when it wraps
	// ErrSignature (SignedTokens), forbidden otherwise. nil: no check beyond
	// the fence itself.
	Authenticate func(r *http.Request, resources []string, token uint64) error
	// Rewrite, when set, runs after the proxy's own rewrite (which keeps Host,
	// path bytes, query and headers as the client sent them) and may change
	// the outbound request further, as httputil.ReverseProxy's Rewrite. nil:
	// the request goes out as the client sent it.
	Rewrite func(*httputil.ProxyRequest)
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

// ErrShardUnavailable is wrapped by Options.Owner's errors when no replica
// may admit the write now (503 shard_unavailable, with Retry-After).
var ErrShardUnavailable = errors.New("no replica may admit writes of this resource's shard now")

// errOwnershipEnded: this replica's ownership of the write's shard ended
// (its validity passed, the shard was lost) while the body was still
// being sent; it was cut off before its end (503 shard_unavailable).
var errOwnershipEnded = fmt.Errorf("%w: this replica's ownership of the shard ended while the body was being sent; the upload was cut off", ErrShardUnavailable)

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

// OptionsFrom returns the options that cfg sets, field for field; the rest
// (Uploads, Logger, Metrics, Authenticate, Rewrite, Transport, UpstreamCAs)
// stay nil.
func OptionsFrom(cfg config.Config) Options {
	return Options{
		Upstream:          cfg.Upstream,
		TokenHeader:       cfg.TokenHeader,
		UnfencedMethods:   cfg.UnfencedMethods,
		ResourceDepth:     cfg.ResourceDepth,
		AllowPathParams:   cfg.AllowPathParams,
		S3:                cfg.S3,
		S3Domains:         cfg.S3Domains,
		S3VirtualHosted:   cfg.S3VirtualHosted,
		S3BucketWrites:    cfg.S3BucketWrites,
		S3UploadRecordTTL: cfg.S3UploadRecordTTL,
		RequireToken:      cfg.RequireToken,
		Mode:              cfg.Mode,
		DialTimeout:       cfg.UpstreamDialTimeout,
		ResponseTimeout:   cfg.UpstreamResponseTimeout,
		UploadIdleTimeout: cfg.UploadIdleTimeout,
		UpstreamFastPath:  cfg.UpstreamFastPath,
		UpstreamUnsentMax: int(cfg.UpstreamUnsentMax),
	}
}

// Proxy is an http.Handler that fences writes through a fence.Barrier and
// forwards requests to the upstream with httputil.ReverseProxy.
type Proxy struct {
	opts        Options
	tokenHeader string // opts.TokenHeader, canonical: the key of http.Header
	barrier     *fence.Barrier
	resolver    fence.Resolver
	s3          *s3.Addressing // S3 mode's addressing; nil when off
	unfenced    map[string]bool
	observe     bool
	rp          *httputil.ReverseProxy
	log         *slog.Logger
}

// New returns a Proxy whose writes go through barrier. It fails, naming the
// field, when an option is out of range: Upstream not an absolute http(s)
// URL, an empty TokenHeader, a Mode other than enforce or observe, a timeout
// not above 0.
func New(barrier *fence.Barrier, opts Options) (*Proxy, error) {
	var bad []string
	if opts.Upstream == nil || (opts.Upstream.Scheme != "http" && opts.Upstream.Scheme != "https") || opts.Upstream.Host == "" {
		bad = append(bad, "Upstream must be an absolute http or https URL")
	}
	if opts.TokenHeader == "" {
		bad = append(bad, "TokenHeader is empty")
	}
	if opts.Mode != "enforce" && opts.Mode != "observe" {
		bad = append(bad, fmt.Sprintf("Mode %q is neither enforce nor observe", opts.Mode))
	}
	for name, d := range map[string]time.Duration{"DialTimeout": opts.DialTimeout, "ResponseTimeout": opts.ResponseTimeout,
		"UploadIdleTimeout": opts.UploadIdleTimeout} {
		if d <= 0 {
			bad = append(bad, name+" must be above 0")
		}
	}
	if opts.ResourceDepth < 0 {
		bad = append(bad, "ResourceDepth must not be negative")
	}
	var addressing *s3.Addressing
	switch opts.S3 {
	case "", "off":
	case "pass", "resign":
		if opts.S3 == "resign" && opts.Gateway == nil {
			bad = append(bad, "S3 resign (gateway mode) needs a Gateway")
		}
		a, err := s3.NewAddressing(opts.S3Domains, opts.S3VirtualHosted)
		switch {
		case err != nil:
			bad = append(bad, "S3Domains: "+err.Error())
		case len(opts.S3Domains) == 0:
			bad = append(bad, "S3Domains must name at least one host in S3 mode")
		}
		addressing = &a
	default:
		bad = append(bad, fmt.Sprintf("S3 %q is none of off, pass, resign", opts.S3))
	}
	switch opts.S3BucketWrites {
	case "", "refuse", "pass", "fence":
	default:
		bad = append(bad, fmt.Sprintf("S3BucketWrites %q is none of refuse, pass, fence", opts.S3BucketWrites))
	}
	if opts.Uploads != nil && opts.S3UploadRecordTTL <= 0 {
		bad = append(bad, "S3UploadRecordTTL must be above 0 when Uploads is set")
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("proxy: %s", strings.Join(bad, "; "))
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{
		opts:        opts,
		tokenHeader: http.CanonicalHeaderKey(opts.TokenHeader),
		barrier:     barrier,
		resolver:    fence.Resolver{Depth: opts.ResourceDepth, PathParams: opts.AllowPathParams},
		unfenced:    make(map[string]bool),
		observe:     opts.Mode == "observe",
		s3:          addressing,
		log:         opts.Logger,
	}
	for _, m := range opts.UnfencedMethods {
		p.unfenced[m] = true
	}
	transport := opts.Transport
	if transport == nil {
		transport = upstream.New(opts.Upstream, upstream.Options{FastPath: opts.UpstreamFastPath,
			DialTimeout: opts.DialTimeout, ResponseTimeout: opts.ResponseTimeout, RootCAs: opts.UpstreamCAs,
			UnsentMax: opts.UpstreamUnsentMax})
	}
	if opts.S3 == "resign" {
		transport = gatewayTransport{transport}
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:    p.rewrite,
		Transport:  transport,
		BufferPool: CopyBuffers,
		// A status net/http's server cannot send (WriteHeader panics below
		// 100) becomes a 502 instead of a dropped connection.
		ModifyResponse: func(res *http.Response) error {
			if res.StatusCode < 100 || res.StatusCode > 999 {
				return fmt.Errorf("backend answered with status %d", res.StatusCode)
			}
			if ex := exchangeOf(res.Request); ex != nil && ex.s3.Multipart != s3.NotMultipart {
				p.recordUpload(ex, res)
			}
			return nil
		},
		ErrorHandler: p.upstreamError,
		ErrorLog:     slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}
	return p, nil
}

// exchange is one request on its way through the proxy: what each step of
// ServeHTTP found, for the steps after it, the upstream error handler and
// the logs.
type exchange struct {
	w      http.ResponseWriter
	r      *http.Request
	client context.Context // the client's own context (a forwarded write's never ends early)

	fenced    bool     // a write the fence checks
	token     uint64   // valid when tokenErr is nil
	tokenErr  error    // fence.ErrTokenMissing, fence.ErrTokenMalformed
	tokenText string   // the token for logs and problem bodies; "" unless valid
	path      string   // the target's path as received, still percent-encoded
	resources []string // the resources a fenced write touches; [0] is its path's
	// s3 is the request as S3 mode reads it (s3.Addressing.Classify): the
	// one decision of what it does, which every later step reads.
	s3 s3.Request

	deleteKeys []string // S3 mode: a DeleteObjects's keys, as its body names them; nil until read
	deleteRes  []string // their resources, sorted, once deleteKeys is set
	caller     S3Caller // S3 gateway mode: the verified request's key
	// rawBody is the body as net/http reads it when S3Caller.PrepareBody
	// replaced r.Body (a signed stream decoded), for draining after a bad chunk.
	rawBody io.Reader
	keyID   string // S3 gateway mode: the verified access key id, for logs

	owner    context.Context  // cluster mode: Ownership.Context, nil otherwise
	ownValid func() bool      // cluster mode: Ownership.Valid, nil otherwise
	ownUntil func() time.Time // cluster mode: Ownership.ValidUntil, nil otherwise
	admitted bool             // the barrier admitted the write: finish and the release run after forwarding
	up       fence.Upload     // the body as the barrier sees it
	in       clientBody       // r.Body's wrapper for the upstream client, when it has a body
	body     uploadBody       // in's wrapper when hasBody
	hasBody  bool             // an admitted write with a body
	answered bool             // upstreamError answered (or aborted) the client itself and logged it
	traced   bool             // wrote counts the copies sent (the write is replayable)
	wrote    atomic.Int32     // copies of the request written upstream, when traced
}

// ownershipOver reports whether, in cluster mode, the write's ownership
// ended: its context cancelled or its validity passed.
func (ex *exchange) ownershipOver() bool {
	if ex.owner != nil && ex.owner.Err() != nil {
		return true
	}
	if ex.ownValid != nil && !ex.ownValid() {
		return true
	}
	return false
}

// valid reports why an admitted write's body may no longer be sent, nil
// while it may: this replica's ownership of its shard ended
// (errOwnershipEnded), or its gateway key was revoked (S3Caller.Valid).
func (ex *exchange) valid() error {
	if ex.ownValid != nil && !ex.ownValid() {
		return errOwnershipEnded
	}
	if ex.caller != nil {
		return ex.caller.Valid()
	}
	return nil
}

// resource is the write's first resource, "" before resolve.
func (ex *exchange) resource() string {
	if len(ex.resources) == 0 {
		return ""
	}
	return ex.resources[0]
}

type exchangeKey struct{}

// exchangeOf returns the exchange of a forwarded request, nil for others.
func exchangeOf(r *http.Request) *exchange {
	ex, _ := r.Context().Value(exchangeKey{}).(*exchange)
	return ex
}

// ServeHTTP is the request path: classify, resolve, authenticate, admit,
// rewrite and forward, finish. A step that refuses answers the client with a
// problem (wire.Problem, Fencing-Refused) and nothing is forwarded.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w = responseWriter{w}
	if len(r.TransferEncoding) > 0 {
		// net/http frames a request with both Transfer-Encoding and
		// Content-Length by the former and drops the latter, out of sight.
		// RFC 9112 section 6.3 then requires closing the connection, so that
		// bytes a front proxy counted as body are never read as a request.
		w.Header().Set("Connection", "close")
	}
	ex := &exchange{w: w, r: r, client: r.Context()}
	if r.Method == "PRI" && r.RequestURI == "*" && r.ProtoMajor == 2 {
		p.priorKnowledge(ex)
		return
	}

	// 1. Classify: a target the proxy forwards at all, no hop-by-hop header
	// hiding what the fence relies on, and whether the request is a fenced write.
	err := p.classify(ex)
	// S3 gateway mode: who signed it, and may its key do this? Reads too;
	// and before the bucket policy, so that a key learns nothing of it
	// that it may not do.
	if p.opts.S3 == "resign" && (err == nil || errors.Is(err, errBucketWrite)) {
		if gerr := p.gatewayCheck(ex); gerr != nil {
			err = gerr
		}
	}
	if err != nil {
		p.refuse(ex, err)
		return
	}
	if !ex.fenced {
		if err := p.authenticate(ex); err != nil {
			p.refuse(ex, err)
			return
		}
		p.opts.Metrics.decision("unfenced")
		defer p.opts.Metrics.forwarding(false)()
		p.forward(ex)
		return
	}

	// 2. Resolve the write's resources; 3. authenticate it.
	err = p.resolve(ex)
	if err == nil {
		err = p.authenticate(ex)
	}
	if p.observe {
		p.observeWrite(ex, err)
		return
	}

	// Cluster mode: the barrier of these resources runs in their shard's
	// owner, which may be another replica.
	if err == nil && p.opts.Owner != nil {
		var own Ownership
		if own, err = p.opts.Owner(ex.r, ex.resources); err == nil {
			if own.Forward != nil {
				p.toOwner(ex, own.Forward)
				return
			}
			if own.Done != nil {
				defer own.Done()
			}
			ex.owner = own.Context
			ex.ownValid = own.Valid
			ex.ownUntil = own.ValidUntil
		}
	}

	// An abort of a multipart upload by the token that created it applies no
	// data: it passes after a takeover, outside the barrier (S3 mode).
	if err == nil && ex.s3.Multipart == s3.AbortUpload && p.creatorAbort(ex) {
		p.forwardAbort(ex)
		return
	}

	// 4. Admit it through the barrier. The body stays unread until then: a
	// stale client that sent Expect: 100-continue never uploads.
	var release func()
	if err == nil {
		release, err = p.admit(ex)
		if err == nil && ex.caller != nil {
			// A gateway key removed while its write waited at the barrier
			// sends nothing (a write with a body would be cut at its first
			// read anyway; one without would go).
			if verr := ex.caller.Valid(); verr != nil {
				release()
				err = verr
			}
		}
	}
	if err != nil {
		p.refuse(ex, err)
		return
	}
	defer release()
	ex.admitted = true

	// 5. Rewrite (p.rewrite) and forward; 6. finish.
	p.opts.Metrics.decision("forwarded")
	defer p.opts.Metrics.forwarding(true)()
	defer p.finish(ex)
	p.forward(ex)
}

// classify refuses targets and headers that would let a request around the
// fence, for every method (fence.ErrBadResource, ErrHopByHop), and decides
// whether the request is a fenced write: a method (or a method-override
// header) outside UnfencedMethods, unless it carries no token and
// RequireToken is off. In S3 mode the request is read once, as the store
// will read it (s3.Addressing.Classify: s3.ErrAmbiguous, s3.ErrHost), and
// S3BucketWrites applied to what it does (bucketPolicy).
func (p *Proxy) classify(ex *exchange) error {
	r := ex.r
	// Read the token before ReverseProxy touches any header.
	ex.token, ex.tokenErr = p.readToken(r)
	if ex.tokenErr == nil {
		ex.tokenText = strconv.FormatUint(ex.token, 10)
	}
	if err := checkTarget(r); err != nil {
		return err
	}
	ex.path = rawPath(r)
	if err := p.checkHopByHop(r); err != nil {
		return err
	}
	if err := checkStreamLength(r); err != nil {
		return err
	}
	ex.fenced = !p.unfencedRequest(r) && !(errors.Is(ex.tokenErr, fence.ErrTokenMissing) && !p.opts.RequireToken)
	if p.s3 == nil || r.RequestURI == "*" {
		return nil
	}
	// Every request, reads too: the proxy forwards nothing it cannot read
	// as the store will, rather than guess which object it names.
	req, err := p.s3.Classify(r, ex.path, p.tokenParam)
	if err != nil {
		if errors.Is(err, s3.ErrHost) {
			err = fmt.Errorf("%w: %w", fence.ErrBadResource, err)
		}
		return err
	}
	ex.s3 = req
	return p.bucketPolicy(ex)
}

// bucketPolicy applies S3BucketWrites to what an S3 request does: a
// configuration write under refuse is refused (errBucketWrite), with a
// token or without, whatever UnfencedMethods say. A fenced write stays fenced
// (on the bucket's name) unless it is a read, a CreateBucket (it writes no
// object: a job that creates its bucket first must not raise the bucket's
// fence for the next job; fenced under fence) or a configuration write under
// pass.
func (p *Proxy) bucketPolicy(ex *exchange) error {
	op := ex.s3.Op
	switch {
	case op.Writes == s3.BucketConfig && p.opts.S3BucketWrites != "fence" && p.opts.S3BucketWrites != "pass":
		return fmt.Errorf("%w: %s %s is %s (lifecycle rules, policies and ACLs can delete or expose every object in the bucket), "+
			"refused by FENCEPROXY_S3_BUCKET_WRITES=refuse; set it to pass (unfenced) or fence (fenced on the bucket)",
			errBucketWrite, ex.r.Method, op.Name, op.Writes)
	case op.Writes == s3.Nothing && ex.s3.Key == "",
		op.Writes == s3.NewBucket && p.opts.S3BucketWrites != "fence",
		op.Writes == s3.BucketConfig && p.opts.S3BucketWrites == "pass":
		ex.fenced = false
	}
	return nil
}

// readToken reads the write's token from its header. In S3 mode a
// presigned URL carries it in the query instead, under the header's name
// (any case): read there when the header is absent; both present and
// different is fence.ErrTokenMalformed. Errors as fence.TokenFromValues.
func (p *Proxy) readToken(r *http.Request) (uint64, error) {
	values := r.Header[p.tokenHeader]
	if p.s3 == nil || r.URL.RawQuery == "" {
		return fence.TokenFromValues(values, p.tokenHeader)
	}
	query := queryValues(r.URL.RawQuery, p.opts.TokenHeader)
	switch {
	case len(query) == 0:
		return fence.TokenFromValues(values, p.tokenHeader)
	case len(values) == 0:
		return fence.TokenFromValues(query, p.opts.TokenHeader+" (query)")
	case !slices.Equal(values, query):
		return 0, fmt.Errorf("%w: the %s header and query parameter differ (%q, %q)", fence.ErrTokenMalformed, p.opts.TokenHeader, values, query)
	}
	return fence.TokenFromValues(values, p.tokenHeader)
}

// queryValues returns the values of the query parameter name (matched
// without regard to case) in a raw query, split on "&" only; a value that
// does not unescape is kept as sent, so that it fails as a token.
func queryValues(rawQuery, name string) []string {
	var out []string
	for part := range strings.SplitSeq(rawQuery, "&") {
		k, v, _ := strings.Cut(part, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		if !strings.EqualFold(k, name) {
			continue
		}
		if uv, err := url.QueryUnescape(v); err == nil {
			v = uv
		}
		out = append(out, v)
	}
	return out
}

// checkStreamLength refuses an HTTP/2 request whose content-length its
// stream contradicts before anything is forwarded (errBadBody; RFC 9113
// section 8.1.1 calls it malformed). net/http's HTTP/2 server hands such a
// request over with an empty body when the stream ended with its headers, and
// resets a stream whose DATA exceed a content-length of 0 only once they
// arrive, after an empty write could have been forwarded; so a stream that
// declares 0 and is still open is read to its end here first.
func checkStreamLength(r *http.Request) error {
	if r.ProtoMajor != 2 {
		return nil
	}
	cl, ok := r.Header["Content-Length"]
	if !ok {
		return nil
	}
	n, err := strconv.ParseUint(cl[0], 10, 63)
	if len(cl) != 1 || err != nil {
		return fmt.Errorf("%w: content-length %q", errBadBody, cl)
	}
	switch {
	case n > 0 && r.ContentLength != int64(n): // the server sets it only for a stream still open
		return fmt.Errorf("%w: content-length %d, but the stream ended with its headers", errBadBody, n)
	case n == 0 && r.Body != nil && r.Body != http.NoBody:
		var b [1]byte
		if _, err := io.ReadFull(r.Body, b[:]); err != io.EOF {
			return fmt.Errorf("%w: data on a stream whose content-length is 0", errBadBody)
		}
		r.Body = http.NoBody
	}
	return nil
}

// resolve finds the resources a fenced write touches: its path's, and for a
// WebDAV COPY or MOVE also its Destination's (fence.ErrBadResource for a
// target the fence cannot name; errUnsupported for S3 writes whose keys are
// in the body). In S3 mode a DeleteObjects's resources are its keys', read
// from its body (deleteResources). A token error comes first, but the
// resources are still found for the logs, without reading a body.
func (p *Proxy) resolve(ex *exchange) error {
	resources, err := p.resources(ex)
	ex.resources = resources
	if ex.tokenErr != nil {
		return ex.tokenErr
	}
	if err == errBodyKeys {
		// S3 DeleteObjects: its keys, read from the body, are the resources.
		if resources, err = p.deleteResources(ex); err == nil {
			ex.resources = resources
		}
	}
	return err
}

// authenticate runs Options.Authenticate, if set.
func (p *Proxy) authenticate(ex *exchange) error {
	if p.opts.Authenticate == nil {
		return nil
	}
	err := p.opts.Authenticate(ex.r, ex.resources, ex.token)
	if err != nil && !errors.Is(err, ErrSignature) {
		err = fmt.Errorf("%w: %w", ErrForbidden, err)
	}
	return err
}

// admit wraps the request body so the barrier can cut it off and knows when
// it is sent, and admits the write through the barrier.
func (p *Proxy) admit(ex *exchange) (release func(), err error) {
	r := ex.r
	if !hasBody(r) {
		ex.up.NoBody()
	} else {
		ex.hasBody = true
		ex.in.init(r)
		ex.body.init(ex.w, r, &ex.in, &ex.up, p.opts.UploadIdleTimeout)
		if ex.ownValid != nil || ex.caller != nil {
			ex.body.valid = ex.valid
		}
	}
	return p.barrier.Admit(r.Context(), ex.resources, ex.token, &ex.up)
}

// forward sends the request upstream with ReverseProxy (which calls
// p.rewrite, and p.upstreamError on failure), with the exchange in its
// context and its body wrapped: an admitted write's in ex.body, any other's
// in ex.in. A bodyless request that went through no barrier goes as it came.
func (p *Proxy) forward(ex *exchange) {
	r := ex.r
	if !ex.admitted && !hasBody(r) && ex.s3.Multipart == s3.NotMultipart && ex.caller == nil {
		// Nothing to watch: upstreamError answers from the request alone,
		// and the common read keeps its allocations.
		p.rp.ServeHTTP(ex.w, r)
		return
	}
	ctx := ex.client
	if ex.admitted {
		// Once forwarded, a write runs to the backend's answer even if its
		// client hangs up: the backend may already be applying it, and the
		// barrier must not open for a larger token before it is done. A
		// client gone mid-upload still ends the exchange, since its body can
		// no longer be read.
		ctx = context.WithoutCancel(ctx)
		if ex.owner != nil {
			ctx = ex.owner
		}
		if ex.ownUntil != nil {
			ctx = upstream.WithValidUntil(ctx, ex.ownUntil)
		}
		if replayable(r) {
			// net/http's Transport silently sends such a request again when a
			// reused connection fails after sending it; the first copy may
			// still be applied, so the write counts as abandoned.
			ex.traced = true
			ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { ex.wrote.Add(1) }})
		}
	}
	out := r.WithContext(context.WithValue(ctx, exchangeKey{}, ex))
	switch {
	case ex.hasBody:
		out.Body = &ex.body
	case hasBody(r):
		ex.in.init(r)
		if ex.caller != nil {
			ex.in.valid = ex.caller.Valid
		}
		out.Body = &ex.in
	}
	p.rp.ServeHTTP(ex.w, out)
}

// toOwner hands the write to the replica that owns its resources, with the
// body as the client sent it (a signed stream undecoded).
func (p *Proxy) toOwner(ex *exchange, forward http.Handler) {
	r := ex.r
	if ex.rawBody != nil {
		r.Body = io.NopCloser(ex.rawBody) // the original is the server's to close
	}
	p.opts.Metrics.decision("to_owner")
	forward.ServeHTTP(ex.w, r)
}

// hasBody reports a request body that may hold bytes.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// stopReason is why the client's body ended before its end, nil if it did
// not: errUploadCut or errUploadIdle for an admitted write, else the error
// reading it.
func (ex *exchange) stopReason() error {
	if ex.hasBody {
		if why := ex.body.stopReason(); why != nil {
			return why
		}
	}
	return ex.in.readErr()
}

// finish logs what the exchange leaves to tell: a write the upstream client
// sent twice (held for the abandon grace), a client gone before its answer.
// The barrier's release runs after it.
func (p *Proxy) finish(ex *exchange) {
	r := ex.r
	if ex.traced && ex.wrote.Load() > 1 && p.barrier.AbandonGrace() > 0 {
		ex.up.Abandon()
		p.log.LogAttrs(ex.client, slog.LevelWarn, "the upstream client sent the write twice; "+
			"larger tokens on its resource wait the abandon grace, as the backend may apply the first copy late",
			slog.String("resource", ex.resource()), slog.String("token", ex.tokenText), slog.String("method", r.Method),
			slog.String("target", logTarget(r)), slog.String("abandon_grace", p.barrier.AbandonGrace().String()))
	}
	if ex.client.Err() != nil && !ex.answered {
		p.log.LogAttrs(ex.client, slog.LevelInfo, "client went away before the answer",
			slog.Int("status", 499), slog.String("resource", ex.resource()), slog.String("token", ex.tokenText),
			slog.String("method", r.Method), slog.String("target", logTarget(r)))
	}
}

// forwardedHeaders are dropped by ReverseProxy when Rewrite is set; the client's
// own values are put back so the backend sees (and signatures cover) them unchanged.
var forwardedHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// rewrite makes the outbound request the inbound one, sent to the upstream:
// same Host, path bytes, query and headers. Then Options.Rewrite, if set.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.opts.Upstream)
	pr.Out.Host = pr.In.Host // SetURL would send the upstream's host; signatures cover the inbound one
	// ReverseProxy drops query parameters it cannot parse (";", bad escapes);
	// S3 signs the query as sent, so send it as sent.
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery
	for _, h := range forwardedHeaders {
		if v, ok := pr.In.Header[h]; ok {
			pr.Out.Header[h] = v
		}
	}
	// Send the path bytes as received. EscapedPath reproduces them unless the
	// client sent bytes Go would escape; then send them verbatim.
	want := strings.TrimSuffix(p.opts.Upstream.EscapedPath(), "/") + rawPath(pr.In)
	if pr.Out.URL.EscapedPath() != want && !strings.HasPrefix(want, "//") {
		pr.Out.URL.Opaque = want
	}
	p.rewriteTrailers(pr)
	if p.opts.Rewrite != nil {
		p.opts.Rewrite(pr)
	}
}

// rewriteTrailers gives the outbound request the trailers the client
// announced, whose values clientBody copies at the body's end: ReverseProxy's
// clone of the request has the names only, and net/http fills the inbound
// request's map after the clone was made. Fields the fence reads from the
// header section (the token, its signature, Host, Destination, a method
// override) are never sent as trailers: the token is only ever read from the
// header section, and a backend that merges trailers into headers must not
// see another value than the fence did.
func (p *Proxy) rewriteTrailers(pr *httputil.ProxyRequest) {
	pr.Out.Trailer = nil
	ex := exchangeOf(pr.In)
	if len(pr.In.Trailer) == 0 || ex == nil || ex.in.body == nil {
		return
	}
	t := make(http.Header, len(pr.In.Trailer))
	for k := range pr.In.Trailer {
		if !p.fencedField(k) {
			t[k] = nil
		}
	}
	if len(t) == 0 {
		return
	}
	pr.Out.Trailer, ex.in.trailer = t, t
	// HTTP/1.1 carries trailers in the chunked coding only; an HTTP/2
	// request may declare its length as well.
	pr.Out.ContentLength = -1
}

// fencedField reports a header field the fence reads: the token, its
// signature, Host, Destination and the method-override headers.
func (p *Proxy) fencedField(name string) bool {
	name = http.CanonicalHeaderKey(name)
	return name == p.tokenHeader || name == wire.HeaderSignature || name == "Host" || name == "Destination" || isMethodOverride(name)
}

// replayable mirrors net/http's rule for requests its Transport may send
// twice on its own: no body, and an idempotent method or an Idempotency-Key
// header (a fenced GET carries a method-override header).
func replayable(r *http.Request) bool {
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return len(r.Header["Idempotency-Key"]) > 0 || len(r.Header["X-Idempotency-Key"]) > 0
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
		current, _ := p.barrier.Max(ex.resource())
		pb, _ = p.problemFor(&fence.StaleError{Resource: ex.resource(), Token: ex.token, Current: current})
		pb.Detail = errUploadCut.Error() + "; the backend did not get it whole"
		pb.Token = ex.tokenText
		ex.w.Header().Set(wire.HeaderRefused, pb.Reason)
		ex.w.Header().Set(wire.HeaderCurrentToken, pb.CurrentToken)
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
	if why != errUploadCut && why != errUploadIdle && ex.rawBody != nil {
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

// responseWriter keeps the backend's response as it was: it drops the
// backend's "100 Continue", which ReverseProxy relays although net/http sends
// its own when the body is first read (a client should get one, not two), and
// it stops net/http from sniffing a Content-Type the backend did not send.
type responseWriter struct{ http.ResponseWriter }

func (w responseWriter) WriteHeader(code int) {
	if code == http.StatusContinue {
		return
	}
	if h := w.Header(); code >= 200 {
		if _, ok := h["Content-Type"]; !ok {
			h["Content-Type"] = nil // present but empty: net/http sends none and sniffs none
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// CopyBuffers lends ReverseProxy its 32 KiB body copy buffers: allocating
// one per request was the largest allocation of a small write (pprof). The
// cluster's forwarding to a shard's owner shares it.
var CopyBuffers httputil.BufferPool = &bufferPool{p: sync.Pool{New: func() any { return new([32 << 10]byte) }}}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte { return b.p.Get().(*[32 << 10]byte)[:] }
func (b *bufferPool) Put(s []byte) {
	if cap(s) >= 32<<10 {
		b.p.Put((*[32 << 10]byte)(s[:32<<10]))
	}
}

// dialError reports a failure to connect to the backend (upstream.DialError):
// nothing of the request was sent.
func dialError(err error) bool {
	var de *upstream.DialError
	return errors.As(err, &de)
}
