//go:build fenceteeth

package main

import (
	"os"
	"strings"
)

// prefixAdmissionOff reports whether FENCEPROXY_TEST_FENCE_UNPROTECTED
// switches the prefix fences' admission off (the fenceteeth build).
func prefixAdmissionOff() bool {
	return strings.Contains(","+os.Getenv("FENCEPROXY_TEST_FENCE_UNPROTECTED")+",", ",prefix-admission,")
}
