package s3

import (
	"fmt"
	"strings"

	"github.com/fenceproxy/fenceproxy/fence"
)

// ResourceName maps a lease or fence name, decoded ("{bucket}",
// "{bucket}/{key}" or a prefix "{bucket}/{key prefix}/"), to the resource
// key that the writes it names resolve to: the part after the bucket in its
// alias class (ObjectName), a prefix keeping its final "/". So
// "jobs/out//part-7/" and "jobs/out\\part-7/" are the prefix fence
// "jobs/out/part-7/" that writes below it meet; kept as spelt, they would be
// fences no write is ever resolved to. It is fence.Resolver.Names in S3
// mode. fence.ErrBadResource, naming the spelling to use, for a first
// segment that is no bucket name (an empty one: "/jobs/x") and for an
// object name whose key names the bucket to some stores ("jobs/\\").
func ResourceName(name string) (string, error) {
	bucket, key, hasKey := strings.Cut(name, "/")
	if bucket == "" {
		return "", fmt.Errorf("%w: %q starts with \"/\": in S3 mode a name starts with its bucket, as in %q",
			fence.ErrBadResource, name, strings.TrimLeft(name, "/"))
	}
	for i := 0; i < len(bucket); i++ {
		if c := bucket[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return "", fmt.Errorf("%w: %q: in S3 mode a name starts with its bucket, and byte %q is in no bucket name", fence.ErrBadResource, name, c)
		}
	}
	if !hasKey {
		return name, nil // the bucket's own resource
	}
	object := ObjectName(key)
	switch {
	case fence.IsPrefix(name) && object == "":
		return bucket + "/", nil // "jobs//": every key of the bucket
	case fence.IsPrefix(name):
		return bucket + "/" + object + "/", nil
	case object == "":
		return "", fmt.Errorf("%w: %q names the bucket to some stores and an object to others: name the bucket %q, or every key of it %q",
			fence.ErrBadResource, name, bucket, bucket+"/")
	}
	return bucket + "/" + object, nil
}
