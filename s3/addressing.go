package s3

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
)

// ErrHost: in S3 mode, a request whose Host is neither one of the proxy's
// S3 domains (path style) nor a bucket below one (virtual-hosted style). The
// proxy does not guess which object such a request names (400).
var ErrHost = errors.New("the Host names no S3 endpoint of this proxy")

// Addressing maps S3 requests in path style (Host is a domain, the bucket
// is the path's first segment) and virtual-hosted style (Host is
// {bucket}.{domain}) to one path, /{bucket}/{key}, so that an object has
// one resource key whichever style reaches it.
type Addressing struct {
	domains []string // lower case, longest first
	// The domains that are host names, when virtual-hosted style is on. An
	// IP address has no virtual-hosted buckets: no store reads
	// {bucket}.{address} so, and one that reads it as path style would write
	// another object than the one fenced.
	names         []string
	virtualHosted bool
}

// NewAddressing returns the addressing of domains (FENCEPROXY_S3_DOMAINS:
// host names or IP addresses, no port), with virtual-hosted style
// ({bucket}.{domain}) when virtualHosted is set (S3_VIRTUAL_HOSTED), else
// path style only. Errors name the first bad domain.
func NewAddressing(domains []string, virtualHosted bool) (Addressing, error) {
	a := Addressing{virtualHosted: virtualHosted}
	for _, d := range domains {
		if err := CheckDomain(d); err != nil {
			return Addressing{}, fmt.Errorf("%q: %w", d, err)
		}
		a.domains = append(a.domains, strings.ToLower(d))
		if net.ParseIP(d) == nil && virtualHosted {
			a.names = append(a.names, strings.ToLower(d))
		}
	}
	// The longest domain first: with localhost and s3.localhost,
	// demo.s3.localhost is bucket demo below s3.localhost.
	longestFirst := func(x, y string) int { return len(y) - len(x) }
	slices.SortStableFunc(a.domains, longestFirst)
	slices.SortStableFunc(a.names, longestFirst)
	return a, nil
}

// CheckDomain reports whether d can be an S3 domain of the proxy: a host
// name (letters, digits, '-' and '.', no empty label) or an IP address,
// without a port.
func CheckDomain(d string) error {
	if net.ParseIP(d) != nil {
		return nil
	}
	if d == "" || len(d) > 253 {
		return errors.New("not a host name")
	}
	for label := range strings.SplitSeq(d, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return errors.New("not a host name (empty, long or hyphen-edged label)")
		}
		for i := 0; i < len(label); i++ {
			c := label[i] | 0x20
			if !(c >= 'a' && c <= 'z' || label[i] >= '0' && label[i] <= '9' || label[i] == '-') {
				return fmt.Errorf("not a host name (byte %q); give it without scheme or port", label[i])
			}
		}
	}
	return nil
}

// Path returns the path of the object or bucket a request names, bucket
// first and still percent-encoded as rawPath is: rawPath itself in path
// style, /{bucket}{rawPath} in virtual-hosted style. A bucket alone is
// /{bucket} in both (path style's /{bucket}/ and virtual-hosted style's /
// included). host is the request's Host, with or without a port, in any
// case. ErrHost for any other host ({bucket}.{address} below an IP address
// included), a virtual-hosted bucket that is not a valid S3 bucket name, or
// one holding ".{domain}" for any of the domains.
func (a Addressing) Path(host, rawPath string) (string, error) {
	h := strings.ToLower(host)
	if strings.IndexByte(h, ':') >= 0 { // a Host without a port would cost SplitHostPort's error, per request
		if hp, _, err := net.SplitHostPort(h); err == nil {
			h = hp
		}
	}
	h = strings.TrimSuffix(strings.Trim(h, "[]"), ".") // an IPv6 literal; a fully qualified name
	for _, d := range a.domains {
		if h == d { // path style
			if i := strings.IndexByte(rawPath[min(1, len(rawPath)):], '/'); i >= 0 && i+2 == len(rawPath) {
				return rawPath[:i+1], nil // /{bucket}/ is the bucket
			}
			return rawPath, nil
		}
	}
	for _, d := range a.names {
		if bucket, ok := strings.CutSuffix(h, "."+d); ok {
			if err := checkBucket(bucket); err != nil {
				return "", fmt.Errorf("%w: %q: virtual-hosted bucket %q: %v", ErrHost, host, bucket, err)
			}
			// A store that takes the bucket up to the first ".{domain}"
			// (versitygw --virtual-domain) would read another bucket.
			for _, other := range a.domains {
				if strings.Contains(bucket, "."+other) {
					return "", fmt.Errorf("%w: virtual-hosted bucket %q holds %q, so a store could read the bucket as the part before it; use path style",
						ErrHost, bucket, "."+other)
				}
			}
			if rawPath == "/" {
				return "/" + bucket, nil
			}
			return "/" + bucket + rawPath, nil
		}
	}
	if !a.virtualHosted {
		return "", fmt.Errorf("%w: %q is not one of FENCEPROXY_S3_DOMAINS %q (virtual-hosted style {bucket}.{domain} is off: FENCEPROXY_S3_VIRTUAL_HOSTED=false)", ErrHost, host, a.domains)
	}
	return "", fmt.Errorf("%w: %q is neither one of FENCEPROXY_S3_DOMAINS %q nor {bucket}.{domain} below a host name among them", ErrHost, host, a.domains)
}

// checkBucket checks an S3 bucket name as virtual-hosted style spells it:
// 3 to 63 bytes of lower-case letters, digits, '.' and '-', starting and
// ending with a letter or digit.
func checkBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return errors.New("a bucket name has 3 to 63 characters")
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return fmt.Errorf("byte %q is not allowed in a bucket name", c)
		}
	}
	if first, last := b[0], b[len(b)-1]; first == '.' || first == '-' || last == '.' || last == '-' {
		return errors.New("a bucket name starts and ends with a letter or digit")
	}
	return nil
}
