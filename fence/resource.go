package fence

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"
)

// ErrBadResource: the request target names no resource, or names it in a way
// backends disagree on (dot segments, "\\"), so it cannot be fenced (400).
var ErrBadResource = errors.New("request path names no fenceable resource")

// MaxResourceKey is the longest resource key in bytes (S3 keys are at most
// 1,024 bytes; the store's keys at most about 64 KiB).
const MaxResourceKey = 4096

// Resolver maps request targets to resource keys. It is the one place that
// decides what a resource is: the proxy resolves write targets with it, and
// the control API the keys that lease and fence URLs name, with the same
// rules. A resource key is the percent-decoded path without its leading
// slash, cut to its first Depth segments when Depth > 0.
type Resolver struct {
	// Depth is FENCEPROXY_RESOURCE_DEPTH: 0 keeps the whole path; N keeps its
	// first N segments (2: /bkt/part-0/obj is the resource bkt/part-0).
	Depth int
	// PathParams is FENCEPROXY_ALLOW_PATH_PARAMS. False (the default): a raw
	// ";" in a write's target is refused, since servlet containers (Tomcat,
	// Jetty, Spring) strip ";params" and read "..;" as "..", so /c/obj;x=1 and
	// /b/..;/c/obj would reach /c/obj under other keys. True: ";" is a key
	// byte like any other, for backends that do not strip path parameters.
	// Encoded "%3B" is a key byte either way (S3 SDKs encode ";").
	PathParams bool
	// MergeSlashes: a run of slashes in the decoded path is one slash, so
	// /bkt//obj and /bkt/%2Fobj are the resource of /bkt/obj, and a name
	// (Name) is read so too. Plain mode sets it: WebDAV servers
	// (golang.org/x/net/webdav cleans paths), nginx (merge_slashes) and
	// file-system stores merge them, so //w/part-7 deletes w/part-7. Two
	// keys that a strict backend keeps apart then share one fence, which
	// refuses more, never less. False: an empty segment counts (/bkt//x is
	// bkt/ with Depth 2); S3 mode maps spellings in package s3 instead.
	MergeSlashes bool
	// Names (S3 mode: s3.ResourceName) maps a decoded API name to the
	// resource key of the writes it names, before Name checks it, so that a
	// lease or fence spelt "bkt/a//" is the prefix fence "bkt/a/" the writes
	// below it meet rather than a fence no write resolves to. Its errors
	// wrap ErrBadResource. nil: a name must be a key as spelt.
	Names func(name string) (string, error)
}

// Target returns the resource key of a request target's path as received
// (still percent-encoded, without the query): CheckTarget, then Key of the
// decoded path. ErrBadResource when either refuses, or for a bad escape.
func (r Resolver) Target(raw string) (string, error) {
	if err := r.CheckTarget(raw); err != nil {
		return "", err
	}
	path, err := url.PathUnescape(raw) // returns raw itself when it has no '%'
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadResource, err)
	}
	return r.Key(path)
}

// CheckTarget is CheckRawPath for a write's target (its path, or a WebDAV
// Destination as sent), and refuses a raw ";" unless PathParams is set.
// ErrBadResource.
func (r Resolver) CheckTarget(raw string) error {
	if err := CheckRawPath(raw); err != nil {
		return err
	}
	if !r.PathParams && strings.IndexByte(raw, ';') >= 0 {
		return fmt.Errorf("%w: raw \";\" in the path: servlet backends read it as a path parameter, so the write could reach another key "+
			"(send \"%%3B\" for a \";\" in a key, or set FENCEPROXY_ALLOW_PATH_PARAMS=true for a backend that does not strip them)", ErrBadResource)
	}
	return nil
}

// Key maps a percent-decoded path (url.URL.Path) to its resource key: the
// path without its leading slash, cut to its first Depth segments when Depth
// > 0. So /bkt/part-0/obj%41 (decoded /bkt/part-0/objA) is bkt/part-0/objA,
// or bkt/part-0 with Depth 2. Two targets the backend treats as one object
// map to one key because the key is the decoded path. ErrBadResource for an
// empty path, a path that is not valid UTF-8, "." or ".." segments, and keys
// longer than MaxResourceKey bytes.
//
// Invalid UTF-8 is refused for the whole path, not only the key: backends
// that decode paths as UTF-8 replace each bad byte with U+FFFD, so /u/%FF
// and /u/%FE would be one object under two keys; and a key that is not
// UTF-8 could not be listed or named in the control API's JSON.
func (r Resolver) Key(path string) (string, error) {
	if r.MergeSlashes {
		path = mergeSlashes(path)
	}
	key := strings.TrimPrefix(path, "/")
	if key == "" {
		return "", fmt.Errorf("%w: the path is empty", ErrBadResource)
	}
	if !utf8.ValidString(key) {
		return "", fmt.Errorf("%w: the decoded path is not valid UTF-8", ErrBadResource)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "." || seg == ".." {
			return "", fmt.Errorf("%w: dot segment %q in the path", ErrBadResource, seg)
		}
	}
	if r.Depth > 0 {
		i, n := 0, 0
		for ; i < len(key); i++ {
			if key[i] == '/' {
				if n++; n == r.Depth {
					break
				}
			}
		}
		key = key[:i]
		if key == "" {
			return "", fmt.Errorf("%w: the path's first segment is empty", ErrBadResource)
		}
	}
	if len(key) > MaxResourceKey {
		return "", fmt.Errorf("%w: the resource key is %d bytes, more than %d", ErrBadResource, len(key), MaxResourceKey)
	}
	return key, nil
}

// Alias returns the second resource key a write to key must pass: with
// MergeSlashes (plain mode), P for a key P/ (not cut short by Depth), since
// golang.org/x/net/webdav, nginx and file-system stores open /P/ as /P, so a
// stale PUT, DELETE or MOVE of /w/part-7/ would change w/part-7. "" when
// key has none. P/ keeps its own key too: it names the collection and the
// prefix fence P/ (a raise of it fences what lies below).
func (r Resolver) Alias(key string) string {
	if !r.MergeSlashes || len(key) < 2 || key[len(key)-1] != '/' || !protected("slash-alias") {
		return ""
	}
	return key[:len(key)-1]
}

// Name returns the resource key that raw names: raw is the rest of an API
// URL's path after its prefix (/v1/fences/, /v1/leases/) as received, still
// percent-encoded. The bytes are checked as for Target; the decoded name is
// mapped through Names when set, and must then be a key some write can
// have: with Depth > 0, at most Depth segments (a longer name would be
// fenced, and fence nothing). ErrBadResource otherwise.
func (r Resolver) Name(raw string) (string, error) {
	if err := CheckRawPath(raw); err != nil {
		return "", err
	}
	name, err := url.PathUnescape(raw)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadResource, err)
	}
	if r.Names != nil {
		if name, err = r.Names(name); err != nil {
			return "", err
		}
	}
	if r.MergeSlashes {
		name = strings.TrimPrefix(mergeSlashes("/"+name), "/")
	}
	key, err := Resolver{}.Key("/" + name)
	if err != nil {
		return "", err
	}
	if key != name {
		return "", fmt.Errorf("%w: %q is not a resource key", ErrBadResource, name)
	}
	if r.Depth > 0 && strings.Count(key, "/") >= r.Depth {
		return "", fmt.Errorf("%w: %q has more than %d segments, so no write has it as its resource key (FENCEPROXY_RESOURCE_DEPTH %d: the resource of /%s is its first %d)",
			ErrBadResource, key, r.Depth, r.Depth, key, r.Depth)
	}
	return key, nil
}

// LeaseName is Name for a lease: with Depth > 0 the name must have exactly
// Depth segments, so the lease and the fence cover the same resource.
func (r Resolver) LeaseName(raw string) (string, error) {
	name, err := r.Name(raw)
	if err != nil {
		return "", err
	}
	if r.Depth > 0 && strings.Count(name, "/")+1 != r.Depth {
		return "", fmt.Errorf("%w: lease name %q must have exactly %d segments (FENCEPROXY_RESOURCE_DEPTH), so the lease and the fence cover the same resource",
			ErrBadResource, name, r.Depth)
	}
	return name, nil
}

// Prefix checks a decoded key prefix, as a listing takes it: at most
// MaxResourceKey bytes and no control bytes, which no key has.
// ErrBadResource otherwise.
func Prefix(p string) error {
	if len(p) > MaxResourceKey {
		return fmt.Errorf("%w: the prefix is %d bytes, more than %d", ErrBadResource, len(p), MaxResourceKey)
	}
	for i := 0; i < len(p); i++ {
		if p[i] < ' ' || p[i] == 0x7f {
			return fmt.Errorf("%w: control byte %q in the prefix", ErrBadResource, p[i])
		}
	}
	return nil
}

// CheckRawPath refuses a raw (still percent-encoded) path with bytes that
// backends read as something else than a path byte: raw "\\" (a slash to
// WHATWG URL parsers), raw "#" (a fragment), raw spaces, and control bytes raw
// or percent-encoded. Otherwise a stale write could reach an object under an
// alias the fence does not know. Encoded "%5C", "%23" and "%20" are ordinary
// key bytes (S3 keys may hold them) and pass. ErrBadResource.
func CheckRawPath(raw string) error {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c <= ' ' || c == 0x7f || c == '\\' || c == '#' {
			return fmt.Errorf("%w: byte %q is not allowed in a path", ErrBadResource, c)
		}
		if c == '%' && i+2 < len(raw) && (raw[i+1] == '0' || raw[i+1] == '1' || strings.EqualFold(raw[i+1:i+3], "7f")) {
			return fmt.Errorf("%w: encoded control byte %q in the path", ErrBadResource, raw[i:i+3])
		}
	}
	return nil
}

// mergeSlashes returns path with every run of slashes made one.
func mergeSlashes(path string) string {
	if !strings.Contains(path, "//") {
		return path
	}
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		if path[i] != '/' || i == 0 || path[i-1] != '/' {
			b.WriteByte(path[i])
		}
	}
	return b.String()
}
