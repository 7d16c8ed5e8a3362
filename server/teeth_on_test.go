//go:build upstreamteeth

package server_test

// upstreamTeeth: this test build can switch upstream protections off
// (FENCEPROXY_TEST_UPSTREAM_UNPROTECTED); the tests that have teeth then
// expect the violation each prevents.
const upstreamTeeth = true
