//go:build !fenceteeth

package server_test

// fenceUnprotected reports whether the teeth build runs with the named
// protection of the prefix fences off: never in this build.
func fenceUnprotected(string) bool { return false }
