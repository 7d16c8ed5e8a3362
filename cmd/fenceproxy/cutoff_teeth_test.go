//go:build upstreamteeth

package main

// Built with -tags upstreamteeth, the replicas are too (fenceproxyBinary),
// so that TestCutoffWithoutProtection can switch the upstream exchange's
// protections off in them by FENCEPROXY_TEST_UPSTREAM_UNPROTECTED.
func init() { replicaBuildTags = "upstreamteeth" }
