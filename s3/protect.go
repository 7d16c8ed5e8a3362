//go:build !s3teeth

package s3

// protected reports whether a protection of Classify is on: always, but in
// the build of the differential test's teeth (tag s3teeth), which switches
// each off by name to show that the test finds the bypass it closes.
func protected(string) bool { return true }
