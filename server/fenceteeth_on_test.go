//go:build fenceteeth

package server_test

import (
	"os"
	"strings"
)

// fenceUnprotected reports whether FENCEPROXY_TEST_FENCE_UNPROTECTED names
// protection (the teeth build, tag fenceteeth).
func fenceUnprotected(name string) bool {
	return strings.Contains(","+os.Getenv("FENCEPROXY_TEST_FENCE_UNPROTECTED")+",", ","+name+",")
}
