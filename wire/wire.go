// Package wire holds the types fenceproxy puts on the wire, shared by the
// proxy, the control API and the Go client: header names, refusal reasons,
// the problem+json body (RFC 9457), and the JSON of tokens, fences and
// leases. It depends on nothing but the standard library and the fencing
// core's token grammar.
package wire

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/fence"
)

// Header names.
const (
	// DefaultTokenHeader carries the fencing token of a write, unless the
	// proxy runs with another FENCEPROXY_TOKEN_HEADER.
	DefaultTokenHeader = "X-Fencing-Token"
	// HeaderSignature carries the token's signature in signed-token mode
	// (FENCEPROXY_TOKEN_KEY): an HMAC-SHA256 over the resource key and the
	// token, issued by the lease API beside the token.
	HeaderSignature = "X-Fencing-Token-Signature"
	// HeaderPrefix names the prefix fence (a name ending in "/", spelt as
	// in a lease URL) that a write's token is for: a token from an outside
	// coordinator for a partition. The write raises that prefix fence to its
	// token first, through the barrier, and every resource it changes must
	// be below it. In signed-token mode the signature must be the prefix's
	// (or an ancestor's).
	HeaderPrefix = "X-Fencing-Prefix"
	// HeaderRefused is on every refusal made by the proxy itself: the
	// reason, so a client can tell it from the backend's own answers.
	HeaderRefused = "Fencing-Refused"
	// HeaderCurrentToken is on a stale refusal (409): the resource's maximum.
	HeaderCurrentToken = "Fencing-Current-Token"
	// HeaderResource is on a stale refusal (409): the fence that refused,
	// the write's own resource or a prefix fence above it, percent-encoded
	// as a fence URL names it (EscapeName), so a client reads it also where
	// the body is S3's <Error> or an SDK consumed it.
	HeaderResource = "Fencing-Resource"
	// HeaderListener is on every answer of the control listener, with the
	// value ListenerControl, so a client tells the control API from the
	// proxy listener (which forwards to the backend) before it sends a
	// bearer token.
	HeaderListener = "Fenceproxy-Listener"
)

// ListenerControl is HeaderListener's value on the control listener.
const ListenerControl = "control"

// EscapeName percent-encodes each segment of a resource key or lease name,
// keeping its slashes: /v1/fences/ + EscapeName(key) names key's fence, and
// url.PathUnescape gives key back.
func EscapeName(key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// MethodOverrideHeaders ask some backends (Rails, Express's method-override,
// Google APIs) to run another method than the request line's; the proxy
// fences a request with one as the stricter of the two methods. Canonical
// form (http.CanonicalHeaderKey).
var MethodOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// Refusal reasons of the proxy: Fencing-Refused values and the problem's
// "reason" member.
const (
	ReasonStale        = "stale"         // 409: the token is below the resource's maximum
	ReasonMissing      = "missing"       // 428: a fenced write without a token
	ReasonMalformed    = "malformed"     // 400: the token is not a canonical decimal up to 2^63-1, or given twice
	ReasonBadResource  = "bad_resource"  // 400: the target names no fenceable resource
	ReasonAmbiguous    = "ambiguous"     // 400: S3 mode, a spelling a store could read as another operation or object
	ReasonHopByHop     = "hop_by_hop"    // 400: a hop-by-hop header or an upgrade would skip the fence
	ReasonUnsupported  = "unsupported"   // 400: a write whose targets the proxy cannot see
	ReasonBadBody      = "bad_body"      // 400: the request body broke its framing or ended early; the backend did not get it whole
	ReasonMalformedXML = "malformed_xml" // 400: S3 mode, a DeleteObjects body that is not a Delete of 1 to 1,000 keys within 2 MiB
	ReasonSignature    = "signature"     // 403: signed-token mode, no valid signature
	ReasonForbidden    = "forbidden"     // 403: the authentication hook refused the request
	ReasonJump         = "jump"          // 403: the token jumps too far above the maximum
	ReasonDrainTimeout = "drain_timeout" // 503: smaller-token writes still in flight
	ReasonStoreError   = "store_error"   // 503: the maximum could not be read or made durable
	ReasonPrefixLimit  = "prefix_limit"  // 507: a new prefix fence would pass FENCEPROXY_PREFIX_FENCES_SIZE
	// ReasonShardUnavailable, 503 (cluster mode): no replica may admit writes of
	// the resource's shard now (a new owner's lock-delay, an owner cut off from
	// etcd, a handover), or the write's resources have different owners.
	ReasonShardUnavailable = "shard_unavailable"
	// ReasonOverloaded, 503: FENCEPROXY_MAX_UPLOADS uploads were in flight;
	// nothing was forwarded and no maximum was touched.
	ReasonOverloaded = "overloaded"
	ReasonClientGone = "client_gone" // 499 (logged): the client went away while waiting
	ReasonInternal   = "internal"    // 500
)

// Reasons of the control API's problems. It also uses bad_resource (a name
// in the path that is no resource key), drain_timeout, client_gone (logged
// only: nobody reads the answer) and internal from the list above.
const (
	ReasonBadRequest      = "bad_request"        // 400: a bad body or query parameter
	ReasonUnauthorized    = "unauthorized"       // 401: a bearer token is needed
	ReasonAdminDisabled   = "admin_disabled"     // 403: FENCEPROXY_ADMIN_TOKEN is unset
	ReasonNotFound        = "not_found"          // 404: no such resource, lease or endpoint
	ReasonMethod          = "method_not_allowed" // 405
	ReasonLeaseHeld       = "lease_held"         // 409: another holder has the lease
	ReasonLeaseLost       = "lease_lost"         // 409: the caller no longer has the lease
	ReasonTokensExhausted = "tokens_exhausted"   // 409: the next token would pass 2^63-1
	ReasonUnavailable     = "unavailable"        // 503: the store is closed or failing, or shutting down
	ReasonNoShard         = "no_shard"           // 409: a pool claim found no shard for the holder now
	ReasonPoolBusy        = "pool_busy"          // 409: a pool shrink would remove shards that are held
	ReasonShardDone       = "shard_done"         // 409: the pool shard was marked done with another token
)

// Problem is an RFC 9457 problem details body, as the proxy and the control
// API write it (application/problem+json). Tokens are decimal strings:
// 64-bit integers lose precision in JavaScript.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Reason string `json:"reason,omitempty"`

	Resource     string `json:"resource,omitempty"`
	Token        string `json:"token,omitempty"`
	CurrentToken string `json:"current_token,omitempty"`

	// A lease held by another holder (lease_held): nobody else may acquire
	// it before GraceEnds.
	Name      string     `json:"name,omitempty"`
	Holder    string     `json:"holder,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	GraceEnds *time.Time `json:"grace_ends,omitempty"`

	// A pool claim that got no shard (no_shard): the holder's share and
	// count, when a shard may free up, the shard it stands by for.
	Share   *int       `json:"share,omitempty"`
	Held    *int       `json:"held,omitempty"`
	AtShare bool       `json:"at_share,omitempty"`
	AllDone bool       `json:"all_done,omitempty"` // every shard of the pool is done: no claim will ever get one
	RetryAt *time.Time `json:"retry_at,omitempty"`
	Standby string     `json:"standby,omitempty"`

	// S3Code, when set, is the S3 error code of the answer in S3 modes in
	// place of the reason's (s3.Code, the one table: S3 gateway mode's
	// refusals of a signature or a grant have their own). Not part of the
	// problem+json body.
	S3Code string `json:"-"`
}

// WriteProblem writes p as the whole response, with Content-Type
// application/problem+json, Content-Length and Cache-Control: no-store. A
// Type left empty is about:blank. Headers set on w before stay.
func WriteProblem(w http.ResponseWriter, p Problem) {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	body, _ := json.Marshal(p)
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	w.Write(body)
}

// WriteJSON writes v as the whole response with status and Content-Type
// application/json.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	body = append(body, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// Token is a fencing token in JSON: written as a decimal string, read from a
// string or a number, with the token grammar (digits only, no leading zeros,
// at most 2^63-1).
type Token uint64

// MarshalJSON writes the token as a decimal string.
func (t Token) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatUint(uint64(t), 10) + `"`), nil
}

// UnmarshalJSON reads "42" or 42. Errors wrap fence.ErrTokenMalformed.
func (t *Token) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if unq, err := strconv.Unquote(s); err == nil {
		s = unq
	}
	v, err := fence.ParseToken(s)
	if err != nil {
		return err
	}
	*t = Token(v)
	return nil
}

// Fence is one resource's maximum: GET and PUT /v1/fences/{resource}.
type Fence struct {
	Resource string `json:"resource"`
	Token    Token  `json:"token"`
}

// FenceList is a page of fences: GET /v1/fences. Next, when set, is passed
// as after= for the next page.
type FenceList struct {
	Fences []Fence `json:"fences"`
	Next   string  `json:"next,omitempty"`
}

// RaiseRequest is the body of an admin raise, PUT /v1/fences/{resource}.
type RaiseRequest struct {
	Token *Token `json:"token"`
}

// LeaseRequest is the body of a lease call: holder and ttl (a Go duration
// such as "10s") to acquire; holder and token to renew or release.
type LeaseRequest struct {
	Holder string `json:"holder"`
	TTL    string `json:"ttl,omitempty"`
	Token  *Token `json:"token,omitempty"`
}

// Lease is a lease as the lease API answers it.
type Lease struct {
	Name       string    `json:"name"`
	Holder     string    `json:"holder"`
	Token      Token     `json:"token"`
	State      string    `json:"state,omitempty"` // held, suspect, grace, expired or released
	TTL        string    `json:"ttl"`             // a Go duration, fixed at acquire
	AcquiredAt time.Time `json:"acquired_at"`
	RenewedAt  time.Time `json:"renewed_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	// TokenSignature is the token's signature in signed-token mode, on
	// acquire and renew answers only (the holder's proof, not for readers).
	TokenSignature string `json:"token_signature,omitempty"`
	// Pool and Shard name the pool shard of a claim's answer, and of a
	// renew's when the lease is a pool shard's (Name is then the shard's
	// lease name: "{pool}/{shard}", or the pool's prefix with the shard,
	// such as "reports/daily/3/", below which the holder writes).
	Pool  string `json:"pool,omitempty"`
	Shard string `json:"shard,omitempty"`
	// HandBack, on a pool shard's renew answer: the shards ("{shard}", of
	// the same pool) the holder must hand back (release after its current
	// write), because a holder joined and it holds more than its share.
	// Omitted: none.
	HandBack []string `json:"hand_back,omitempty"`
}

// PoolSpec defines a pool: PUT /v1/pools/{pool}. Shards (shards "0" to
// "Shards-1") or Names, one of them. Prefix, optional, is a template with
// "{shard}" once, ending in "/" ("reports/daily/{shard}/"): each shard's
// lease name is the template with the shard's name in it, a prefix fence
// whose token fences every key below it. Omitted: "{pool}/{shard}".
type PoolSpec struct {
	Shards int      `json:"shards,omitempty"`
	Names  []string `json:"names,omitempty"`
	Prefix string   `json:"prefix,omitempty"`
}

// PoolClaim is a claim's body: POST /v1/pools/{pool}/claim. TTL is a Go
// duration (the lease's); Standby asks to be first in line for a suspect
// shard when none is free.
type PoolClaim struct {
	Holder  string `json:"holder"`
	TTL     string `json:"ttl"`
	Standby bool   `json:"standby,omitempty"`
}

// PoolShard is one shard of a Pool. State is free, held, suspect, grace or
// done. Holder is the lease's (for a free shard the last one); Token the
// lease's, or for a done shard the token that marked it.
type PoolShard struct {
	Shard     string     `json:"shard"`
	Name      string     `json:"name"` // the shard's lease name (and fence)
	State     string     `json:"state"`
	Holder    string     `json:"holder,omitempty"`
	Token     Token      `json:"token,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	GraceEnds *time.Time `json:"grace_ends,omitempty"`
	Standby   string     `json:"standby,omitempty"`
}

// PoolHolder is one live holder of a Pool with its count.
type PoolHolder struct {
	Holder   string   `json:"holder"`
	Shards   int      `json:"shards"`
	HandBack []string `json:"hand_back,omitempty"`
	Waiting  bool     `json:"waiting,omitempty"`
}

// Pool is a pool's state: GET /v1/pools/{pool}, and PUT's answer. Share is
// the ceiling of open shards over live holders.
type Pool struct {
	Pool    string       `json:"pool"`
	Prefix  string       `json:"prefix,omitempty"` // the shards' lease name template; omitted: "{pool}/{shard}"
	Share   int          `json:"share"`
	Open    int          `json:"open"`
	Done    int          `json:"done"`
	Shards  []PoolShard  `json:"shards"`
	Holders []PoolHolder `json:"holders"`
}

// LeaseList is a page of leases with their state: GET /v1/leases (admin).
// Next, when set, is passed as after= for the next page.
type LeaseList struct {
	Leases []Lease `json:"leases"`
	Next   string  `json:"next,omitempty"`
}
