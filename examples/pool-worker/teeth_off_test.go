//go:build !fenceteeth

package main

// prefixAdmissionOff reports whether the proxy of the test build ignores
// prefix fences at admission: never in this build.
func prefixAdmissionOff() bool { return false }
