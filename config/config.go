// Package config reads fenceproxy's configuration from FENCEPROXY_* environment
// variables (github.com/caarlos0/env/v11) and validates it before start-up.
package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/textproto"
	"net/url"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/dustin/go-humanize"

	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/s3/keyring"
	"github.com/fenceproxy/fenceproxy/tokensig"
	"github.com/fenceproxy/fenceproxy/wire"
)

// Prefix starts the name of every configuration variable.
const Prefix = "FENCEPROXY_"

// Config is the whole configuration. Each field's env tag names its variable
// (after Prefix), envDefault its default, help its meaning for `fenceproxy -h`,
// and secret:"true" a value that is never shown (Settings).
type Config struct {
	// Upstream is the backend's base URL (http or https). A path in it is joined in
	// front of the inbound path; S3 users leave it empty.
	Upstream *url.URL `env:"UPSTREAM,required,notEmpty" help:"base URL of the backend, e.g. http://127.0.0.1:9000; a path in it is joined in front of the inbound path (S3 users give none)"`

	// Listen is the proxy listener's address (host:port).
	Listen string `env:"LISTEN" envDefault:":8080" help:"address of the proxy listener; it forwards everything and reserves no paths"`

	// ControlListen is the address of health, readiness and the fence and
	// lease APIs: loopback unless set. Beyond loopback it needs LeaseToken
	// or LeaseOpen (Validate).
	ControlListen string `env:"CONTROL_LISTEN" envDefault:"127.0.0.1:9090" help:"address of the control listener: /healthz, /readyz, /metrics, /v1/fences/*, /v1/leases/*, /debug/pprof/* (admin); loopback by default. An address beyond loopback (:9090, 0.0.0.0:9090: what Kubernetes probes need) is refused unless LEASE_TOKEN guards the lease API or LEASE_OPEN=true says it is meant to be open"`

	// DataDir is the Badger directory holding the durable maxima. Required: a
	// maximum lost to a wrong working directory would let stale writes through.
	DataDir string `env:"DATA_DIR" help:"with STORE=badger, required: directory of the durable fencing-token maxima (Badger); one process per directory"`

	// Store is where the maxima, lease and upload records live: "badger"
	// (DataDir, one process) or "etcd" (cluster mode: several replicas).
	Store string `env:"STORE" envDefault:"badger" help:"badger: the maxima in DATA_DIR, one process; etcd: cluster mode, the maxima in etcd (ETCD_*), several replicas sharing the resources by shard (docs/CLUSTER.md)"`

	// Cluster mode (Store "etcd"): docs/CLUSTER.md.
	EtcdEndpoints []string      `env:"ETCD_ENDPOINTS" envSeparator:"," help:"with STORE=etcd, required: comma-separated etcd client URLs, e.g. https://etcd-0:2379,https://etcd-1:2379"`
	EtcdPrefix    string        `env:"ETCD_PREFIX" envDefault:"/fenceproxy/" help:"with STORE=etcd, the key prefix of this deployment in etcd; two deployments on one etcd need prefixes neither of which starts with the other"`
	EtcdCAFile    string        `env:"ETCD_CA_FILE" help:"with STORE=etcd, PEM CA bundle trusted for https:// etcd endpoints instead of the system roots"`
	EtcdCertFile  string        `env:"ETCD_CERT_FILE" help:"with STORE=etcd, PEM client certificate for etcd (with ETCD_KEY_FILE)"`
	EtcdKeyFile   string        `env:"ETCD_KEY_FILE" help:"with STORE=etcd, PEM private key of ETCD_CERT_FILE"`
	EtcdUsername  string        `env:"ETCD_USERNAME" help:"with STORE=etcd, etcd user (with ETCD_PASSWORD); unset: no etcd authentication"`
	EtcdPassword  string        `env:"ETCD_PASSWORD" secret:"true" help:"with STORE=etcd, password of ETCD_USERNAME; never logged"`
	Shards        int           `env:"SHARDS" envDefault:"64" help:"with STORE=etcd, the number of shards resources hash to; stored in etcd at the first start, and a replica with another value refuses to start; a few times the replica count"`
	ShardDepth    int           `env:"SHARD_DEPTH" envDefault:"0" help:"with STORE=etcd, how many leading segments of a key decide its shard (0: the whole key); needed for prefix fences, which must have at least this many segments (out/part-7/ has 2) so that one replica decides a prefix fence and every key below it; stored in etcd with SHARDS, and a replica with another value refuses to start"`
	ReplicaID     string        `env:"REPLICA_ID" help:"with STORE=etcd, this replica's name, unique among the live replicas and stable across restarts (a pod name); unset: the host name"`
	PeerListen    string        `env:"PEER_LISTEN" envDefault:":8081" help:"with STORE=etcd, address of the peer listener: writes, lease and admin calls for shards this replica owns, forwarded by the other replicas (authenticated by PEER_SECRET)"`
	PeerAdvertise string        `env:"PEER_ADVERTISE" help:"with STORE=etcd, required: host:port at which the other replicas reach PEER_LISTEN (in Kubernetes $(POD_IP):8081)"`
	PeerSecrets   []string      `env:"PEER_SECRET" envSeparator:"," secret:"true" help:"with STORE=etcd, required: comma-separated secrets of at least 16 characters each, shared by every replica; the first authenticates the requests this replica forwards, any of them is accepted (to rotate: add the new one second, roll out, move it first, roll out, drop the old one); never logged"`
	EtcdMaxTxnOps int           `env:"ETCD_MAX_TXN_OPS" envDefault:"128" help:"with STORE=etcd, the etcd cluster's --max-txn-ops: concurrent raises are committed together in Txns of at most this many operations; a value above the cluster's makes those Txns fail; at least 3"`
	ShardTTL      time.Duration `env:"SHARD_TTL" envDefault:"10s" help:"with STORE=etcd, TTL of the etcd lease that holds this replica's shards: a replica cut off from etcd stops admitting within it, and its shards move after it plus LOCK_DELAY; at least 2s"`
	LockDelay     time.Duration `env:"LOCK_DELAY" envDefault:"15s" help:"with STORE=etcd, how long a new owner of a shard waits, after the old owner's etcd lease expired (SHARD_TTL after its last keepalive), when the old owner lost it without handing it over (crash, cut off), for writes the old owner sent to still land; at least SHARD_TTL, and ABANDON_GRACE + 0.5s + UPSTREAM_UNSENT_MAX at 64 KiB/s (0s: none, tests only); planned handovers (SIGTERM, scaling) do not wait"`

	// TokenHeader names the request header that carries the fencing token.
	TokenHeader string `env:"TOKEN_HEADER" envDefault:"X-Fencing-Token" help:"request header carrying the fencing token; not one that HTTP or the proxy already gives a meaning (Host, Content-Length, hop-by-hop headers, Destination, Authorization, method overrides, X-Fencing-Token-Signature, ...)"`

	// UnfencedMethods pass through unchecked; every other method is a fenced write.
	UnfencedMethods []string `env:"UNFENCED_METHODS" envDefault:"GET,HEAD,OPTIONS" envSeparator:"," help:"comma-separated methods that pass unchecked; every other method (COPY, MOVE and custom ones included) is fenced"`

	// ResourceDepth cuts resource keys to their first N path segments; 0 keeps the whole path.
	ResourceDepth int `env:"RESOURCE_DEPTH" envDefault:"0" help:"0: the whole decoded path is the resource; N: its first N segments, a shorter path whole (2 fences /bkt/part-0/* as one resource; choosing N: docs/COORDINATORS.md)"`

	// AllowPathParams lets a raw ";" through in a write's path (fence.Resolver.PathParams).
	AllowPathParams bool `env:"ALLOW_PATH_PARAMS" envDefault:"false" help:"false: a write whose path holds a raw ';' gets 400 (servlet backends strip ;params, so /c/obj;x=1 would reach /c/obj past its fence); true: ';' is an ordinary key byte, for backends that do not strip path parameters"`

	// RequireToken refuses fenced writes without a token (428) when true; when
	// false such writes are forwarded unfenced.
	RequireToken bool `env:"REQUIRE_TOKEN" envDefault:"true" help:"true: a fenced write without a token gets 428; false: it is forwarded unchecked"`

	// DrainTimeout bounds the fence barrier's wait for smaller-token requests in flight.
	DrainTimeout time.Duration `env:"DRAIN_TIMEOUT" envDefault:"30s" help:"longest wait of a larger token for in-flight smaller-token writes to finish upstream; past it 503 with Retry-After"`

	// ShutdownTimeout bounds the graceful stop on SIGTERM/SIGINT.
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"30s" help:"longest wait for in-flight requests on SIGTERM/SIGINT before connections are closed"`

	// UpstreamDialTimeout bounds connecting to the backend.
	UpstreamDialTimeout time.Duration `env:"UPSTREAM_DIAL_TIMEOUT" envDefault:"5s" help:"longest wait to connect to the backend; past it 502"`

	// UpstreamResponseTimeout bounds the wait for response headers after the request was sent.
	UpstreamResponseTimeout time.Duration `env:"UPSTREAM_RESPONSE_TIMEOUT" envDefault:"60s" help:"longest wait for the backend's response headers after the whole request was sent; past it 504"`

	// UpstreamFastPath sends small plain-HTTP requests through fasthttp's
	// client (package upstream); false sends everything through net/http's.
	UpstreamFastPath bool `env:"UPSTREAM_FAST_PATH" envDefault:"true" help:"true: requests with a body of at most 64 KiB to an http:// backend go through fasthttp's client (faster; see docs/PERFORMANCE.md for what differs); false: everything through net/http's client"`

	// UpstreamUnsentMax bounds what the kernel holds unsent of a request on
	// each upstream connection: what it may still deliver once the process
	// stopped (LockDelayMin counts it).
	UpstreamUnsentMax ByteSize `env:"UPSTREAM_UNSENT_MAX" envDefault:"128KiB" help:"most bytes of a request the kernel holds unsent on each backend connection (TCP_NOTSENT_LOWAT, Linux): what it may still deliver after the process stopped or froze, which LOCK_DELAY must cover at 64 KiB/s; throughput is not capped by it; at most 1GiB; 0: the system's send buffer (counted as 4 MiB)"`

	// UpstreamProbeInterval is how often the server dials the upstream's
	// host:port (UpstreamAddr) to see whether it is reachable.
	UpstreamProbeInterval time.Duration `env:"UPSTREAM_PROBE_INTERVAL" envDefault:"5s" help:"how often the proxy opens (and closes) a TCP connection to FENCEPROXY_UPSTREAM's host and port, each attempt bounded by UPSTREAM_DIAL_TIMEOUT and by this interval: fenceproxy_upstream_up is 1 or 0, a warning is logged when the upstream becomes unreachable and a line when it is back; at least 100ms"`

	// ReadyNeedsUpstream makes /readyz answer 503 while the last probe of
	// the upstream failed.
	ReadyNeedsUpstream bool `env:"READY_NEEDS_UPSTREAM" envDefault:"false" help:"true: /readyz answers 503 while the upstream is unreachable (and until its first probe succeeds), so Kubernetes takes the pod out of every Service it backs, the control Service and its lease calls included; false: /readyz is about the proxy itself, and an unreachable upstream shows in fenceproxy_upstream_up, the log and 502 answers"`

	// UploadIdleTimeout bounds the pause between bytes of a request body.
	UploadIdleTimeout time.Duration `env:"UPLOAD_IDLE_TIMEOUT" envDefault:"30s" help:"longest pause between bytes of a request body; past it the upload is cut off before its end (the backend never gets the whole body), so a stalled client cannot hold a resource's barrier longer"`

	// UploadMinRate and UploadRateWindow bound how slowly a write's body may
	// arrive: every window of time spent waiting for the client must bring
	// UploadMinRate × UploadRateWindow bytes.
	UploadMinRate    ByteSize      `env:"UPLOAD_MIN_RATE" envDefault:"1KiB" help:"slowest a request body (a fenced write's or any other's) may arrive, in bytes per second: every UPLOAD_RATE_WINDOW of time spent waiting for the client's body must bring this rate times the window, or the upload is cut off before its end (408; the backend never gets the whole body); time a slow backend takes to read does not count; at most 1GiB; 0: no minimum (a body trickling a byte within every UPLOAD_IDLE_TIMEOUT is never cut)"`
	UploadRateWindow time.Duration `env:"UPLOAD_RATE_WINDOW" envDefault:"30s" help:"the window over which UPLOAD_MIN_RATE is measured, the first one a grace for the body's start"`

	// MaxUploads and MaxConnections bound what hostile or runaway clients
	// can make the proxy hold (descriptors, goroutines, buffers).
	MaxUploads     int `env:"MAX_UPLOADS" envDefault:"1024" help:"most requests with a body in the proxy at once (up to about 90 KiB of memory, 2 descriptors and 3 goroutines each while in flight, docs/PERFORMANCE.md); one more gets 503 overloaded with Retry-After, nothing forwarded and no maximum touched; 0: no limit"`
	MaxConnections int `env:"MAX_CONNECTIONS" envDefault:"2048" help:"most client connections the proxy listener holds open; past it the listener stops accepting (further connections wait in the kernel's listen backlog, as with HAProxy's maxconn) and keep-alive is turned off until they drop below 7/8 of it; lowered at start, with a warning, to what the open-file limit allows (2 descriptors per connection plus 512); 0: no limit"`

	// AbandonGrace keeps a resource's barrier closed after the proxy gave up on
	// a write it had sent upstream whole (response timeout, backend failure): a
	// slow backend may still apply it. Start-up waits it too, for writes
	// forwarded by the previous process. Like Chubby's lock-delay.
	AbandonGrace time.Duration `env:"ABANDON_GRACE" help:"how long a write the proxy gave up on after sending it whole (timeout, backend failure) still holds back larger tokens on its resource; after start-up, every token above 0 on a resource that had a maximum waits this long once (equal tokens too), unless the previous process stopped cleanly; must be below DRAIN_TIMEOUT; with STORE=etcd, LOCK_DELAY must cover it; unset: 5s, or half of DRAIN_TIMEOUT if that is shorter; 0s: off"`

	// MinFreeSpace is the free space DATA_DIR's file system must keep; below it
	// raises fail with 503 (Badger writes through mmap and can die with SIGBUS
	// on a full tmpfs instead of returning an error).
	MinFreeSpace ByteSize `env:"MIN_FREE_SPACE" envDefault:"128MiB" help:"free space DATA_DIR's file system must keep (checked with statfs); below it raises fail with 503 and nothing is forwarded, until space returns; sizes take SI or IEC units (128MiB, 1GB), a bare number is bytes"`

	// CacheSize bounds the memory of the maxima kept in memory, in bytes.
	CacheSize ByteSize `env:"CACHE_SIZE" envDefault:"32MiB" help:"memory for the fencing-token maxima kept in memory (recently used resources; each counts its key's length plus about 130 bytes, so 32MiB holds about 230,000 short keys or 26,000 of 1 KiB); a miss costs one disk read; at least 1MiB; a bare number is bytes"`

	// PrefixFencesSize bounds the memory of the prefix fences' maxima, all
	// held in memory (admission reads no store per ancestor of a key).
	PrefixFencesSize ByteSize `env:"PREFIX_FENCES_SIZE" envDefault:"32MiB" help:"memory for the prefix fences (names ending in /, each fencing every key below it), all kept in memory; each counts its name's length plus 96 bytes, so 32MiB holds about 250,000 of 40 bytes; a raise that would create one more is refused with 507; at least 1MiB; a bare number is bytes"`

	// TokenKeys turns on signed-token mode: base64 HMAC-SHA256 keys of at
	// least 32 bytes; the first signs, every one verifies (so keys can rotate).
	TokenKeys []string `env:"TOKEN_KEY" envSeparator:"," secret:"true" help:"signed-token mode: comma-separated base64 keys (32+ bytes each); the first signs lease tokens, all verify; fenced writes then need X-Fencing-Token-Signature (403 without a valid one)"`

	// MaxTokenJump refuses a token more than this above the resource's maximum.
	MaxTokenJump uint64 `env:"MAX_TOKEN_JUMP" envDefault:"0" help:"0: off; N: a token more than N above its resource's maximum is refused (403); unsuitable for etcd revisions or ZooKeeper zxids, which jump"`

	// LeaseToken, when set, is required as a bearer token by lease calls.
	LeaseToken string `env:"LEASE_TOKEN" secret:"true" help:"bearer token required by lease and pool calls when set (anyone who can acquire can fence out the real holder); required when CONTROL_LISTEN is beyond loopback, unless LEASE_OPEN=true"`

	// LeaseOpen lets the lease API go without LeaseToken on a control
	// listener beyond loopback: the network guards it instead.
	LeaseOpen bool `env:"LEASE_OPEN" envDefault:"false" help:"true: CONTROL_LISTEN may be beyond loopback with no LEASE_TOKEN, the lease API open to whoever reaches the port (meant for a port that a NetworkPolicy or firewall guards); false: such a start is refused"`

	// LeaseGrace is the wait after a lease's expiry before another holder may
	// acquire it; nil (unset) is 2/3 of each lease's TTL, 0 no grace.
	LeaseGrace *time.Duration `env:"LEASE_GRACE" help:"wait after a lease expires before another holder may acquire it (its holder may still renew); unset: 2/3 of the lease's TTL; 0s: none, another holder may acquire the moment it expires"`

	// LeaseRevokeAfter is the silence after which a lease's holder is
	// reported as suspect; 0 (unset) is half of each lease's TTL. A lease
	// whose TTL is at most it is never suspect (it expires first), so it must
	// be below LeaseMaxTTL.
	LeaseRevokeAfter time.Duration `env:"LEASE_REVOKE_AFTER" help:"time without a renew after which a holder is reported as suspect; above 0s and below LEASE_MAX_TTL (a lease whose TTL is at most it is never reported as suspect: it expires first); unset: half the lease's TTL"`

	// LeaseMinTTL and LeaseMaxTTL bound the TTL an acquire may ask for.
	LeaseMinTTL time.Duration `env:"LEASE_MIN_TTL" envDefault:"1s" help:"shortest lease TTL an acquire may ask for"`
	LeaseMaxTTL time.Duration `env:"LEASE_MAX_TTL" envDefault:"1h" help:"longest lease TTL an acquire may ask for"`

	// LeaseRetention is how long the record of an expired or released lease
	// is kept beyond its grace and one more TTL before the background sweep
	// removes it; the fence of its name stays, so later tokens still pass
	// every token granted before.
	LeaseRetention time.Duration `env:"LEASE_RETENTION" envDefault:"15m" help:"how long the record of an expired or released lease is kept, beyond its grace and one more TTL, before a background sweep removes it (the fence of its name stays, so the next holder's token still passes every earlier one); 0s: as soon as grace and TTL have passed"`

	// AdminToken is the bearer token of admin calls; admin calls are refused while it is unset.
	AdminToken string `env:"ADMIN_TOKEN" secret:"true" help:"bearer token for admin calls (list, raise and reset fences; force-release leases); admin calls are refused while it is unset"`

	// TLS for the listeners (PEM files) and trust for an HTTPS upstream.
	TLSCertFile        string `env:"TLS_CERT_FILE" help:"PEM certificate for TLS on the proxy listener (with TLS_KEY_FILE); unset: plain HTTP"`
	TLSKeyFile         string `env:"TLS_KEY_FILE" help:"PEM private key for TLS on the proxy listener"`
	ControlTLSCertFile string `env:"CONTROL_TLS_CERT_FILE" help:"PEM certificate for TLS on the control listener (with CONTROL_TLS_KEY_FILE); unset: plain HTTP"`
	ControlTLSKeyFile  string `env:"CONTROL_TLS_KEY_FILE" help:"PEM private key for TLS on the control listener"`
	UpstreamCAFile     string `env:"UPSTREAM_CA_FILE" help:"PEM CA bundle trusted for an https:// upstream instead of the system roots"`

	// Mode is enforce (refuse stale writes) or observe (log and count what
	// would be refused, forward everything; for rolling fenceproxy out).
	Mode string `env:"MODE" envDefault:"enforce" help:"enforce: refuse what the fence forbids; observe: log and count what would be refused but forward everything (for rolling out)"`

	// S3 is how the proxy reads requests: "off" (a generic HTTP backend) or
	// "pass" (the backend speaks S3; requests reach it as the worker signed them).
	S3 string `env:"S3" envDefault:"off" help:"off: a generic HTTP backend, the resource is the request path; pass: the backend speaks S3, the resource is {bucket}/{key} in path or virtual-hosted style (FENCEPROXY_S3_DOMAINS), and the worker's signature reaches the backend unchanged; resign: gateway mode, as pass but workers sign with keys of the proxy (FENCEPROXY_S3_CREDENTIALS_FILE), every request is verified, and the proxy signs what it forwards with the store's credentials (the AWS default chain)"`

	// S3CredentialsFile holds the workers' keys and grants in gateway mode.
	S3CredentialsFile string `env:"S3_CREDENTIALS_FILE" help:"with S3=resign, required: the YAML (or JSON) file of the workers' access keys, secrets and grants (bucket, key prefix, read/write/readwrite); re-read every 5s, so a key removed from it is refused within 5s"`

	// S3Region is the signing region of gateway mode, both sides.
	S3Region string `env:"S3_REGION" envDefault:"us-east-1" help:"with S3=resign, the region workers sign for and the proxy signs for the store: the bucket's region for AWS S3, auto for Cloudflare R2"`

	// S3StoreStyle is how gateway mode addresses the store.
	S3StoreStyle string `env:"S3_STORE_STYLE" envDefault:"path" help:"with S3=resign, how the proxy addresses the store (FENCEPROXY_UPSTREAM): path ({upstream}/{bucket}/{key}) or virtual ({bucket}.{upstream host}/{key}, as AWS S3 prefers)"`

	// S3TokenMetadata writes the fencing token into the objects' metadata.
	S3TokenMetadata bool `env:"S3_TOKEN_METADATA" envDefault:"false" help:"with S3=resign, PutObject, CopyObject (with x-amz-metadata-directive REPLACE) and CreateMultipartUpload get x-amz-meta-fencing-token: <token>, so every object shows which holder wrote it"`

	// S3Domains are the host names workers use for the proxy in S3 mode.
	S3Domains []string `env:"S3_DOMAINS" envSeparator:"," help:"with S3=pass or resign, the host names workers use for the proxy (comma-separated, no port): a Host equal to one is path style (/bucket/key), {bucket}.{name} is virtual-hosted style (not below an IP address); any other Host is refused with 400"`

	// S3VirtualHosted is whether S3 mode reads {bucket}.{domain} as virtual-hosted style.
	S3VirtualHosted bool `env:"S3_VIRTUAL_HOSTED" envDefault:"true" help:"with S3=pass or resign, whether a Host {bucket}.{name} (a name in FENCEPROXY_S3_DOMAINS) is read as virtual-hosted style, bucket {bucket}; set false when the store does not read those names so (it would write another object than the one fenced): such a Host is then refused with 400, and workers use path style"`

	// S3BucketWrites is what S3 mode does with a bucket's configuration writes.
	S3BucketWrites string `env:"S3_BUCKET_WRITES" envDefault:"refuse" help:"with S3=pass or resign, writes to a bucket's configuration (policy, lifecycle, ACL, versioning..., DeleteBucket): refuse (400), pass (forwarded unfenced) or fence (fenced on the bucket's name); CreateBucket passes unfenced unless fence"`

	// S3UploadRecordTTL is how long S3 mode remembers which token created a
	// multipart upload that no Complete or Abort through the proxy ended.
	S3UploadRecordTTL time.Duration `env:"S3_UPLOAD_RECORD_TTL" envDefault:"168h" help:"with S3=pass or resign, how long the proxy remembers which fencing token created a multipart upload (so that its holder can abort it after a takeover) when no complete or abort through the proxy ends it; match the bucket's AbortIncompleteMultipartUpload lifecycle rule; at least 1m"`

	// LogLevel is the least severe level logged: debug, info, warn or error.
	LogLevel slog.Level `env:"LOG_LEVEL" envDefault:"info" help:"least severe log level: debug, info, warn or error (logs are JSON on stderr)"`

	// AccessLog logs one line per request on the proxy listener, at info
	// (proxy.Settings.AccessLog), so it needs LogLevel info or debug.
	AccessLog bool `env:"ACCESS_LOG" envDefault:"false" help:"true: one JSON line per request on the proxy listener, with the other logs on stderr, marked log=access (method, path, resources, token, decision, status, upstream status, bytes in and out, duration, remote address); at info, so LOG_LEVEL must be info or debug; false: none"`

	// Tracing turns on OpenTelemetry tracing (proxy.Options.Tracer): a
	// span per request on the proxy listener, exported by OTLP as the
	// standard OTEL_* variables configure it (TracingExport).
	Tracing bool `env:"TRACING" envDefault:"false" help:"true: OpenTelemetry tracing, a server span per request on the proxy listener (method, path, decision, reason, resource, token, status) and a client span around the call to the backend, whose W3C traceparent the backend gets; an incoming traceparent is the parent; spans go by OTLP as the standard variables say: OTEL_EXPORTER_OTLP_ENDPOINT or _TRACES_ENDPOINT (default http://localhost:4318), OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf, the default, or grpc), OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME (default fenceproxy), OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and _ARG; OTEL_TRACES_EXPORTER, if set, must be otlp; false: none, and no cost"`
}

// mayBeEmpty lists variables for which set-but-empty means unset.
var mayBeEmpty = map[string]bool{Prefix + "ADMIN_TOKEN": true, Prefix + "LEASE_TOKEN": true}

// Parse reads the configuration from environ (name to value) and validates it.
// The returned error lists every bad variable by name; Config is only usable
// when the error is nil. Unknown FENCEPROXY_* names are returned as warnings.
func Parse(environ map[string]string) (Config, []string, error) {
	var cfg Config
	var errs []error
	reported := map[string]bool{} // one error per variable: the first found
	report := func(name string, err error) {
		if !reported[name] {
			reported[name] = true
			errs = append(errs, err)
		}
	}
	known := map[string]string{} // variable -> Go field name
	var warnings []string
	for _, f := range fields() {
		known[f.Var] = f.Field
		if v, ok := environ[f.Var]; ok && v == "" && !mayBeEmpty[f.Var] {
			if f.Required {
				report(f.Var, fmt.Errorf("%s is required but empty", f.Var))
			} else if f.Default == "" {
				report(f.Var, fmt.Errorf("%s is set but empty; give it a value or unset it", f.Var))
			} else {
				report(f.Var, fmt.Errorf("%s is set but empty; unset it to use the default %q", f.Var, f.Default))
			}
		}
	}
	err := env.ParseWithOptions(&cfg, env.Options{Environment: environ, Prefix: Prefix})
	var agg env.AggregateError
	if errors.As(err, &agg) {
		for _, e := range agg.Errors {
			report(nameVariable(e, known))
		}
	} else if err != nil {
		report("", err)
	}
	for i, m := range cfg.UnfencedMethods {
		cfg.UnfencedMethods[i] = strings.TrimSpace(m)
	}
	if cfg.Store == "etcd" && cfg.ReplicaID == "" {
		cfg.ReplicaID, _ = os.Hostname() // Validate names it when that failed too
	}
	if _, set := environ[Prefix+"ABANDON_GRACE"]; !set {
		// At least 0: a bad DRAIN_TIMEOUT is reported once, as itself, not
		// again through a default derived from it.
		cfg.AbandonGrace = max(0, min(DefaultAbandonGrace, cfg.DrainTimeout/2))
	} else if cfg.AbandonGrace == 0 {
		warnings = append(warnings, Prefix+"ABANDON_GRACE is 0s: a write abandoned after a timeout may be applied after its successor's")
	}
	// Validate knows the size read, not the text typed: "1MB" is 977 KiB.
	if v := environ[Prefix+"CACHE_SIZE"]; v != "" && cfg.CacheSize < minCacheSize && !reported[Prefix+"CACHE_SIZE"] {
		report(Prefix+"CACHE_SIZE", fmt.Errorf("%sCACHE_SIZE: %q (%s) is below the minimum of 1MiB (%s)", Prefix, v, cfg.CacheSize, cacheTooSmall))
	}
	// Unset is half the TTL, which Validate cannot tell from a 0s set here.
	if v, set := environ[Prefix+"LEASE_REVOKE_AFTER"]; set && v != "" && cfg.LeaseRevokeAfter == 0 {
		report(Prefix+"LEASE_REVOKE_AFTER", fmt.Errorf("%sLEASE_REVOKE_AFTER: %q would report every holder as suspect at once; unset it for half the lease's TTL", Prefix, v))
	}
	// Validate the rest too, so that one run reports every bad variable;
	// not an error that only follows from a value already reported as
	// unreadable (LEASE_MAX_TTL=1d is one error, not a second about
	// LEASE_MIN_TTL above the zero it left).
	unreadable := maps.Clone(reported)
	if verr := cfg.Validate(); verr != nil {
		for _, e := range verr.(interface{ Unwrap() []error }).Unwrap() {
			name, _, _ := strings.Cut(e.Error(), ":")
			if !mentionsAny(e.Error(), name, unreadable) {
				report(name, e)
			}
		}
	}
	if cfg.Tracing {
		if _, terrs := TracingExport(environ); terrs != nil {
			for _, e := range terrs {
				name, _, _ := strings.Cut(e.Error(), ":")
				report(name, e)
			}
		}
	}
	var unknown []string
	for name := range environ {
		if strings.HasPrefix(name, Prefix) && known[name] == "" && !kubernetesServiceLink(name) {
			unknown = append(unknown, name)
			warning := fmt.Sprintf("unknown variable %s is ignored", name)
			if close := closestName(name, known); close != "" {
				warning += fmt.Sprintf(" (did you mean %s?)", close)
			}
			warnings = append(warnings, warning)
		}
	}
	// A required variable not set beside a misspelling of it: say so in
	// the error itself, which is what a reader sees first.
	for i, e := range errs {
		for _, u := range unknown {
			if close := closestName(u, known); close != "" && strings.HasPrefix(e.Error(), close+" is required") {
				errs[i] = fmt.Errorf("%w (%s is set: did you mean %s?)", e, u, close)
			}
		}
	}
	if cfg.Store == "etcd" && cfg.DataDir != "" {
		warnings = append(warnings, Prefix+"DATA_DIR is ignored with FENCEPROXY_STORE=etcd: the maxima are in etcd (a switch from badger moves none of them; see docs/CLUSTER.md)")
	}
	if cfg.Store == "etcd" && cfg.LockDelay == 0 {
		warnings = append(warnings, Prefix+"LOCK_DELAY is 0s: after a replica's crash or cut-off, its writes still on their way may be applied after the next owner's (for tests only)")
	}
	if cfg.LeaseOpen && cfg.LeaseToken != "" {
		warnings = append(warnings, Prefix+"LEASE_OPEN is ignored: FENCEPROXY_LEASE_TOKEN is set, and lease calls need it")
	}
	if !cfg.RequireToken {
		warnings = append(warnings, Prefix+"REQUIRE_TOKEN is false: fenced writes without a token are forwarded unchecked; use it only while rolling out")
	}
	for _, m := range cfg.UnfencedMethods {
		switch m {
		case "PUT", "POST", "DELETE", "PATCH", "COPY", "MOVE":
			warnings = append(warnings, fmt.Sprintf("%sUNFENCED_METHODS lets %s writes through unchecked", Prefix, m))
		}
	}
	sort.Strings(warnings)
	return cfg, warnings, errors.Join(errs...)
}

// Default returns the configuration an environment that sets only the
// required variables would give, with those left empty (Upstream nil, DataDir
// ""): every default, defined once, in the fields' envDefault tags. Tests and
// embedders start from it.
func Default() Config {
	cfg, _, err := Parse(map[string]string{Prefix + "UPSTREAM": "http://upstream.invalid", Prefix + "DATA_DIR": "unset"})
	if err != nil {
		panic("config: the defaults do not validate: " + err.Error())
	}
	cfg.Upstream, cfg.DataDir = nil, ""
	return cfg
}

// kubernetesServiceLink reports variables that Kubernetes injects for a Service
// named fenceproxy (FENCEPROXY_SERVICE_HOST, FENCEPROXY_PORT_8080_TCP, ...).
// mentionsAny reports whether text names a variable of names other than own
// (as a whole word: FENCEPROXY_S3 is not in FENCEPROXY_S3_DOMAINS).
func mentionsAny(text, own string, names map[string]bool) bool {
	for n := range names {
		if n == own || n == "" {
			continue
		}
		for i := strings.Index(text, n); i >= 0; {
			end := i + len(n)
			if end == len(text) || !(text[end] == '_' || 'A' <= text[end] && text[end] <= 'Z' || '0' <= text[end] && text[end] <= '9') {
				return true
			}
			j := strings.Index(text[end:], n)
			if j < 0 {
				break
			}
			i = end + j
		}
	}
	return false
}

// closestName returns the known variable an unknown name most likely
// misspells: one that is the unknown name's start or end
// (FENCEPROXY_UPSTREAM_URL) or within two edits of it; "" when none is.
func closestName(name string, known map[string]string) string {
	best, bestD := "", 3
	rest := strings.TrimPrefix(name, Prefix)
	for k := range known {
		kr := strings.TrimPrefix(k, Prefix)
		d := editDistance(rest, kr)
		if strings.HasPrefix(rest, kr+"_") || strings.HasSuffix(rest, "_"+kr) {
			d = 1
		}
		if d < bestD || d == bestD && best != "" && k < best {
			best, bestD = k, d
		}
	}
	if bestD > 2 {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func kubernetesServiceLink(name string) bool {
	rest := strings.TrimPrefix(name, Prefix)
	return strings.HasPrefix(rest, "SERVICE_") || rest == "PORT" || strings.HasPrefix(rest, "PORT_")
}

// nameVariable rewrites env's errors so that each starts with the variable's
// name, and returns that name.
func nameVariable(err error, known map[string]string) (string, error) {
	var pe env.ParseError
	if errors.As(err, &pe) {
		for v, field := range known {
			if field == pe.Name {
				return v, fmt.Errorf("%s: %v", v, plainParseError(pe.Err))
			}
		}
	}
	var unset env.VarIsNotSetError
	if errors.As(err, &unset) {
		return unset.Key, fmt.Errorf("%s is required but not set", unset.Key)
	}
	var empty env.EmptyVarError
	if errors.As(err, &empty) {
		return empty.Key, fmt.Errorf("%s is required but empty", empty.Key)
	}
	return "", err
}

// plainParseError rewords the standard library's parse errors for people.
func plainParseError(err error) error {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		switch ne.Func {
		case "ParseBool":
			return fmt.Errorf("%q must be true or false", ne.Num)
		case "ParseUint":
			return fmt.Errorf("%q must be a whole number from 0 to %d", ne.Num, uint64(math.MaxUint64))
		case "ParseInt":
			return fmt.Errorf("%q must be a whole number", ne.Num)
		}
	}
	if strings.Contains(err.Error(), "parse URL") { // caarlos0/env does not wrap url.Parse's error
		return fmt.Errorf("%v; give an absolute URL such as http://127.0.0.1:9000", err)
	}
	if msg := err.Error(); strings.Contains(msg, "parse duration") {
		value := msg
		if i := strings.LastIndex(msg, ` "`); i >= 0 {
			value = strings.TrimSuffix(msg[i+1:], `"`) + `"`
		}
		return fmt.Errorf("%s is not a duration: write it in Go's units, such as 500ms, 30s, 5m or 24h (a day is 24h)", value)
	}
	if strings.Contains(err.Error(), "slog: level string") {
		return fmt.Errorf("%v; use debug, info, warn or error", err)
	}
	return err
}

// Validate reports every field whose value is missing or not usable, each
// error naming its variable (one error per line, sorted); nil when all are
// fine. Parse runs it; server.New runs it for a Config built in code.
func (c Config) Validate() error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s%s: %s", Prefix, name, fmt.Sprintf(format, args...)))
	}
	if c.CacheSize < minCacheSize {
		bad("CACHE_SIZE", "%s is below the minimum of 1MiB (%s)", c.CacheSize, cacheTooSmall)
	}
	if c.PrefixFencesSize < minCacheSize {
		bad("PREFIX_FENCES_SIZE", "%s is below the minimum of 1MiB", c.PrefixFencesSize)
	}
	if c.MaxUploads < 0 {
		bad("MAX_UPLOADS", "%d must be 0 (no limit) or a positive number of requests", c.MaxUploads)
	}
	if c.MaxConnections < 0 {
		bad("MAX_CONNECTIONS", "%d must be 0 (no limit) or a positive number of connections", c.MaxConnections)
	}
	if c.UploadMinRate > maxUnsent {
		bad("UPLOAD_MIN_RATE", "%s is above the maximum of 1 GiB per second (give 0 for no minimum)", c.UploadMinRate)
	}
	if c.UploadMinRate > 0 && c.UploadRateWindow < 100*time.Millisecond {
		bad("UPLOAD_RATE_WINDOW", "%s must be at least 100ms while FENCEPROXY_UPLOAD_MIN_RATE is set", c.UploadRateWindow)
	}
	if c.UpstreamUnsentMax > maxUnsent {
		bad("UPSTREAM_UNSENT_MAX", "%s is above the maximum of 1 GiB (the kernel takes a 32-bit value; give 0 for the system's send buffer)", c.UpstreamUnsentMax)
	}
	switch u := c.Upstream; {
	case u == nil:
		bad("UPSTREAM", "is required")
	case u.Scheme != "http" && u.Scheme != "https":
		bad("UPSTREAM", "%q must be an absolute http:// or https:// URL", u.Redacted())
	case u.Host == "":
		bad("UPSTREAM", "%q has no host", u.Redacted())
	case u.User != nil:
		bad("UPSTREAM", "must not carry user information; credentials belong to the clients")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		bad("UPSTREAM", "%q must not have a query or fragment", u.Redacted())
	}
	switch c.Store {
	case "badger", "": // "": a Config built in code, the default
		if c.DataDir == "" {
			bad("DATA_DIR", "is required with FENCEPROXY_STORE=badger")
		}
	case "etcd":
		c.validateCluster(bad)
	default:
		bad("STORE", "%q must be badger or etcd", c.Store)
	}
	for name, addr := range map[string]string{"LISTEN": c.Listen, "CONTROL_LISTEN": c.ControlListen} {
		if !strings.Contains(addr, ":") {
			bad(name, "%q is not a host:port address (for example :8080)", addr)
		}
	}
	if _, port, _ := net.SplitHostPort(c.Listen); c.Listen == c.ControlListen && port != "0" {
		bad("CONTROL_LISTEN", "%q is the same address as FENCEPROXY_LISTEN", c.ControlListen)
	}
	if strings.Contains(c.ControlListen, ":") && !Loopback(c.ControlListen) && c.LeaseToken == "" && !c.LeaseOpen {
		_, port, _ := net.SplitHostPort(c.ControlListen)
		bad("CONTROL_LISTEN", "%q listens beyond loopback, and no FENCEPROXY_LEASE_TOKEN guards the lease API on it: whoever reaches the port "+
			"could take leases and raise fences. Set FENCEPROXY_LEASE_TOKEN (lease and pool calls then need Authorization: Bearer <it>), "+
			"or FENCEPROXY_LEASE_OPEN=true if the lease API is meant to be open to that network (a NetworkPolicy or firewall guards the port), "+
			"or listen on loopback (127.0.0.1:%s)", c.ControlListen, port)
	}
	if !validToken(c.TokenHeader) {
		bad("TOKEN_HEADER", "%q is not a valid HTTP header name", c.TokenHeader)
	} else if why := reservedHeader(c.TokenHeader); why != "" {
		bad("TOKEN_HEADER", "%q %s; choose a header of its own such as %s", c.TokenHeader, why, wire.DefaultTokenHeader)
	}
	for _, m := range c.UnfencedMethods {
		switch {
		case !validToken(m):
			bad("UNFENCED_METHODS", "%q is not a valid HTTP method", m)
		case strings.ToUpper(m) != m:
			// Methods are case-sensitive: "get" would leave GET fenced.
			bad("UNFENCED_METHODS", "%q is not upper case; methods are case-sensitive (did you mean %q?)", m, strings.ToUpper(m))
		}
	}
	for _, pair := range [][4]string{
		{"TLS_CERT_FILE", c.TLSCertFile, "TLS_KEY_FILE", c.TLSKeyFile},
		{"CONTROL_TLS_CERT_FILE", c.ControlTLSCertFile, "CONTROL_TLS_KEY_FILE", c.ControlTLSKeyFile},
	} {
		switch {
		case pair[1] != "" && pair[3] == "":
			bad(pair[2], "is unset but %s%s is set; set both or neither", Prefix, pair[0])
		case pair[1] == "" && pair[3] != "":
			bad(pair[0], "is unset but %s%s is set; set both or neither", Prefix, pair[2])
		case pair[1] != "":
			if _, err := tls.LoadX509KeyPair(pair[1], pair[3]); err != nil {
				bad(pair[0], "cannot load the certificate and key: %v", err)
			}
		}
	}
	if c.UpstreamCAFile != "" {
		if _, err := c.UpstreamCAs(); err != nil {
			bad("UPSTREAM_CA_FILE", "%v", err)
		}
	}
	switch c.S3 {
	case "off":
		if len(c.S3Domains) > 0 {
			bad("S3_DOMAINS", "is set but FENCEPROXY_S3 is off; set FENCEPROXY_S3=pass or unset it")
		}
	case "pass", "resign":
		if len(c.S3Domains) == 0 {
			bad("S3_DOMAINS", "is required with FENCEPROXY_S3=%s: the host names workers use for the proxy (e.g. s3.internal,localhost)", c.S3)
		}
		for _, d := range c.S3Domains {
			if err := s3.CheckDomain(d); err != nil {
				bad("S3_DOMAINS", "%q: %v", d, err)
			}
		}
	default:
		bad("S3", "%q must be off, pass or resign", c.S3)
	}
	if c.S3 == "resign" {
		if c.S3CredentialsFile == "" {
			bad("S3_CREDENTIALS_FILE", "is required with FENCEPROXY_S3=resign: the workers' keys and grants")
		} else if b, err := os.ReadFile(c.S3CredentialsFile); err != nil {
			bad("S3_CREDENTIALS_FILE", "%v", err)
		} else if _, err := keyring.Parse(b); err != nil {
			bad("S3_CREDENTIALS_FILE", "%v", err)
		}
		if c.S3Region == "" {
			bad("S3_REGION", "is required with FENCEPROXY_S3=resign")
		}
		if c.S3StoreStyle != "path" && c.S3StoreStyle != "virtual" {
			bad("S3_STORE_STYLE", "%q must be path or virtual", c.S3StoreStyle)
		}
	} else if c.S3CredentialsFile != "" {
		bad("S3_CREDENTIALS_FILE", "is set but FENCEPROXY_S3 is %s; set FENCEPROXY_S3=resign or unset it", c.S3)
	}
	if c.S3UploadRecordTTL < time.Minute {
		bad("S3_UPLOAD_RECORD_TTL", "%s is below the minimum of 1m: a record must outlive the upload it protects", c.S3UploadRecordTTL)
	}
	switch c.S3BucketWrites {
	case "refuse", "pass", "fence":
	default:
		bad("S3_BUCKET_WRITES", "%q must be refuse, pass or fence", c.S3BucketWrites)
	}
	if c.Mode != "enforce" && c.Mode != "observe" {
		bad("MODE", "%q must be enforce or observe", c.Mode)
	}
	if c.AccessLog && c.LogLevel > slog.LevelInfo {
		bad("ACCESS_LOG", "true needs FENCEPROXY_LOG_LEVEL info or debug (it is %s): access lines are logged at info", strings.ToLower(c.LogLevel.String()))
	}
	if c.ResourceDepth < 0 {
		bad("RESOURCE_DEPTH", "%d must be 0 (whole path) or a positive number of segments", c.ResourceDepth)
	}
	if c.LeaseGrace != nil && *c.LeaseGrace < 0 {
		bad("LEASE_GRACE", "%s must not be negative", *c.LeaseGrace)
	}
	if c.LeaseRetention < 0 {
		bad("LEASE_RETENTION", "%s must not be negative", c.LeaseRetention)
	}
	if c.LeaseRevokeAfter < 0 {
		bad("LEASE_REVOKE_AFTER", "%s must not be negative", c.LeaseRevokeAfter)
	}
	if c.AbandonGrace < 0 {
		bad("ABANDON_GRACE", "%s must not be negative", c.AbandonGrace)
	} else if c.DrainTimeout > 0 && c.AbandonGrace >= c.DrainTimeout {
		// Otherwise every takeover after an abandoned write would time out.
		bad("ABANDON_GRACE", "%s must be below FENCEPROXY_DRAIN_TIMEOUT %s", c.AbandonGrace, c.DrainTimeout)
	}
	if _, err := c.TokenKeyBytes(); err != nil {
		bad("TOKEN_KEY", "%v", err)
	}
	if c.LeaseMinTTL > c.LeaseMaxTTL {
		bad("LEASE_MIN_TTL", "%s is above FENCEPROXY_LEASE_MAX_TTL %s", c.LeaseMinTTL, c.LeaseMaxTTL)
	}
	if c.LeaseMaxTTL > 0 && c.LeaseRevokeAfter >= c.LeaseMaxTTL {
		// A holder is suspect only before its lease expires: TTL after its last renew.
		bad("LEASE_REVOKE_AFTER", "%s must be below FENCEPROXY_LEASE_MAX_TTL %s: a lease whose TTL is at most FENCEPROXY_LEASE_REVOKE_AFTER "+
			"is never reported as suspect, so no lease ever would be", c.LeaseRevokeAfter, c.LeaseMaxTTL)
	}
	for name, d := range map[string]time.Duration{
		"DRAIN_TIMEOUT": c.DrainTimeout, "SHUTDOWN_TIMEOUT": c.ShutdownTimeout,
		"UPSTREAM_DIAL_TIMEOUT": c.UpstreamDialTimeout, "UPSTREAM_RESPONSE_TIMEOUT": c.UpstreamResponseTimeout,
		"LEASE_MIN_TTL": c.LeaseMinTTL, "LEASE_MAX_TTL": c.LeaseMaxTTL, "UPLOAD_IDLE_TIMEOUT": c.UploadIdleTimeout,
	} {
		if d <= 0 {
			bad(name, "%s must be a positive duration such as 30s", d)
		}
	}
	if c.UpstreamProbeInterval < minProbeInterval {
		bad("UPSTREAM_PROBE_INTERVAL", "%s is below the minimum of %s", c.UpstreamProbeInterval, minProbeInterval)
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// validateCluster checks the cluster-mode variables (STORE=etcd).
func (c Config) validateCluster(bad func(name, format string, args ...any)) {
	if len(c.EtcdEndpoints) == 0 {
		bad("ETCD_ENDPOINTS", "is required with FENCEPROXY_STORE=etcd: etcd client URLs such as http://etcd-0:2379")
	}
	for _, e := range c.EtcdEndpoints {
		if u, err := url.Parse(strings.TrimSpace(e)); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("ETCD_ENDPOINTS", "%q is not an http:// or https:// URL with a host", e)
		}
	}
	if !strings.HasPrefix(c.EtcdPrefix, "/") || !strings.HasSuffix(c.EtcdPrefix, "/") {
		bad("ETCD_PREFIX", "%q must start and end with /", c.EtcdPrefix)
	}
	if (c.EtcdCertFile == "") != (c.EtcdKeyFile == "") {
		bad("ETCD_CERT_FILE", "and FENCEPROXY_ETCD_KEY_FILE must be set both or neither")
	} else if c.EtcdCertFile != "" {
		if _, err := tls.LoadX509KeyPair(c.EtcdCertFile, c.EtcdKeyFile); err != nil {
			bad("ETCD_CERT_FILE", "cannot load the certificate and key: %v", err)
		}
	}
	if c.EtcdCAFile != "" {
		if _, err := loadCAs(c.EtcdCAFile); err != nil {
			bad("ETCD_CA_FILE", "%v", err)
		}
	}
	if (c.EtcdUsername == "") != (c.EtcdPassword == "") {
		bad("ETCD_USERNAME", "and FENCEPROXY_ETCD_PASSWORD must be set both or neither")
	}
	if c.Shards < 1 || c.Shards > maxShards {
		bad("SHARDS", "%d must be from 1 to %d", c.Shards, maxShards)
	}
	if c.ShardDepth < 0 || c.ShardDepth > maxShardDepth {
		bad("SHARD_DEPTH", "%d must be from 0 to %d", c.ShardDepth, maxShardDepth)
	}
	if !strings.Contains(c.PeerListen, ":") {
		bad("PEER_LISTEN", "%q is not a host:port address (for example :8081)", c.PeerListen)
	} else if c.PeerListen == c.Listen || c.PeerListen == c.ControlListen {
		if _, port, _ := net.SplitHostPort(c.PeerListen); port != "0" {
			bad("PEER_LISTEN", "%q is the address of another listener", c.PeerListen)
		}
	}
	if c.PeerAdvertise == "" {
		bad("PEER_ADVERTISE", "is required with FENCEPROXY_STORE=etcd: the host:port at which the other replicas reach FENCEPROXY_PEER_LISTEN")
	} else if host, port, err := net.SplitHostPort(c.PeerAdvertise); err != nil || host == "" || port == "" || port == "0" {
		bad("PEER_ADVERTISE", "%q is not a host:port address that peers can dial (for example 10.0.0.7:8081)", c.PeerAdvertise)
	}
	if c.ReplicaID == "" {
		bad("REPLICA_ID", "is required with FENCEPROXY_STORE=etcd when the host name is unknown: a name unique among the replicas, stable across restarts")
	} else if strings.ContainsAny(c.ReplicaID, "/ \t\n") {
		bad("REPLICA_ID", "%q must not contain a slash or white space", c.ReplicaID)
	}
	if len(c.PeerSecrets) == 0 {
		bad("PEER_SECRET", "is required with FENCEPROXY_STORE=etcd: a secret of at least %d characters shared by every replica", minPeerSecret)
	}
	for i, sec := range c.PeerSecrets {
		if len(sec) < minPeerSecret {
			bad("PEER_SECRET", "secret %d of %d has %d characters; each needs at least %d", i+1, len(c.PeerSecrets), len(sec), minPeerSecret)
		}
	}
	if c.EtcdMaxTxnOps < 3 {
		bad("ETCD_MAX_TXN_OPS", "%d must be at least 3 (and at most the etcd cluster's --max-txn-ops)", c.EtcdMaxTxnOps)
	}
	if c.ShardTTL < 2*time.Second {
		bad("SHARD_TTL", "%s is below the minimum of 2s (etcd leases count whole seconds)", c.ShardTTL)
	}
	switch need := c.LockDelayMin(); {
	case c.UpstreamUnsentMax > maxUnsent:
		// Reported above; the bound cannot be computed.
	case c.LockDelay == 0 && c.AbandonGrace > 0:
		bad("LOCK_DELAY", "0s (no lock-delay, for tests only) needs FENCEPROXY_ABANDON_GRACE=0s too, and is below FENCEPROXY_ABANDON_GRACE %s: "+
			"a write the old owner gave up on could land after the next owner's; give at least %s", c.AbandonGrace, need)
	case c.LockDelay != 0 && c.LockDelay < need:
		// The TTL: the lock-delay also bounds how long an old owner may
		// stall between admitting a write and sending it, and a keepalive
		// that an etcd leader answered in its last moment as leader.
		bad("LOCK_DELAY", "%s is below its minimum of %s here: at least FENCEPROXY_SHARD_TTL %s, and at least the bound of an old "+
			"owner's exchanges, %s = FENCEPROXY_ABANDON_GRACE %s + %s an exchange may run past its validity + %s for a backend "+
			"reading %s/s to take the FENCEPROXY_UPSTREAM_UNSENT_MAX %s a stopped owner's kernel may still send "+
			"(docs/CLUSTER.md, \"One bound for every exchange\"); give FENCEPROXY_LOCK_DELAY=%s or more, or lower the terms",
			c.LockDelay, need, c.ShardTTL, c.exchangeBound(), c.AbandonGrace, OwnerCutAllowance, drainTime(c.UpstreamUnsentMax),
			ByteSize(DrainRate), unsentText(c.UpstreamUnsentMax), need)
	}
	if c.Mode == "observe" {
		bad("MODE", "observe is not available with FENCEPROXY_STORE=etcd (it forwards writes outside the barrier that a handover drains)")
	}
}

// Loopback reports whether a listener on addr (host:port) is reachable
// from this host only: its host is a loopback IP address (127.0.0.0/8,
// ::1) or localhost. An empty host (every interface), 0.0.0.0, :: and any
// other address or name are not; nor is an addr that is no host:port.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// LeaseAPIGuard says, for logs, whether a credential guards the lease API
// (guarded: FENCEPROXY_LEASE_TOKEN is set) and what else limits who reaches
// it: a loopback-only control listener, or only the network
// (FENCEPROXY_LEASE_OPEN).
func (c Config) LeaseAPIGuard() (text string, guarded bool) {
	switch {
	case c.LeaseToken != "":
		return "guarded: lease and pool calls need the bearer token FENCEPROXY_LEASE_TOKEN", true
	case Loopback(c.ControlListen):
		return "no credential, loopback only: FENCEPROXY_LEASE_TOKEN is unset and the control listener takes connections from this host only", false
	default:
		return "no credential, open: FENCEPROXY_LEASE_TOKEN is unset and FENCEPROXY_LEASE_OPEN=true opens the lease API to whoever reaches FENCEPROXY_CONTROL_LISTEN", false
	}
}

// OwnerCutAllowance is how long after its ownership's validity ends an old
// owner's upstream exchange may still run: the fast path's deadline is the
// validity itself, the Transport's context is cancelled by a watch that
// polls every 100ms; the rest is scheduling.
const OwnerCutAllowance = 500 * time.Millisecond

// DrainRate is the slowest rate, in bytes per second, at which LockDelayMin
// assumes a backend reads what a stopped owner's kernel still holds for it.
const DrainRate = 64 << 10

// LockDelayMin is the shortest LOCK_DELAY cluster mode accepts: the
// larger of SHARD_TTL and the bound of an old owner's exchanges (see
// exchangeBound).
func (c Config) LockDelayMin() time.Duration {
	return max(c.ShardTTL, c.exchangeBound())
}

// exchangeBound covers everything an old owner may still send, or a backend
// still apply, once the owner's validity ended: ABANDON_GRACE (a backend
// applying a write it got whole after the exchange was cut),
// OwnerCutAllowance, and UPSTREAM_UNSENT_MAX read at DrainRate (a stopped
// owner's kernel sends what it holds without it).
func (c Config) exchangeBound() time.Duration {
	return c.AbandonGrace + OwnerCutAllowance + drainTime(c.UpstreamUnsentMax)
}

// drainTime is how long n bytes take at DrainRate; 0 bytes (the system's
// send buffer, unbounded here) counts as 4 MiB, Linux's largest.
func drainTime(n ByteSize) time.Duration {
	if n == 0 {
		n = 4 << 20
	}
	return time.Duration(float64(n) / DrainRate * float64(time.Second))
}

// maxUnsent bounds UPSTREAM_UNSENT_MAX: TCP_NOTSENT_LOWAT is a 32-bit value.
const maxUnsent = 1 << 30

// unsentText names UPSTREAM_UNSENT_MAX's bound as drainTime counts it.
func unsentText(n ByteSize) string {
	if n == 0 {
		return "0 (the system's send buffer, counted as 4 MiB)"
	}
	return n.String()
}

// minProbeInterval is the shortest UPSTREAM_PROBE_INTERVAL.
const minProbeInterval = 100 * time.Millisecond

// UpstreamAddr is the host:port a connection to Upstream dials: its port,
// or the scheme's (80 for http, 443 for https) when it names none; "" when
// Upstream is nil.
func (c Config) UpstreamAddr() string {
	u := c.Upstream
	if u == nil {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// maxShardDepth bounds SHARD_DEPTH: deeper keys are rare, and each
// prefix fence needs as many segments.
const maxShardDepth = 32

// maxShards bounds SHARDS: each shard is an etcd key and a watch event.
const maxShards = 4096

// minPeerSecret is the shortest PEER_SECRET.
const minPeerSecret = 16

// minCacheSize is the smallest CACHE_SIZE, in bytes (1MiB).
const minCacheSize = 1 << 20

const cacheTooSmall = "a cache that small sends nearly every write to the disk"

// DefaultAbandonGrace is ABANDON_GRACE when unset (capped at half of DRAIN_TIMEOUT).
const DefaultAbandonGrace = 5 * time.Second

// TokenKeyBytes decodes TokenKeys (standard or URL-safe base64, padded or
// not); nil when signed-token mode is off. Errors name the key's position,
// never its value.
func (c Config) TokenKeyBytes() ([][]byte, error) {
	var keys [][]byte
	for i, k := range c.TokenKeys {
		k = strings.TrimSpace(k)
		var b []byte
		var err error
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if b, err = enc.DecodeString(k); err == nil {
				break
			}
		}
		switch {
		case err != nil:
			return nil, fmt.Errorf("key %d is not base64", i+1)
		case len(b) < tokensig.MinKeyBytes:
			return nil, fmt.Errorf("key %d has %d bytes; give at least %d (head -c 32 /dev/urandom | base64)", i+1, len(b), tokensig.MinKeyBytes)
		}
		keys = append(keys, b)
	}
	return keys, nil
}

// ByteSize is a size in bytes read from "128MiB", "1GB" or "4096"
// (github.com/dustin/go-humanize's ParseBytes: SI and IEC units).
type ByteSize uint64

// UnmarshalText parses a size such as 128MiB.
func (b *ByteSize) UnmarshalText(text []byte) error {
	n, err := humanize.ParseBytes(string(text))
	if err != nil {
		return fmt.Errorf("%q is not a size such as 128MiB", text)
	}
	*b = ByteSize(n)
	return nil
}

// String formats the size in IEC units (128 MiB).
func (b ByteSize) String() string { return humanize.IBytes(uint64(b)) }

// UpstreamCAs returns the pool of UpstreamCAFile, nil when it is unset (the
// system roots apply). Errors name the file.
func (c Config) UpstreamCAs() (*x509.CertPool, error) {
	if c.UpstreamCAFile == "" {
		return nil, nil
	}
	return loadCAs(c.UpstreamCAFile)
}

// EtcdTLS returns the TLS configuration for etcd's client from ETCD_CA_FILE,
// ETCD_CERT_FILE and ETCD_KEY_FILE; nil when none is set (plain or
// https:// with the system roots decided by the endpoints). Errors name the file.
func (c Config) EtcdTLS() (*tls.Config, error) {
	if c.EtcdCAFile == "" && c.EtcdCertFile == "" {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.EtcdCAFile != "" {
		pool, err := loadCAs(c.EtcdCAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = pool
	}
	if c.EtcdCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.EtcdCertFile, c.EtcdKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.EtcdCertFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// loadCAs reads a PEM CA bundle.
func loadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// reservedHeaders are the headers TOKEN_HEADER may not name (canonical
// form), with the reason. Each already means something to HTTP, to the
// proxy or to a proxy in front of it: read as the token, its value would be
// something else (Content-Length: the body's length), or the header would be
// dropped before the backend, rewritten by a front proxy, or acted on as
// itself (a method override, a WebDAV Destination, the signature). Prefixes
// in reservedHeaderPrefixes are refused likewise.
var reservedHeaders = func() map[string]string {
	m := map[string]string{
		// Framing (RFC 9112): they decide where the body ends.
		"Content-Length":    "frames the body (its length would be the token)",
		"Transfer-Encoding": "frames the body",
		"Trailer":           "announces trailer fields, which never carry the token",
		// Hop-by-hop (RFC 9110 section 7.6.1): not forwarded to the backend.
		"Connection": "is hop-by-hop", "Keep-Alive": "is hop-by-hop", "Te": "is hop-by-hop", "Upgrade": "is hop-by-hop",
		// Routing: they decide which resources and which method a write is.
		"Host":           "names the request's target host",
		"Destination":    "names a WebDAV write's second resource",
		"Expect":         "controls the upload (100-continue)",
		"Forwarded":      "is set by proxies in front of fenceproxy",
		"Via":            "is set by proxies in front of fenceproxy",
		"Max-Forwards":   "is counted down by proxies in front of fenceproxy",
		"Http2-Settings": "is hop-by-hop (an h2c upgrade's settings)",
		// Representation and ranges: the backend reads them as what the body is.
		"Content-Type": "describes the body", "Content-Encoding": "describes the body", "Content-Range": "describes the body",
		"Range": "selects part of a representation", "Date": "is the message's date",
		// Credentials of the backend.
		"Authorization": "carries the backend's credentials", "Cookie": "carries the backend's credentials",
		// fenceproxy's own.
		wire.HeaderSignature:    "carries the token's signature in signed-token mode",
		wire.HeaderPrefix:       "names the prefix fence a token is for",
		wire.HeaderRefused:      "is fenceproxy's refusal header",
		wire.HeaderCurrentToken: "is fenceproxy's refusal header",
		wire.HeaderResource:     "is fenceproxy's refusal header",
	}
	for _, h := range wire.MethodOverrideHeaders {
		m[h] = "asks the backend for another method"
	}
	return m
}()

var reservedHeaderPrefixes = map[string]string{
	"Proxy-":       "is for proxies (hop-by-hop or proxy credentials)",
	"X-Forwarded-": "is set by proxies in front of fenceproxy",
}

// reservedHeader returns why name may not carry the token, "" when it may.
func reservedHeader(name string) string {
	name = textproto.CanonicalMIMEHeaderKey(name)
	if why, ok := reservedHeaders[name]; ok {
		return why
	}
	for prefix, why := range reservedHeaderPrefixes {
		if strings.HasPrefix(name, prefix) {
			return why
		}
	}
	return ""
}

// validToken reports whether s is a non-empty RFC 9110 token (header names, methods).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c >= 0x7f || c <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c) {
			return false
		}
	}
	return true
}

// Field describes one configuration variable for help output.
type Field struct {
	Var, Field, Default, Help string
	Required                  bool
}

// fields lists Config's variables in declaration order.
func fields() []Field {
	var out []Field
	t := reflect.TypeOf(Config{})
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name, opts, _ := strings.Cut(sf.Tag.Get("env"), ",")
		out = append(out, Field{
			Var: Prefix + name, Field: sf.Name, Default: sf.Tag.Get("envDefault"),
			Help: sf.Tag.Get("help"), Required: strings.Contains(opts, "required"),
		})
	}
	return out
}

// Usage returns the help text listing every variable with its default and meaning.
func Usage() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tDEFAULT\tMEANING")
	for _, f := range fields() {
		def := f.Default
		switch {
		case f.Required:
			def = "(required)"
		case def == "":
			def = "(unset)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Var, def, f.Help)
	}
	tw.Flush()
	return b.String()
}
