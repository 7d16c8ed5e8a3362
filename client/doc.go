// Package client is the worker side of fenceproxy: it puts fencing tokens on
// writes (an http.RoundTripper, and a middleware for aws-sdk-go-v2 clients),
// recognises the proxy's own refusals (a stale token above all) apart from
// the backend's answers, and calls the lease API of the control listener.
//
// Tokens are unsigned decimal integers of at most 2^63-1, as the proxy
// requires. In signed-token mode (FENCEPROXY_TOKEN_KEY) a write also needs the
// token's signature, which the lease API returns in Lease.TokenSignature:
// WithLease puts both in a context, and Transport and S3Fencing send both.
//
// The package shares with the proxy only what is on the wire: package wire
// (header names, refusal and problem reasons, the problem body, the lease
// JSON) and the token grammar of package fence. Lease call errors are told
// apart by the problem's reason, never by its title.
package client
