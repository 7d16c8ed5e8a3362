//go:build s3teeth

package s3

import (
	"os"
	"strings"
)

// protected is off for the protections FENCEPROXY_TEST_S3_UNPROTECTED
// names (comma-separated): "encoded-slash" reads an encoded byte in the
// bucket as part of its name, "trailing-slash" keeps a trailing "/" in an
// object's alias class, "backslash" keeps "\\" apart from "/" there, and
// "marker-data" fences no directory marker's data object. Only the
// differential test's teeth build has it.
func protected(name string) bool {
	return !strings.Contains(","+os.Getenv("FENCEPROXY_TEST_S3_UNPROTECTED")+",", ","+name+",")
}
