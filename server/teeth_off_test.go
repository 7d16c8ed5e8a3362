//go:build !upstreamteeth

package server_test

// upstreamTeeth: see teeth_on_test.go.
const upstreamTeeth = false
