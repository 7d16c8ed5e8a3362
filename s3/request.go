package s3

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/fenceproxy/fenceproxy/fence"
)

// ErrAmbiguous: the proxy and a store, or two stores, could read the request
// as another operation or on other objects than the ones the proxy would
// fence or grant (an encoded "/" in the bucket, a routing header given twice,
// a "?" inside x-amz-copy-source, ...). No client sends such a spelling; the
// proxy refuses it, reads too, and forwards nothing (400 ambiguous).
var ErrAmbiguous = errors.New("the request could be read as another operation or object than the one fenced")

// Request is one S3 request as the store reads it, decided once by Classify:
// the operation, the bucket, the object it names, the objects it changes
// besides (a rename's source) or reads from (a copy's source), its part in a
// multipart upload and, for a listing, its prefix. Every later step reads
// this value: the resources fenced, the gateway's grants, the upload records
// and the audit metadata.
type Request struct {
	Op     Operation // the catalogue's row
	Bucket string    // "" for a request to no bucket (ListBuckets)
	// Key is the object key as the path spells it, decoded: what the store
	// is asked for ("" for the bucket itself). It may hold runs of "/" or
	// end in "/".
	Key string
	// Object is Key's alias class (ObjectName): the name under which the
	// object is fenced and granted. "" exactly when Key is.
	Object string
	// Source is x-amz-copy-source (CopyObject, UploadPartCopy): read. nil
	// without one.
	Source *ObjectRef
	// Renamed are the readings of x-amz-rename-source (RenameObject), whose
	// object is deleted: a key of the request's bucket (SeaweedFS reads it
	// so first), and {bucket}/{key}. nil without one.
	Renamed   []ObjectRef
	Multipart Multipart
	UploadID  string // the upload of a Complete or an Abort
	// Listing: a GET of the bucket whose parameters are all a listing's
	// (ListObjects, ListObjectsV2, ListObjectVersions, ListMultipartUploads),
	// below Prefix (decoded).
	Listing bool
	Prefix  string
}

// ObjectRef is an object named by a header: a bucket, a key as decoded and its
// alias class, and a version.
type ObjectRef struct {
	Bucket, Key, Object string
	VersionID           string
}

// Changes returns the objects the request writes, deletes or changes whose
// names its path and headers give: the path's object for an object write,
// and a rename's source. A key ending in "/" (a directory marker) changes
// one more: SeaweedFS stores more than 1 KiB written to "a/b/" as the object
// "a/b/b". A DeleteObjects names its keys in the body (DeleteKeys); a
// bucket-level operation changes no object.
func (r Request) Changes() []ObjectRef {
	var out []ObjectRef
	add := func(o ObjectRef) {
		out = append(out, o)
		if extra := markerData(o.Key, o.Object); extra != "" {
			out = append(out, ObjectRef{Bucket: o.Bucket, Key: extra, Object: extra})
		}
	}
	if r.Op.Writes == Object {
		add(ObjectRef{Bucket: r.Bucket, Key: r.Key, Object: r.Object})
	}
	for _, o := range r.Renamed {
		add(o)
	}
	return out
}

// MarkerData returns the other object a write to key may change when key is
// a directory marker (it ends in "/" or "\"): the alias class followed by
// its last segment ("a/b/" -> "a/b/b"), where SeaweedFS stores the data of
// a marker over 1 KiB; "" for any other key. A DeleteObjects's keys need it
// too.
func MarkerData(key string) string { return markerData(key, ObjectName(key)) }

func markerData(key, object string) string {
	if key == "" || object == "" || (key[len(key)-1] != '/' && key[len(key)-1] != '\\') || !protected("marker-data") {
		return ""
	}
	return object + "/" + object[strings.LastIndexByte(object, '/')+1:]
}

// ObjectName returns the alias class of an object key, the one name under
// which the proxy fences and grants every spelling that some store reads as
// that object: a "\" is a "/" (SeaweedFS splits keys on both), runs of "/"
// are one "/" (stores on a file system, versitygw's HTTP server and SeaweedFS
// merge them), and a leading or trailing "/" goes (a store on a file system
// opens "o/" as "o"). Two keys that one strict store keeps apart may so share
// one fence, which refuses more, never less.
func ObjectName(key string) string {
	if strings.IndexByte(key, '\\') >= 0 && protected("backslash") {
		key = strings.ReplaceAll(key, "\\", "/")
	}
	for len(key) > 0 && key[0] == '/' {
		key = key[1:]
	}
	for len(key) > 0 && key[len(key)-1] == '/' && protected("trailing-slash") {
		key = key[:len(key)-1]
	}
	if !strings.Contains(key, "//") {
		return key
	}
	var b strings.Builder
	b.Grow(len(key))
	for i := 0; i < len(key); i++ {
		if key[i] != '/' || key[i-1] != '/' {
			b.WriteByte(key[i])
		}
	}
	return b.String()
}

// Classify reads an S3 request as the store will: the Host and the path
// through the addressing, the path decoded before the bucket is split from
// the key, the query's sub-resources, and the headers that select an
// operation or an object, each of which must come once. rawPath is the
// target's path as received, still percent-encoded; ignored reports query
// parameters the store does not read (the fencing token's; nil: none).
//
// Errors wrap ErrHost (a Host the addressing does not map), ErrAmbiguous (a
// spelling the proxy and a store could read differently: an encoded byte in
// the bucket, an empty first segment, a key that names the bucket to some
// stores and an object to others, a raw ";" or "#" or a bad escape or a
// repeated parameter in the query, a method-override header, a routing
// header given twice or under a name with "_", an x-amz-copy-source or
// x-amz-rename-source that stores parse differently) or fence.ErrBadResource
// (a byte no bucket name has, a "." or ".." bucket, a key that does not
// decode or holds a control byte, a write to no bucket).
func (a Addressing) Classify(r *http.Request, rawPath string, ignored func(name string) bool) (Request, error) {
	if err := checkHeaders(r.Header); err != nil {
		return Request{}, err
	}
	path, err := a.Path(r.Host, rawPath)
	if err != nil {
		return Request{}, err
	}
	var req Request
	rawBucket, rawKey, hasKey := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if rawBucket == "" && hasKey {
		return Request{}, fmt.Errorf("%w: the path %q starts with an empty segment, which some stores merge away and others read as no bucket", ErrAmbiguous, rawPath)
	}
	if rawBucket != "" {
		if err := checkBucketSegment(rawBucket); err != nil {
			return Request{}, err
		}
		req.Bucket = rawBucket
	}
	if hasKey {
		key, err := url.PathUnescape(rawKey)
		if err != nil {
			return Request{}, fmt.Errorf("%w: the key does not unescape: %v", fence.ErrBadResource, err)
		}
		if err := fence.Prefix(key); err != nil { // control bytes: no store reads them alike
			return Request{}, err
		}
		req.Key, req.Object = key, ObjectName(key)
		if req.Object == "" {
			return Request{}, fmt.Errorf("%w: the path %q names the bucket to some stores and an object %q to others", ErrAmbiguous, rawPath, key)
		}
	}
	q, err := parseQuery(r.URL.RawQuery, ignored)
	if err != nil {
		return Request{}, err
	}
	if svc := signedService(r.Header, q); svc != "" && svc != "s3" {
		// SeaweedFS serves S3 Tables (s3tables) and IAM on its S3 port: a
		// request signed for another service runs another API.
		return Request{}, fmt.Errorf("%w: signed for service %q, not s3: the store may run another API on it", ErrAmbiguous, svc)
	}
	req.Op = lookup(r.Method, req.Bucket == "", req.Key == "", q)
	if req.Op.Writes == Objects && multipartBody(r.Header) {
		return Request{}, fmt.Errorf("%w: a DeleteObjects with a multipart body: a store that routes form uploads by their Content-Type reads it as one", ErrAmbiguous)
	}
	if req.Bucket == "" && req.Op.Writes != Nothing {
		return Request{}, fmt.Errorf("%w: %s to no bucket", fence.ErrBadResource, r.Method)
	}
	if v, ok := r.Header["X-Amz-Copy-Source"]; ok {
		src, err := ParseCopySource(v[0])
		if err != nil {
			return Request{}, err
		}
		req.Source = &src
	}
	if v, ok := r.Header["X-Amz-Rename-Source"]; ok {
		if req.Renamed, err = renameSources(req.Bucket, v[0]); err != nil {
			return Request{}, err
		}
	}
	if err := checkStoreState(req); err != nil {
		return Request{}, err
	}
	if extracts(r, q) {
		return Request{}, fmt.Errorf("%w: the store would extract the archive (extract, X-Seaweedfs-Extract, x-amz-meta-snowball-*), writing objects its members name", ErrInBody)
	}
	if r.Method == http.MethodPost && req.Key != "" && multipartBody(r.Header) && req.Op.Writes == Object {
		// SeaweedFS routes a form POST by its Content-Type alone, to an
		// object's path too: it writes the form's key.
		req.Op = formToObject
	}
	if req.Key != "" {
		req.Multipart, req.UploadID = multipartOf(r.Method, q)
	}
	if req.Key == "" && req.Bucket != "" && req.Op.Writes == Nothing && r.Method == http.MethodGet {
		req.Listing, req.Prefix = listing(q)
	}
	return req, nil
}

// routingHeaders are the headers besides x-amz-* (other than metadata) that
// decide what a store does with a request: each may come once.
var routingHeaders = map[string]bool{
	"Authorization": true, "Content-Type": true, "Content-Length": true, "Content-Encoding": true,
	"Content-Md5": true, "Transfer-Encoding": true, "Expect": true, "X-Forwarded-Host": true,
}

// methodOverrides are the headers some HTTP frameworks read as the method.
var methodOverrides = map[string]bool{"X-Http-Method-Override": true, "X-Http-Method": true, "X-Method-Override": true}

// routing reports a canonical header name that selects an operation or an
// object: routingHeaders and x-amz-* but x-amz-meta-*.
func routing(name string) bool {
	if routingHeaders[name] {
		return true
	}
	return len(name) > 6 && name[:6] == "X-Amz-" && !strings.HasPrefix(name, "X-Amz-Meta-")
}

// checkHeaders refuses headers a store could read otherwise than the proxy
// (ErrAmbiguous): a method override, a routing header given twice (Go reads
// the first, some stores the last), or given under a name with "_" for "-"
// (servers that map "_" to "-" read it as the header itself).
func checkHeaders(h http.Header) error {
	for name, v := range h {
		switch {
		case methodOverrides[name]:
			return fmt.Errorf("%w: %s: S3 stores run the request line's method only, and some frameworks another one", ErrAmbiguous, name)
		case len(v) > 1 && routing(name):
			return fmt.Errorf("%w: %s given %d times (stores differ in which one they read)", ErrAmbiguous, name, len(v))
		case strings.IndexByte(name, '_') >= 0:
			if alias := http.CanonicalHeaderKey(strings.ReplaceAll(name, "_", "-")); routing(alias) || methodOverrides[alias] {
				return fmt.Errorf("%w: header %q is %s to servers that read \"_\" as \"-\"", ErrAmbiguous, name, alias)
			}
		}
	}
	return nil
}

// checkBucketSegment checks the bucket as the path spells it: letters,
// digits, '.', '-' and '_' (legacy names), not "." or "..". An encoded byte
// ("%2F") is refused: one store decodes the path before it splits the
// bucket from the key (versitygw reads /bkt%2Fobj as object obj of bucket
// bkt), another splits first.
func checkBucketSegment(b string) error {
	if b == "." || b == ".." {
		return fmt.Errorf("%w: dot segment %q as the bucket", fence.ErrBadResource, b)
	}
	if len(b) > 255 {
		return fmt.Errorf("%w: a bucket name of %d bytes", fence.ErrBadResource, len(b))
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '_':
		case c == '%' && !protected("encoded-slash"):
		case c == '%':
			return fmt.Errorf("%w: an encoded byte in the bucket %q: stores differ on whether they decode it before splitting the bucket from the key", ErrAmbiguous, b)
		default:
			return fmt.Errorf("%w: byte %q is in no bucket name", fence.ErrBadResource, c)
		}
	}
	return nil
}

// param is one decoded query parameter.
type param struct{ name, value string }

// query is a request's parameters, decoded, in order, without the ignored ones.
type query []param

// has reports a parameter named name, in any case (S3 is case-sensitive;
// some stores are not).
func (q query) has(name string) bool {
	for _, p := range q {
		if strings.EqualFold(p.name, name) {
			return true
		}
	}
	return false
}

// get returns the value of the parameter spelt name exactly.
func (q query) get(name string) (string, bool) {
	for _, p := range q {
		if p.name == name {
			return p.value, true
		}
	}
	return "", false
}

// parseQuery decodes a raw query as stores do, refusing what they read
// differently (ErrAmbiguous): a raw "#" (some cut the query there) or ";"
// (some split on it), an escape that does not decode, or a parameter given
// twice, or twice in different cases (stores differ in which they read).
// Parameters ignored reports are left out; the proxy reads those itself.
func parseQuery(raw string, ignored func(string) bool) (query, error) {
	if raw == "" {
		return nil, nil
	}
	if i := strings.IndexAny(raw, "#;"); i >= 0 {
		return nil, fmt.Errorf("%w: raw %q in the query: some stores cut or split the query there (send %%23, %%3B)", ErrAmbiguous, raw[i])
	}
	var q query
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			return nil, fmt.Errorf("%w: query parameter %.40q does not unescape", ErrAmbiguous, k)
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			return nil, fmt.Errorf("%w: the value of query parameter %.40q does not unescape", ErrAmbiguous, name)
		}
		if ignored != nil && ignored(name) {
			continue
		}
		if q.has(name) {
			return nil, fmt.Errorf("%w: query parameter %.40q given twice", ErrAmbiguous, name)
		}
		if known := knownParam(name); known != "" && known != name {
			return nil, fmt.Errorf("%w: query parameter %.40q is %s in another case: stores differ in whether they match it", ErrAmbiguous, name, known)
		}
		q = append(q, param{name, value})
	}
	return q, nil
}

// knownParams are the parameters that select an S3 operation or that a
// store reads (sub-resources, listing and multipart parameters), as S3
// spells them.
var knownParams = func() []string {
	names := []string{"delete", "uploads", "uploadId", "partNumber", "versionId", "versions", "x-id", "location",
		"policyStatus", "id", "extract", "select", "select-type", "restore", "torrent", "attributes"}
	names = append(names, bucketConfigs...)
	names = append(names, objectSubresources...)
	for n := range listParams {
		names = append(names, n)
	}
	return names
}()

// knownParam returns the known parameter that name spells in any case, ""
// for none.
func knownParam(name string) string {
	for _, k := range knownParams {
		if len(k) == len(name) && strings.EqualFold(k, name) {
			return k
		}
	}
	return ""
}

// signedService returns the service of the request's SigV4 credential scope
// (Authorization's Credential, or a presigned URL's X-Amz-Credential), "" if
// it has none.
func signedService(h http.Header, q query) string {
	cred := ""
	if a := h.Get("Authorization"); a != "" {
		if _, after, ok := strings.Cut(a, "Credential="); ok {
			cred, _, _ = strings.Cut(after, ",")
		}
	}
	for _, p := range q {
		if strings.EqualFold(p.name, "X-Amz-Credential") {
			cred = p.value
		}
	}
	// {key}/{date}/{region}/{service}/aws4_request
	cred = strings.TrimSpace(cred)
	i := strings.LastIndexByte(cred, '/')
	if i < 0 {
		return ""
	}
	cred = cred[:i]
	return cred[strings.LastIndexByte(cred, '/')+1:]
}

// ParseCopySource reads an x-amz-copy-source (or x-amz-rename-source) value,
// [/]{bucket}/{key}[?versionId={id}] with bucket and key URL-encoded, as every
// store reads it, or refuses it (ErrAmbiguous): stores differ in whether they
// cut the version at the first raw "?" or at "?versionId=" after decoding
// the whole value, and in whether "+" is a space, so a raw "?" must start
// exactly one versionId, and no "+", encoded "?versionId=" or bad escape may
// appear (an encoded "?" elsewhere is a key byte to all).
// The bucket must be a bucket name and the key not empty.
func ParseCopySource(v string) (ObjectRef, error) {
	bad := func(why string) (ObjectRef, error) {
		return ObjectRef{}, fmt.Errorf("%w: x-amz-copy-source %.80q: %s", ErrAmbiguous, v, why)
	}
	src, version, hasVersion := strings.Cut(strings.TrimPrefix(v, "/"), "?")
	var o ObjectRef
	if hasVersion {
		id, ok := strings.CutPrefix(version, "versionId=")
		if !ok || id == "" || strings.ContainsAny(id, "?&#=+%") {
			return bad("a raw \"?\" starts anything but one versionId")
		}
		o.VersionID = id
	}
	if strings.IndexByte(src, '+') >= 0 {
		return bad("a raw \"+\" (a space to some stores): send %2B")
	}
	decoded, err := url.PathUnescape(src)
	if err != nil {
		return bad("it does not unescape")
	}
	if strings.Contains(decoded, "?versionId=") {
		return bad("an encoded \"?versionId=\" in the bucket or key (versitygw decodes the whole value before it cuts the version there, SeaweedFS cuts at a raw \"?\" only)")
	}
	bucket, key, ok := strings.Cut(decoded, "/")
	if !ok || key == "" {
		return bad("not {bucket}/{key}")
	}
	for i := 0; i < len(bucket); i++ {
		if c := bucket[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return bad("not a bucket name")
		}
	}
	if fence.Prefix(key) != nil {
		return bad("a control byte in the key, or a key too long")
	}
	o.Bucket, o.Key, o.Object = bucket, key, ObjectName(key)
	if bucket == "" || bucket == "." || bucket == ".." || o.Object == "" {
		return bad("not {bucket}/{key}")
	}
	return o, nil
}

// ErrInBody: a write whose objects are named in its body (a form upload, an
// archive the store extracts), which the fence cannot see (400 unsupported).
var ErrInBody = errors.New("the write names its objects in its body")

// formToObject is a form upload sent to an object's path.
var formToObject = Operation{Name: "PostObject sent to an object's path (a form upload to SeaweedFS)", Method: http.MethodPost, Writes: Form}

// multipartBody reports a Content-Type of a multipart body, as a form upload
// has.
func multipartBody(h http.Header) bool {
	ct := strings.TrimSpace(h.Get("Content-Type"))
	return len(ct) >= 10 && strings.EqualFold(ct[:10], "multipart/")
}

// extracts reports a write that asks the store to extract an archive into
// objects: SeaweedFS's ?extract and X-Seaweedfs-Extract, and the
// x-amz-meta-snowball-* headers of AWS Snowball that SeaweedFS and MinIO
// honour.
func extracts(r *http.Request, q query) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return false
	}
	if q.has("extract") {
		return true
	}
	for name := range r.Header {
		if name == "X-Seaweedfs-Extract" || containsFold(name, "snowball") {
			return true
		}
	}
	return false
}

// containsFold reports whether s holds sub (lower-case ASCII) in any case.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// storeSegment reports a key segment under which a store keeps its own state:
// versitygw's multipart staging (.sgwtmp, first in the bucket), SeaweedFS's
// (.uploads) and its object versions ({key}.versions). A write under one
// changes another object's upload or versions.
func storeSegment(seg string) bool {
	return seg == ".sgwtmp" || seg == ".uploads" || seg == ".versions" || strings.HasSuffix(seg, ".versions")
}

// checkStoreState refuses an object, a copy's or a rename's source that lies
// under a store's own state (fence.ErrBadResource).
func checkStoreState(req Request) error {
	if err := CheckStoreState(req.Object); err != nil {
		return err
	}
	for _, o := range req.Renamed {
		if err := CheckStoreState(o.Object); err != nil {
			return err
		}
	}
	return nil
}

// CheckStoreState refuses an object name (an alias class) with a segment
// under which a store keeps its own state (fence.ErrBadResource).
func CheckStoreState(object string) error {
	if !strings.Contains(object, ".") {
		return nil
	}
	for seg := range strings.SplitSeq(object, "/") {
		if storeSegment(seg) {
			return fmt.Errorf("%w: segment %q: stores keep their own state under it (multipart uploads, versions)", fence.ErrBadResource, seg)
		}
	}
	return nil
}

// renameSources returns the readings of an x-amz-rename-source value for a
// rename into bucket: the whole value as a key of bucket (SeaweedFS's first
// reading), and {bucket}/{key} when it has a "/" after a bucket name. Each
// must parse as a copy source does (ErrAmbiguous).
func renameSources(bucket, v string) ([]ObjectRef, error) {
	whole, err := ParseCopySource(bucket + "/" + strings.TrimPrefix(v, "/"))
	if err != nil || whole.VersionID != "" {
		return nil, fmt.Errorf("%w: x-amz-rename-source %.80q is not a key, nor /{bucket}/{key}", ErrAmbiguous, v)
	}
	out := []ObjectRef{whole}
	if qualified, err := ParseCopySource(v); err == nil && qualified != whole {
		out = append(out, qualified)
	}
	return out, nil
}

// listParams are the parameters of the bucket listings: a GET of a bucket
// with no other parameter is a listing.
var listParams = map[string]bool{
	"list-type": true, "prefix": true, "delimiter": true, "max-keys": true, "continuation-token": true,
	"start-after": true, "fetch-owner": true, "encoding-type": true, "marker": true, "uploads": true,
	"key-marker": true, "upload-id-marker": true, "versions": true, "version-id-marker": true, "x-id": true,
	"max-uploads": true, "optional-object-attributes": true,
}

// listing reports a GET of a bucket whose parameters are all a listing's or
// a presigned URL's, and its prefix.
func listing(q query) (bool, string) {
	for _, p := range q {
		if !listParams[p.name] && !presignParam(p.name) {
			return false, ""
		}
	}
	prefix, _ := q.get("prefix")
	return true, prefix
}

// presignParam reports a query parameter of presigned-URL authentication.
func presignParam(name string) bool {
	return len(name) > 6 && strings.EqualFold(name[:6], "X-Amz-")
}
