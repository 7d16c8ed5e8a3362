//go:build upstreamteeth

package upstream

import (
	"os"
	"strings"
)

// protected is off for the protections FENCEPROXY_TEST_UPSTREAM_UNPROTECTED
// names (comma-separated): "reset" closes connections with a FIN (and a
// close_notify over TLS) instead of a reset, "validity" lets the fast path
// run past the validity of WithValidUntil, "unsent" leaves the kernel's send
// buffer unbounded. Only the teeth build has it.
func protected(name string) bool {
	return !strings.Contains(","+os.Getenv("FENCEPROXY_TEST_UPSTREAM_UNPROTECTED")+",", ","+name+",")
}
