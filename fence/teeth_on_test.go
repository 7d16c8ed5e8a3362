//go:build fenceteeth

package fence_test

import (
	"os"
	"strings"
)

func prefixDrainOff() bool {
	return strings.Contains(","+os.Getenv("FENCEPROXY_TEST_FENCE_UNPROTECTED")+",", ",prefix-drain,")
}
