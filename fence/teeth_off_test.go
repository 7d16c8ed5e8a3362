//go:build !fenceteeth

package fence_test

func prefixDrainOff() bool { return false }
