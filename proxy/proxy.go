// Package proxy forwards HTTP requests to one backend and fences writes: a
// write reaches the backend only when its fencing token is not below the
// durable maximum of the resource it touches, and only after every write with
// a smaller token on that resource has finished upstream. The decisions are
// the fencing core's (package fence); this package is the HTTP around them.
// See the project brief and Kleppmann 2016, "How to do distributed locking".
//
// The request path, top to bottom, is serve in proxy.go: classify,
// resolve, authenticate, admit, rewrite and forward, finish; ServeHTTP
// wraps it with the request metrics and the access log (access.go). Beside it:
// resource.go (which resources a request touches), token.go, body.go (a
// body in flight), outbound.go (the request the backend gets), answer.go
// (refusals and upstream failures as answers), multipart.go (S3 multipart
// records), gateway.go and signature.go (who may write), h2.go, observe.go,
// options.go, metrics.go, trace.go (tracing's spans).
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/upstream"
	"github.com/fenceproxy/fenceproxy/wire"
)

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

	uploads    atomic.Int64 // requests with a body in ServeHTTP now (MaxUploads)
	overloadAt atomic.Int64 // unix nanoseconds of the last "MAX_UPLOADS reached" warning
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
	if opts.UploadMinRate < 0 || opts.MaxUploads < 0 {
		bad = append(bad, "UploadMinRate and MaxUploads must not be negative")
	}
	if opts.UploadMinRate > 0 && opts.UploadRateWindow <= 0 {
		bad = append(bad, "UploadRateWindow must be above 0 when UploadMinRate is")
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
	if opts.MultipartRecords != nil && opts.S3UploadRecordTTL <= 0 {
		bad = append(bad, "S3UploadRecordTTL must be above 0 when MultipartRecords is set")
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
		// Plain mode: backends merge runs of slashes (S3 mode reads keys in s3).
		resolver: fence.Resolver{Depth: opts.ResourceDepth, PathParams: opts.AllowPathParams, MergeSlashes: addressing == nil},
		unfenced: make(map[string]bool),
		observe:  opts.Mode == "observe",
		s3:       addressing,
		log:      opts.Logger,
	}
	if addressing != nil {
		p.resolver.Names = s3.ResourceName // X-Fencing-Prefix, as the lease API reads names
	}
	for _, m := range opts.UnfencedMethods {
		p.unfenced[m] = true
	}
	opts.Metrics.countUploads(&p.uploads)
	transport := opts.Transport
	if transport == nil {
		transport = upstream.New(opts.Upstream, upstream.Options{FastPath: opts.UpstreamFastPath,
			DialTimeout: opts.DialTimeout, ResponseTimeout: opts.ResponseTimeout, RootCAs: opts.UpstreamCAs,
			UnsentMax: opts.UpstreamUnsentMax})
	}
	if opts.Tracer != nil {
		// Inside the gateway's signing: the trace context goes on after it.
		transport = tracingTransport{next: transport, tracer: opts.Tracer}
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
				p.recordMultipart(ex, res)
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
	prefix    string   // the prefix fence its token is for (wire.HeaderPrefix); "" when none
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

	rw       responseWriter // w, once ServeHTTP wrapped it: what was sent
	decision decision       // what the proxy did with it, for the access log
	reason   string         // observe mode: the reason enforce mode would have refused for
	done     bool           // serve returned: the handler did not abort
	// forwarded: sent to the backend through ReverseProxy, whose answer
	// is what rw sent unless rw.failed.
	forwarded bool

	owner       context.Context  // cluster mode: Ownership.Context, nil otherwise
	ownValid    func() bool      // cluster mode: Ownership.Valid, nil otherwise
	ownUntil    func() time.Time // cluster mode: Ownership.ValidUntil, nil otherwise
	admitted    bool             // the barrier admitted the write: finish and the release run after forwarding
	collections bool             // the write may act on the collections its resources stand for (collectionWrite)
	up          fence.Upload     // the body as the barrier sees it
	in          clientBody       // r.Body's wrapper for the upstream client, when it has a body
	body        uploadBody       // in's wrapper when hasBody
	hasBody     bool             // the body is read through body (wrapBody): every forwarded request with one
	answered    bool             // upstreamError answered (or aborted) the client itself and logged it
	traced      bool             // wrote counts the copies sent (the write is replayable)
	wrote       atomic.Int32     // copies of the request written upstream, when traced
	// span is the request's server span (Options.Tracer), nil when
	// tracing is off; r's and client's context carry it.
	span trace.Span
}

// resource is the write's first resource, "" before resolve.
func (ex *exchange) resource() string {
	if len(ex.resources) == 0 {
		return ""
	}
	return ex.resources[0]
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

// stopReason is why the client's body ended before its end, nil if it did
// not: errUploadIdle, errUploadSlow, errUploadCut (an admitted write), else
// the error reading it.
func (ex *exchange) stopReason() error {
	if ex.hasBody {
		if why := ex.body.stopReason(); why != nil {
			return why
		}
	}
	return ex.in.readErr()
}

type exchangeKey struct{}

// exchangeOf returns the exchange of a forwarded request, nil for others.
func exchangeOf(r *http.Request) *exchange {
	ex, _ := r.Context().Value(exchangeKey{}).(*exchange)
	return ex
}

// ServeHTTP serves one request on the proxy listener (serve), then counts
// it in the request metrics and, with Settings.AccessLog, logs it, and with
// Options.Tracer ends its span (answered, also when the handler aborts the
// exchange).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ex := &exchange{r: r, client: r.Context()}
	ex.rw.ResponseWriter = w
	ex.w = &ex.rw
	if p.opts.Metrics == nil && !p.opts.AccessLog && p.opts.Tracer == nil {
		p.serve(ex)
		return
	}
	start := time.Now()
	if p.opts.Tracer != nil {
		p.startSpan(ex)
	}
	defer p.answered(ex, start) // runs when serve panics with http.ErrAbortHandler too
	p.serve(ex)
	ex.done = true
}

// serve is the request path: classify, resolve, authenticate, admit,
// rewrite and forward, finish. A step that refuses answers the client with a
// problem (wire.Problem, Fencing-Refused) and nothing is forwarded.
func (p *Proxy) serve(ex *exchange) {
	r := ex.r
	if len(r.TransferEncoding) > 0 {
		// net/http frames a request with both Transfer-Encoding and
		// Content-Length by the former and drops the latter, out of sight.
		// RFC 9112 section 6.3 then requires closing the connection, so that
		// bytes a front proxy counted as body are never read as a request.
		ex.w.Header().Set("Connection", "close")
	}
	if r.Method == "PRI" && r.RequestURI == "*" && r.ProtoMajor == 2 {
		p.priorKnowledge(ex)
		return
	}
	// 0. Uploads in flight: each holds descriptors, goroutines and buffers
	// for as long as its client takes. Past MaxUploads, refused before
	// anything is read, forwarded or raised.
	if hasBody(r) {
		n := p.uploads.Add(1)
		defer p.uploads.Add(-1)
		if p.opts.MaxUploads > 0 && n > int64(p.opts.MaxUploads) {
			p.overloaded(ex)
			return
		}
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
		ex.decision = decidedUnfenced
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
	ex.decision = decidedAdmitted
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

// resolve finds the resources a fenced write touches: its path's, and for a
// WebDAV COPY or MOVE also its Destination's (fence.ErrBadResource for a
// target the fence cannot name; errUnsupported for S3 writes whose keys are
// in the body). In S3 mode a DeleteObjects's resources are its keys', read
// from its body (deleteResources). A token error comes first, but the
// resources are still found for the logs, without reading a body.
func (p *Proxy) resolve(ex *exchange) error {
	resources, err := p.resources(ex)
	ex.resources = resources
	ex.collections = p.collectionWrite(ex.r)
	if ex.tokenErr != nil {
		return ex.tokenErr
	}
	if err == errBodyKeys {
		// S3 DeleteObjects: its keys, read from the body, are the resources.
		if resources, err = p.deleteResources(ex); err == nil {
			ex.resources = resources
		}
	}
	if err == nil {
		ex.prefix, err = p.tokenPrefix(ex)
	}
	return err
}

// collectionWrite reports whether a fenced write may act on the collections
// its resources stand for, so that each name R also stands for R + "/"
// (fence.Barrier.AdmitCollections): outside S3 mode, every method but PUT
// and PATCH, which change the one resource they name (RFC 4918 refuses a
// PUT to a collection). A WebDAV DELETE, MOVE or COPY acts on the whole
// tree, MKCOL and PROPPATCH on the collection itself, a POST may create a
// member, and a method the proxy does not know may do any of these. With
// a method-override header, any method asked for counts.
func (p *Proxy) collectionWrite(r *http.Request) bool {
	if p.s3 != nil {
		return false // an S3 write changes the objects it names
	}
	if !hasMethodOverride(r) {
		return r.Method != http.MethodPut && r.Method != http.MethodPatch
	}
	for _, m := range methods(r) {
		if m != http.MethodPut && m != http.MethodPatch {
			return true
		}
	}
	return false
}

// tokenPrefix reads wire.HeaderPrefix: once at most, a prefix fence's
// name (in S3 mode mapped as the lease API maps names) that covers every
// resource of the write (Barrier.Covers).
// fence.ErrBadResource otherwise.
func (p *Proxy) tokenPrefix(ex *exchange) (string, error) {
	values := ex.r.Header[wire.HeaderPrefix]
	switch {
	case len(values) == 0:
		return "", nil
	case len(values) > 1:
		return "", fmt.Errorf("%w: %s given %d times", fence.ErrBadResource, wire.HeaderPrefix, len(values))
	}
	prefix, err := fence.Resolver{Names: p.resolver.Names, MergeSlashes: p.resolver.MergeSlashes}.Name(values[0]) // a name as a lease URL spells it, never cut to RESOURCE_DEPTH
	if err != nil {
		return "", fmt.Errorf("%s: %w", wire.HeaderPrefix, err)
	}
	if err := p.barrier.CheckPrefix(prefix); err != nil {
		return "", fmt.Errorf("%s: %w", wire.HeaderPrefix, err)
	}
	for _, res := range ex.resources {
		if !p.barrier.Covers(prefix, res) { // in S3 mode the prefix's own name too: the directory marker
			return "", fmt.Errorf("%w: resource %q is not below the %s %q", fence.ErrBadResource, res, wire.HeaderPrefix, prefix)
		}
	}
	return prefix, nil
}

// authenticate runs Options.Authenticate, if set.
func (p *Proxy) authenticate(ex *exchange) error {
	if p.opts.Authenticate == nil {
		return nil
	}
	resources := ex.resources
	if ex.prefix != "" {
		// The write raises the prefix fence: its token must be the prefix's.
		resources = append(slices.Clip(resources), ex.prefix)
	}
	err := p.opts.Authenticate(ex.r, resources, ex.token)
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
		p.wrapBody(ex)
		ex.up.Interrupt = ex.body.interrupt // a cut wakes a read blocked on a stalled client
		if ex.ownValid != nil || ex.caller != nil {
			ex.body.valid = ex.valid
		}
	}
	if ex.prefix != "" {
		if err := p.barrier.RaiseAhead(r.Context(), ex.prefix, ex.token, ex.resources, ex.collections); err != nil {
			return nil, err
		}
	}
	if ex.collections {
		return p.barrier.AdmitCollections(r.Context(), ex.resources, ex.token, &ex.up)
	}
	return p.barrier.Admit(r.Context(), ex.resources, ex.token, &ex.up)
}

// wrapBody makes the upstream client read ex.r's body through ex.in and
// ex.body, with the upload idle timeout and minimum rate: a body holds an
// upload slot (MaxUploads) while it comes, whatever the request.
func (p *Proxy) wrapBody(ex *exchange) {
	ex.hasBody = true
	ex.in.init(ex.r)
	ex.body.init(ex.w, ex.r, &ex.in, &ex.up, p.opts.UploadIdleTimeout, p.opts.UploadMinRate, p.opts.UploadRateWindow)
}

// ErrOverloaded: MaxUploads requests with a body were in flight (503
// overloaded, Retry-After); nothing was forwarded.
var ErrOverloaded = errors.New("too many uploads in flight (FENCEPROXY_MAX_UPLOADS); nothing was forwarded, retry later")

// overloaded refuses an upload past MaxUploads: the refusal logged at
// debug, and a warning at most every overloadLogEvery.
func (p *Proxy) overloaded(ex *exchange) {
	now := time.Now().UnixNano()
	if last := p.overloadAt.Load(); now-last >= int64(overloadLogEvery) && p.overloadAt.CompareAndSwap(last, now) {
		p.log.LogAttrs(ex.client, slog.LevelWarn, "uploads in flight reached FENCEPROXY_MAX_UPLOADS; refusing more with 503 overloaded",
			slog.Int("max_uploads", p.opts.MaxUploads), slog.String("remote", ex.r.RemoteAddr))
	}
	p.opts.Metrics.Overloaded("uploads")
	p.refuse(ex, ErrOverloaded)
}

// overloadLogEvery spaces the warnings of MaxUploads reached.
const overloadLogEvery = 10 * time.Second

// forward sends the request upstream with ReverseProxy (which calls
// p.rewrite, and p.upstreamError on failure), with the exchange in its
// context and its body, if any, wrapped in ex.body (wrapBody: an admitted
// write's by admit). A bodyless request that went through no barrier goes
// as it came.
func (p *Proxy) forward(ex *exchange) {
	r := ex.r
	ex.forwarded = true
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
			if ex.span != nil {
				ctx = trace.ContextWithSpan(ctx, ex.span) // the backend's call in the request's trace
			}
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
	if !ex.hasBody && hasBody(r) {
		// Unfenced, observe mode, a creator's abort: no barrier cuts it, but
		// a trickling body would hold its upload slot for ever.
		p.wrapBody(ex)
		if ex.caller != nil {
			ex.in.valid = ex.caller.Valid
		}
	}
	if ex.hasBody {
		out.Body = &ex.body
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
	ex.decision = decidedToOwner
	if p.opts.AccessLog && hasBody(r) {
		// Counted on a copy of the request: net/http reads the type of
		// its own request's Body once the answer's header goes out.
		ex.in.init(r)
		r = r.WithContext(r.Context())
		r.Body = &ex.in
	}
	if ex.span != nil {
		var end func()
		r, end = p.toOwnerSpan(ex, r)
		defer end()
	}
	forward.ServeHTTP(ex.w, r)
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
