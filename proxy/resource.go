package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/wire"
)

// ErrHopByHop: a Connection header names a header the fence relies on, or the
// request asks for a protocol upgrade whose later bytes would skip the fence (400).
var ErrHopByHop = errors.New("hop-by-hop header would bypass the fence")

// ErrFormUpload: an S3 browser upload (POST Object: a multipart form POSTed to
// a bucket) names its key in the body; it is refused like a bulk delete (400).
var ErrFormUpload = fmt.Errorf("%w: S3 POST Object (form upload) names its key in the body; upload with PUT", errUnsupported)

// ErrUnsupported: S3 multi-object delete (POST /{bucket}?delete) names its keys
// in the body, where the fence cannot see them; it is refused, whatever the
// token, rather than forwarded unfenced (400). Delete objects one by one.
var ErrUnsupported = fmt.Errorf("%w: S3 multi-object delete (POST ?delete) names its keys in the body; delete the objects one by one", errUnsupported)

// errUnsupported is the class of writes the fence cannot see the target of.
var errUnsupported = errors.New("write cannot be fenced")

// errBucketWrite: in S3 mode, a write to a bucket's configuration while
// FENCEPROXY_S3_BUCKET_WRITES is refuse (400 unsupported).
var errBucketWrite = fmt.Errorf("%w: a bucket configuration write", errUnsupported)

// errBodyKeys: in S3 mode, a DeleteObjects whose keys resolve reads from the
// body (deleteResources) before the write is admitted.
var errBodyKeys = errors.New("S3 multi-object delete: the keys are in the body")

// checkTarget accepts origin-form request targets ("/path"), and "*" for
// OPTIONS. Absolute-form ("http://host/path") is for forward proxies and
// authority-form for CONNECT tunnels: fenceproxy is neither, and would
// otherwise forward them to its upstream under another Host. fence.ErrBadResource.
func checkTarget(r *http.Request) error {
	switch uri := r.RequestURI; {
	case strings.HasPrefix(uri, "/"): // also every HTTP/2 request but CONNECT
		return nil
	case uri == "*" && r.Method == http.MethodOptions:
		return nil
	case uri == "*":
		return fmt.Errorf("%w: the target * is only for OPTIONS", fence.ErrBadResource)
	default:
		return fmt.Errorf("%w: target %.64q is not a path; fenceproxy is a reverse proxy, not a forward proxy or tunnel: send the path only", fence.ErrBadResource, uri)
	}
}

// rawPath returns the path of the request target exactly as received.
func rawPath(r *http.Request) string {
	uri := r.RequestURI
	if !strings.HasPrefix(uri, "/") {
		return r.URL.EscapedPath()
	}
	if i := strings.IndexByte(uri, '?'); i >= 0 {
		uri = uri[:i]
	}
	return uri
}

func (p *Proxy) checkHopByHop(r *http.Request) error {
	if len(r.Header.Values("Upgrade")) > 0 {
		return fmt.Errorf("%w: protocol upgrades are not forwarded", ErrHopByHop)
	}
	for _, v := range r.Header.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.TrimSpace(name)
			if strings.EqualFold(name, p.opts.TokenHeader) || strings.EqualFold(name, wire.HeaderSignature) ||
				strings.EqualFold(name, "Host") || strings.EqualFold(name, "Destination") || isMethodOverride(name) {
				return fmt.Errorf("%w: Connection names %s", ErrHopByHop, name)
			}
			// In S3 gateway mode a header named here would be dropped after
			// the worker's signature over it was verified, and the proxy
			// would sign the rest: a copy turned into an empty PutObject.
			if p.opts.S3 == "resign" && name != "" && !strings.EqualFold(name, "close") && !strings.EqualFold(name, "keep-alive") {
				return fmt.Errorf("%w: Connection names %.60q; in S3 gateway mode it may hold only close or keep-alive", ErrHopByHop, name)
			}
		}
	}
	return nil
}

// fencedField reports a header field the fence reads: the token, its
// signature, the prefix it is for, Host, Destination and the method-override headers.
func (p *Proxy) fencedField(name string) bool {
	name = http.CanonicalHeaderKey(name)
	return name == p.tokenHeader || name == wire.HeaderSignature || name == wire.HeaderPrefix || name == "Host" || name == "Destination" || isMethodOverride(name)
}

func isMethodOverride(name string) bool {
	return slices.Contains(wire.MethodOverrideHeaders, http.CanonicalHeaderKey(name))
}

// methods returns the request line's method and every method an override
// header asks for (upper-cased: frameworks compare them so).
func methods(r *http.Request) []string {
	ms := []string{r.Method}
	for _, h := range wire.MethodOverrideHeaders {
		for _, v := range r.Header[h] {
			for m := range strings.SplitSeq(v, ",") {
				ms = append(ms, strings.ToUpper(strings.TrimSpace(m)))
			}
		}
	}
	return ms
}

func hasMethodOverride(r *http.Request) bool {
	for _, h := range wire.MethodOverrideHeaders {
		if _, ok := r.Header[h]; ok {
			return true
		}
	}
	return false
}

// unfencedRequest reports whether every method the request may run as (its
// own and any override header's) is unfenced: a GET asking the backend to
// DELETE is fenced like the DELETE.
func (p *Proxy) unfencedRequest(r *http.Request) bool {
	if !hasMethodOverride(r) {
		return p.unfenced[r.Method] // the common case, without allocating
	}
	for _, m := range methods(r) {
		if !p.unfenced[m] {
			return false
		}
	}
	return true
}

// resources returns the resource keys a fenced write touches: in S3 mode
// those of the objects it changes (s3.Request.Changes: the path's object, a
// rename's source) or of its bucket for a bucket write, else its path's as
// received; and for a WebDAV COPY or MOVE also its Destination's; in plain
// mode a key P/ brings its alias P too (fence.Resolver.Alias).
// fence.ErrBadResource for a target the fence cannot name; ErrUnsupported and
// ErrFormUpload for writes whose keys are in the body, errBodyKeys in S3 mode
// for a DeleteObjects, whose keys deleteResources reads.
func (p *Proxy) resources(ex *exchange) ([]string, error) {
	r := ex.r
	var keys []string
	if p.s3 == nil {
		key, err := p.resolver.Target(ex.path)
		if err != nil {
			return nil, err
		}
		keys = []string{key}
		if alias := p.resolver.Alias(key); alias != "" {
			keys = append(keys, alias)
		}
		posts := r.Method == http.MethodPost || (hasMethodOverride(r) && slices.Contains(methods(r), http.MethodPost))
		switch s3.InBody(posts, r.URL.RawQuery, r.Header, key) {
		case s3.BulkDelete:
			return keys, ErrUnsupported
		case s3.FormUpload:
			return keys, ErrFormUpload
		}
	} else {
		// The bytes backends read otherwise than as a path byte ("\\", raw
		// ";", control bytes): refused in S3 mode too.
		if err := p.resolver.CheckTarget(ex.path); err != nil {
			return nil, err
		}
		req := ex.s3
		switch req.Op.Writes {
		case s3.Objects:
			return []string{req.Bucket}, errBodyKeys
		case s3.Form:
			return []string{req.Bucket}, ErrFormUpload
		case s3.NewBucket, s3.BucketConfig:
			key, err := p.resolver.Key("/" + req.Bucket)
			if err != nil {
				return nil, err
			}
			keys = []string{key}
		}
		if req.Op.Writes == s3.Object && req.Renamed == nil && s3.MarkerData(req.Key) == "" {
			// The common write, one object: its path as sent when that
			// spells the alias class (no allocation for the key's path).
			key, err := p.resolver.Key(p.objectPath(ex.path, req.Bucket, req.Object))
			if err != nil {
				return nil, err
			}
			keys = []string{key}
		} else {
			for _, o := range req.Changes() {
				key, err := p.resolver.Key("/" + o.Bucket + "/" + o.Object)
				if err != nil {
					return keys, err
				}
				keys = append(keys, key)
			}
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("%w: %s %s changes no object the fence can name", fence.ErrBadResource, r.Method, req.Op.Name)
		}
	}
	for _, dest := range r.Header.Values("Destination") {
		u, err := url.Parse(dest)
		if err != nil || !strings.HasPrefix(u.Path, "/") {
			// RFC 4918 10.3: an absolute URI or an absolute path; a backend
			// would resolve a relative one against a path the fence cannot know.
			return keys, fmt.Errorf("%w: Destination %q is not an absolute URL or absolute path", fence.ErrBadResource, dest)
		}
		// Check the header as sent: url.Parse re-escapes "\\", which other
		// parsers read as "/".
		if err := p.resolver.CheckTarget(dest); err != nil {
			return keys, fmt.Errorf("Destination: %w", err)
		}
		dk, err := p.resolver.Key(u.Path)
		if err != nil {
			return keys, fmt.Errorf("Destination: %w", err)
		}
		keys = append(keys, dk)
		if alias := p.resolver.Alias(dk); alias != "" {
			keys = append(keys, alias)
		}
	}
	return keys, nil
}

// objectPath returns /{bucket}/{object}: the request's raw path itself when
// it spells exactly that (path style, nothing encoded, the key its own alias
// class), else a new string.
func (p *Proxy) objectPath(raw, bucket, object string) string {
	if len(raw) == 2+len(bucket)+len(object) && raw[0] == '/' && raw[1:1+len(bucket)] == bucket &&
		raw[1+len(bucket)] == '/' && raw[2+len(bucket):] == object {
		return raw
	}
	return "/" + bucket + "/" + object
}

// deleteResources reads the body of an S3 DeleteObjects (S3 mode: POST
// /{bucket}?delete), at most s3.MaxDeleteBody bytes and s3.MaxDeleteKeys
// keys, and returns the resources of its keys, {bucket}/{key} with the key
// in its alias class (s3.ObjectName) as for a PUT of the key (a directory
// marker's data object too, s3.MarkerData), sorted and without duplicates. The body is then r's again, byte for byte
// (Content-MD5 and x-amz-checksum-* stay valid). s3.ErrMalformedDelete for a
// body too large or not a Delete of 1 to 1,000 keys; fence.ErrBadResource for
// a key the resolver refuses; s3.ErrAmbiguous for a key that names the
// bucket to some stores ("/"); errBadBody when the body cannot be read;
// errUnsupported for a ?delete POST to an object. Nothing is forwarded on an
// error.
func (p *Proxy) deleteResources(ex *exchange) ([]string, error) {
	if ex.deleteKeys != nil { // read already (gateway mode checks the keys' grants first)
		return ex.deleteRes, nil
	}
	r := ex.r
	if ex.s3.Key != "" {
		return nil, fmt.Errorf("%w: S3 multi-object delete (POST ?delete) is sent to a bucket, not to an object", errUnsupported)
	}
	if r.ContentLength > s3.MaxDeleteBody {
		return nil, fmt.Errorf("%w: the body is %d bytes, more than %d", s3.ErrMalformedDelete, r.ContentLength, s3.MaxDeleteBody)
	}
	var body []byte
	if r.Body != nil {
		// Read as a forwarded body is, with the upload idle timeout and
		// minimum rate: it holds an upload slot while it comes.
		var in clientBody
		var b uploadBody
		in.init(r)
		b.init(ex.w, r, &in, new(fence.Upload), p.opts.UploadIdleTimeout, p.opts.UploadMinRate, p.opts.UploadRateWindow)
		var err error
		body, err = io.ReadAll(io.LimitReader(&b, s3.MaxDeleteBody+1))
		switch {
		case err == errUploadIdle || err == errUploadSlow:
			return nil, err
		case err != nil:
			return nil, fmt.Errorf("%w: reading the DeleteObjects body: %w", errBadBody, err)
		}
		if len(body) > s3.MaxDeleteBody {
			return nil, fmt.Errorf("%w: the body is more than %d bytes", s3.ErrMalformedDelete, s3.MaxDeleteBody)
		}
		r.Body = io.NopCloser(bytes.NewReader(body)) // the original is the server's to close
	}
	keys, err := s3.DeleteKeys(body)
	if err != nil {
		return nil, err
	}
	resources := make([]string, 0, len(keys))
	for _, k := range keys {
		o := s3.ObjectName(k)
		if o == "" {
			return nil, fmt.Errorf("%w: DeleteObjects key %.64q names the bucket to some stores", s3.ErrAmbiguous, k)
		}
		if err := fence.Prefix(k); err != nil { // no control bytes, as in a path
			return nil, fmt.Errorf("key %.64q: %w", k, err)
		}
		if err := s3.CheckStoreState(o); err != nil {
			return nil, fmt.Errorf("key %.64q: %w", k, err)
		}
		for _, name := range []string{o, s3.MarkerData(k)} {
			if name == "" {
				continue
			}
			res, err := p.resolver.Key("/" + ex.s3.Bucket + "/" + name)
			if err != nil {
				return nil, fmt.Errorf("key %.64q: %w", k, err)
			}
			resources = append(resources, res)
		}
	}
	slices.Sort(resources)
	ex.deleteKeys, ex.deleteRes = keys, slices.Compact(resources)
	return ex.deleteRes, nil
}
