//go:build fenceteeth

package fence

import (
	"os"
	"strings"
)

// protected is off for the protections FENCEPROXY_TEST_FENCE_UNPROTECTED
// names (comma-separated): "prefix-drain" (a prefix raise neither cuts nor
// waits for the writes below it), "prefix-admission" (a write is not
// checked against the prefix fences above it), "prefix-floor" (a lease
// acquire's token need not pass the overlapping fences: Floor is 0),
// "prefix-reload" (a replica that takes a shard over keeps its own view of
// the shard's prefix fences), "collection-admission" (a collection write
// is not checked against the prefix fences at or below it) and
// "collection-drain" (a prefix raise neither cuts nor waits for the
// collection writes above it) and "slash-alias" (a plain-mode write to P/
// is not also a write to P, Resolver.Alias). Only the teeth build has it.
func protected(name string) bool {
	return !strings.Contains(","+os.Getenv("FENCEPROXY_TEST_FENCE_UNPROTECTED")+",", ","+name+",")
}
