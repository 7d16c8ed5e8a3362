package proxy

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadResource: the request path names no resource, or names it in a way
// backends disagree on (dot segments), so it cannot be fenced (400).
var ErrBadResource = errors.New("request path names no fenceable resource")

// MaxResourceKey is the longest resource key in bytes (S3 keys are at most
// 1,024 bytes; the store's keys at most about 64 KiB).
const MaxResourceKey = 4096

// ResourceKey maps a percent-decoded request path (url.URL.Path) to its
// resource key: the path without its leading slash, cut to its first depth
// segments when depth > 0 (depth 0 keeps the whole path). So /bkt/part-0/obj%41
// is bkt/part-0/objA, or bkt/part-0 with depth 2. Two targets the backend
// treats as one object map to one key because the key is the decoded path.
// ErrBadResource for an empty path, "." or ".." segments, and keys longer
// than MaxResourceKey bytes.
func ResourceKey(path string, depth int) (string, error) {
	key := strings.TrimPrefix(path, "/")
	if key == "" {
		return "", fmt.Errorf("%w: the path is empty", ErrBadResource)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "." || seg == ".." {
			return "", fmt.Errorf("%w: dot segment %q in the path", ErrBadResource, seg)
		}
	}
	if depth > 0 {
		i, n := 0, 0
		for ; i < len(key); i++ {
			if key[i] == '/' {
				if n++; n == depth {
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
