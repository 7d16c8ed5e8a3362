package config

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// minimal is the smallest valid environment: the two required variables.
func minimal() map[string]string {
	return map[string]string{
		"FENCEPROXY_UPSTREAM": "http://127.0.0.1:9000",
		"FENCEPROXY_DATA_DIR": "/var/lib/fenceproxy",
	}
}

// with returns minimal() changed by kv pairs (name, value, ...); a value of
// unset removes the variable.
func with(kv ...string) map[string]string {
	m := minimal()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == unset {
			delete(m, kv[i])
			continue
		}
		m[kv[i]] = kv[i+1]
	}
	return m
}

const unset = "\x00unset"

// cluster is a minimal cluster-mode environment (no DATA_DIR).
func cluster() map[string]string {
	return clusterWith()
}

func clusterWith(kv ...string) map[string]string {
	base := []string{"FENCEPROXY_DATA_DIR", unset, "FENCEPROXY_STORE", "etcd", "FENCEPROXY_ETCD_ENDPOINTS", "http://127.0.0.1:2379",
		"FENCEPROXY_PEER_ADVERTISE", "10.0.0.7:8081", "FENCEPROXY_PEER_SECRET", "0123456789abcdef"}
	return with(append(base, kv...)...)
}

func TestParseDefaults(t *testing.T) {
	cfg, warnings, err := Parse(minimal())
	if err != nil {
		t.Fatalf("Parse(minimal) = %v", err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings = %q, want none", warnings)
	}
	if cfg.Upstream == nil || cfg.Upstream.String() != "http://127.0.0.1:9000" {
		t.Errorf("Upstream = %v, want http://127.0.0.1:9000", cfg.Upstream)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Listen", cfg.Listen, ":8080"},
		{"ControlListen", cfg.ControlListen, "127.0.0.1:9090"},
		{"LeaseOpen", cfg.LeaseOpen, false},
		{"UpstreamProbeInterval", cfg.UpstreamProbeInterval, 5 * time.Second},
		{"ReadyNeedsUpstream", cfg.ReadyNeedsUpstream, false},
		{"DataDir", cfg.DataDir, "/var/lib/fenceproxy"},
		{"TokenHeader", cfg.TokenHeader, "X-Fencing-Token"},
		{"UnfencedMethods", cfg.UnfencedMethods, []string{"GET", "HEAD", "OPTIONS"}},
		{"ResourceDepth", cfg.ResourceDepth, 0},
		{"RequireToken", cfg.RequireToken, true},
		{"DrainTimeout", cfg.DrainTimeout, 30 * time.Second},
		{"ShutdownTimeout", cfg.ShutdownTimeout, 30 * time.Second},
		{"UpstreamDialTimeout", cfg.UpstreamDialTimeout, 5 * time.Second},
		{"UpstreamResponseTimeout", cfg.UpstreamResponseTimeout, 60 * time.Second},
		{"AdminToken", cfg.AdminToken, ""},
		{"LogLevel", cfg.LogLevel, slog.LevelInfo},
		{"AccessLog", cfg.AccessLog, false},
		{"Tracing", cfg.Tracing, false},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate() of the defaults = %v", err)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		// wantErr lists substrings the error must contain; empty: no error.
		wantErr []string
		// notErr lists substrings the error must not contain (variables that
		// are not wrong).
		notErr []string
		check  func(t *testing.T, cfg Config, warnings []string)
	}{
		{name: "minimal", env: minimal(),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.MaxUploads != 1024 || cfg.MaxConnections != 2048 || cfg.UploadMinRate != 1024 || cfg.UploadRateWindow != 30*time.Second {
					t.Errorf("overload defaults: MAX_UPLOADS %d, MAX_CONNECTIONS %d, UPLOAD_MIN_RATE %d, UPLOAD_RATE_WINDOW %s",
						cfg.MaxUploads, cfg.MaxConnections, cfg.UploadMinRate, cfg.UploadRateWindow)
				}
			}},
		{name: "overload limits off", env: with("FENCEPROXY_MAX_UPLOADS", "0", "FENCEPROXY_MAX_CONNECTIONS", "0", "FENCEPROXY_UPLOAD_MIN_RATE", "0",
			"FENCEPROXY_UPLOAD_RATE_WINDOW", "0s")},
		{name: "overload limits out of range", env: with("FENCEPROXY_MAX_UPLOADS", "-1", "FENCEPROXY_MAX_CONNECTIONS", "-5",
			"FENCEPROXY_UPLOAD_MIN_RATE", "2GiB", "FENCEPROXY_UPLOAD_RATE_WINDOW", "10ms"),
			wantErr: []string{"FENCEPROXY_MAX_UPLOADS: -1", "FENCEPROXY_MAX_CONNECTIONS: -5", "FENCEPROXY_UPLOAD_MIN_RATE: 2.0 GiB", "FENCEPROXY_UPLOAD_RATE_WINDOW: 10ms"}},
		{name: "cluster minimal", env: cluster(),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.Store != "etcd" || cfg.Shards != 64 || cfg.EtcdPrefix != "/fenceproxy/" || cfg.PeerListen != ":8081" ||
					cfg.ShardTTL != 10*time.Second || cfg.LockDelay != 15*time.Second || cfg.EtcdMaxTxnOps != 128 || cfg.ReplicaID == "" {
					t.Errorf("cluster defaults: %+v", cfg)
				}
			}},
		{name: "cluster needs endpoints, advertise, secret", env: clusterWith("FENCEPROXY_ETCD_ENDPOINTS", unset, "FENCEPROXY_PEER_ADVERTISE", unset, "FENCEPROXY_PEER_SECRET", unset),
			wantErr: []string{"FENCEPROXY_ETCD_ENDPOINTS", "FENCEPROXY_PEER_ADVERTISE", "FENCEPROXY_PEER_SECRET"}, notErr: []string{"FENCEPROXY_DATA_DIR"}},
		{name: "cluster bad values", env: clusterWith("FENCEPROXY_ETCD_ENDPOINTS", "etcd-0:2379", "FENCEPROXY_PEER_ADVERTISE", ":8081",
			"FENCEPROXY_PEER_SECRET", "0123456789abcdef,short", "FENCEPROXY_SHARDS", "0", "FENCEPROXY_SHARD_TTL", "1s",
			"FENCEPROXY_ETCD_PREFIX", "fenceproxy", "FENCEPROXY_MODE", "observe", "FENCEPROXY_ETCD_USERNAME", "u", "FENCEPROXY_ETCD_MAX_TXN_OPS", "2"),
			wantErr: []string{"FENCEPROXY_ETCD_ENDPOINTS", "FENCEPROXY_PEER_ADVERTISE", "secret 2 of 2 has 5 characters", "FENCEPROXY_SHARDS",
				"FENCEPROXY_SHARD_TTL", "FENCEPROXY_ETCD_PREFIX", "FENCEPROXY_MODE", "FENCEPROXY_ETCD_USERNAME", "FENCEPROXY_ETCD_MAX_TXN_OPS"},
			notErr: []string{"0123456789abcdef"}},
		{name: "cluster lock-delay below the abandon grace", env: clusterWith("FENCEPROXY_LOCK_DELAY", "2s", "FENCEPROXY_ABANDON_GRACE", "3s"),
			wantErr: []string{"FENCEPROXY_LOCK_DELAY", "2s is below its minimum of 10s", "5.5s = FENCEPROXY_ABANDON_GRACE 3s"}},
		{name: "cluster lock-delay below the bound of an owner's exchanges", env: clusterWith("FENCEPROXY_LOCK_DELAY", "6s", "FENCEPROXY_ABANDON_GRACE", "5s"),
			wantErr: []string{"FENCEPROXY_LOCK_DELAY", "6s is below its minimum of 10s", "FENCEPROXY_SHARD_TTL 10s", "7.5s = FENCEPROXY_ABANDON_GRACE 5s",
				"FENCEPROXY_UPSTREAM_UNSENT_MAX 128 KiB", "give FENCEPROXY_LOCK_DELAY=10s or more"}},
		{name: "cluster lock-delay covers a smaller unsent bound", env: clusterWith("FENCEPROXY_LOCK_DELAY", "6s", "FENCEPROXY_ABANDON_GRACE", "5s", "FENCEPROXY_UPSTREAM_UNSENT_MAX", "32KiB", "FENCEPROXY_SHARD_TTL", "5s"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.LockDelayMin() != 6*time.Second {
					t.Errorf("LockDelayMin = %s, want 6s (the bound, above the TTL)", cfg.LockDelayMin())
				}
			}},
		{name: "cluster lock-delay off needs the abandon grace off", env: clusterWith("FENCEPROXY_LOCK_DELAY", "0s"),
			wantErr: []string{"FENCEPROXY_LOCK_DELAY", "needs FENCEPROXY_ABANDON_GRACE=0s", "give at least 10s"}},
		{name: "unsent bound too large", env: clusterWith("FENCEPROXY_UPSTREAM_UNSENT_MAX", "8EiB"),
			wantErr: []string{"FENCEPROXY_UPSTREAM_UNSENT_MAX", "above the maximum of 1 GiB"}, notErr: []string{"FENCEPROXY_LOCK_DELAY"}},
		{name: "cluster lock-delay with the system's send buffer", env: clusterWith("FENCEPROXY_LOCK_DELAY", "60s", "FENCEPROXY_ABANDON_GRACE", "5s", "FENCEPROXY_UPSTREAM_UNSENT_MAX", "0"),
			wantErr: []string{"FENCEPROXY_LOCK_DELAY", "1m0s is below its minimum of 1m9.5s", "counted as 4 MiB"}},
		{name: "cluster lock-delay below the TTL", env: clusterWith("FENCEPROXY_SHARD_TTL", "20s", "FENCEPROXY_LOCK_DELAY", "15s"),
			wantErr: []string{"FENCEPROXY_LOCK_DELAY", "15s is below its minimum of 20s", "FENCEPROXY_SHARD_TTL 20s"}},
		{name: "cluster lock-delay off", env: clusterWith("FENCEPROXY_LOCK_DELAY", "0s", "FENCEPROXY_ABANDON_GRACE", "0s"),
			check: func(t *testing.T, cfg Config, warnings []string) {
				if cfg.LockDelay != 0 || !strings.Contains(strings.Join(warnings, "\n"), "LOCK_DELAY is 0s") {
					t.Errorf("lock-delay %v, warnings %q; want 0 and its warning", cfg.LockDelay, warnings)
				}
			}},
		{name: "store unknown", env: with("FENCEPROXY_STORE", "redis"), wantErr: []string{"FENCEPROXY_STORE"}},
		{name: "badger needs DATA_DIR", env: with("FENCEPROXY_DATA_DIR", unset), wantErr: []string{"FENCEPROXY_DATA_DIR"}},
		{name: "UPSTREAM missing", env: with("FENCEPROXY_UPSTREAM", unset), wantErr: []string{"FENCEPROXY_UPSTREAM"}},
		{name: "UPSTREAM empty", env: with("FENCEPROXY_UPSTREAM", ""), wantErr: []string{"FENCEPROXY_UPSTREAM"}},
		{name: "UPSTREAM not a url", env: with("FENCEPROXY_UPSTREAM", "not a url"), wantErr: []string{"FENCEPROXY_UPSTREAM"}},
		{name: "UPSTREAM ftp", env: with("FENCEPROXY_UPSTREAM", "ftp://x"), wantErr: []string{"FENCEPROXY_UPSTREAM"}},
		{name: "UPSTREAM no host", env: with("FENCEPROXY_UPSTREAM", "http://"), wantErr: []string{"FENCEPROXY_UPSTREAM", "no host"}},
		{name: "UPSTREAM query", env: with("FENCEPROXY_UPSTREAM", "http://h/p?q=1"), wantErr: []string{"FENCEPROXY_UPSTREAM", "query"}},
		{name: "UPSTREAM fragment", env: with("FENCEPROXY_UPSTREAM", "http://h/p#f"), wantErr: []string{"FENCEPROXY_UPSTREAM"}},
		{name: "UPSTREAM user info", env: with("FENCEPROXY_UPSTREAM", "http://u:secret@h/"), wantErr: []string{"FENCEPROXY_UPSTREAM"}},
		{name: "UPSTREAM with path", env: with("FENCEPROXY_UPSTREAM", "https://h:8443/base/"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.Upstream.Scheme != "https" || cfg.Upstream.Host != "h:8443" || cfg.Upstream.Path != "/base/" {
					t.Errorf("Upstream = %#v", cfg.Upstream)
				}
			}},
		{name: "UNFENCED_METHODS lower case", env: with("FENCEPROXY_UNFENCED_METHODS", "get,head"), wantErr: []string{"FENCEPROXY_UNFENCED_METHODS", `did you mean "GET"`}},
		{name: "UNFENCED_METHODS with a write method warns", env: with("FENCEPROXY_UNFENCED_METHODS", "GET,PUT"),
			check: func(t *testing.T, cfg Config, warnings []string) {
				if !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "PUT writes through unchecked") }) {
					t.Errorf("no warning about unfenced PUT: %q", warnings)
				}
			}},
		{name: "required and empty says so", env: with("FENCEPROXY_UPSTREAM", ""), wantErr: []string{"FENCEPROXY_UPSTREAM is required but empty"}},
		{name: "DATA_DIR missing", env: with("FENCEPROXY_DATA_DIR", unset), wantErr: []string{"FENCEPROXY_DATA_DIR"}},
		{name: "DATA_DIR empty", env: with("FENCEPROXY_DATA_DIR", ""), wantErr: []string{"FENCEPROXY_DATA_DIR"}},
		{name: "DRAIN_TIMEOUT without unit", env: with("FENCEPROXY_DRAIN_TIMEOUT", "10"), wantErr: []string{"FENCEPROXY_DRAIN_TIMEOUT"}},
		{name: "DRAIN_TIMEOUT negative", env: with("FENCEPROXY_DRAIN_TIMEOUT", "-1s"), wantErr: []string{"FENCEPROXY_DRAIN_TIMEOUT"}},
		{name: "DRAIN_TIMEOUT zero", env: with("FENCEPROXY_DRAIN_TIMEOUT", "0s"), wantErr: []string{"FENCEPROXY_DRAIN_TIMEOUT"}},
		{name: "DRAIN_TIMEOUT empty", env: with("FENCEPROXY_DRAIN_TIMEOUT", ""), wantErr: []string{"FENCEPROXY_DRAIN_TIMEOUT"}},
		{name: "SHUTDOWN_TIMEOUT bad", env: with("FENCEPROXY_SHUTDOWN_TIMEOUT", "soon"), wantErr: []string{"FENCEPROXY_SHUTDOWN_TIMEOUT"}},
		{name: "S3 pass without domains", env: with("FENCEPROXY_S3", "pass"), wantErr: []string{"FENCEPROXY_S3_DOMAINS", "required"}},
		{name: "S3 pass with a domain with a port", env: with("FENCEPROXY_S3", "pass", "FENCEPROXY_S3_DOMAINS", "localhost:8080"),
			wantErr: []string{"FENCEPROXY_S3_DOMAINS", "localhost:8080"}},
		{name: "S3 pass with a URL", env: with("FENCEPROXY_S3", "pass", "FENCEPROXY_S3_DOMAINS", "http://s3.internal"), wantErr: []string{"FENCEPROXY_S3_DOMAINS"}},
		{name: "S3 unknown", env: with("FENCEPROXY_S3", "gateway"), wantErr: []string{"FENCEPROXY_S3", "off, pass or resign"}},
		{name: "S3 resign without keys", env: with("FENCEPROXY_S3", "resign", "FENCEPROXY_S3_DOMAINS", "localhost"),
			wantErr: []string{"FENCEPROXY_S3_CREDENTIALS_FILE", "required"}},
		{name: "S3 resign with a bad keys file", env: with("FENCEPROXY_S3", "resign", "FENCEPROXY_S3_DOMAINS", "localhost",
			"FENCEPROXY_S3_CREDENTIALS_FILE", writeTemp(t, "keys:\n  - access_key_id: w1\n    secret_access_key: short\n")),
			wantErr: []string{"FENCEPROXY_S3_CREDENTIALS_FILE", "keys[0]"}},
		{name: "S3 resign store style", env: with("FENCEPROXY_S3", "resign", "FENCEPROXY_S3_DOMAINS", "localhost",
			"FENCEPROXY_S3_CREDENTIALS_FILE", writeTemp(t, "keys:\n  - access_key_id: w1\n    secret_access_key: 0123456789abcdef0123\n    grants: [{bucket: jobs, access: read}]\n"),
			"FENCEPROXY_S3_STORE_STYLE", "dns"), wantErr: []string{"FENCEPROXY_S3_STORE_STYLE", "path or virtual"}},
		{name: "S3 keys file while pass", env: with("FENCEPROXY_S3", "pass", "FENCEPROXY_S3_DOMAINS", "localhost", "FENCEPROXY_S3_CREDENTIALS_FILE", "/k.yaml"),
			wantErr: []string{"FENCEPROXY_S3_CREDENTIALS_FILE", "resign"}},
		{name: "S3_BUCKET_WRITES unknown", env: with("FENCEPROXY_S3_BUCKET_WRITES", "allow"), wantErr: []string{"FENCEPROXY_S3_BUCKET_WRITES", "refuse, pass or fence"}},
		{name: "S3 domains while off", env: with("FENCEPROXY_S3_DOMAINS", "localhost"), wantErr: []string{"FENCEPROXY_S3_DOMAINS", "off"}},
		{name: "S3 pass", env: with("FENCEPROXY_S3", "pass", "FENCEPROXY_S3_DOMAINS", "s3.internal,localhost,127.0.0.1"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.S3 != "pass" || len(cfg.S3Domains) != 3 {
					t.Errorf("S3 %q domains %q", cfg.S3, cfg.S3Domains)
				}
			}},
		{name: "CACHE_SIZE below 1MiB", env: with("FENCEPROXY_CACHE_SIZE", "512KiB"), wantErr: []string{"FENCEPROXY_CACHE_SIZE", "1MiB"}},
		{name: "CACHE_SIZE zero", env: with("FENCEPROXY_CACHE_SIZE", "0"), wantErr: []string{"FENCEPROXY_CACHE_SIZE"}},
		// The value as typed and as read: 1MB is SI, below 1MiB.
		{name: "CACHE_SIZE 1MB echoes the value typed", env: with("FENCEPROXY_CACHE_SIZE", "1MB"),
			wantErr: []string{`FENCEPROXY_CACHE_SIZE: "1MB" (977 KiB) is below the minimum of 1MiB`}},
		{name: "CACHE_SIZE 1MiB", env: with("FENCEPROXY_CACHE_SIZE", "1MiB")},
		{name: "CACHE_SIZE bare number is bytes", env: with("FENCEPROXY_CACHE_SIZE", "2097152"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.CacheSize != 2<<20 {
					t.Errorf("CacheSize = %d, want 2097152 bytes", cfg.CacheSize)
				}
			}},
		{name: "CACHE_SIZE not a size", env: with("FENCEPROXY_CACHE_SIZE", "lots"), wantErr: []string{"FENCEPROXY_CACHE_SIZE"}},
		{name: "UPSTREAM_DIAL_TIMEOUT negative", env: with("FENCEPROXY_UPSTREAM_DIAL_TIMEOUT", "-5s"), wantErr: []string{"FENCEPROXY_UPSTREAM_DIAL_TIMEOUT"}},
		{name: "UPSTREAM_RESPONSE_TIMEOUT zero", env: with("FENCEPROXY_UPSTREAM_RESPONSE_TIMEOUT", "0"), wantErr: []string{"FENCEPROXY_UPSTREAM_RESPONSE_TIMEOUT"}},
		{name: "DRAIN_TIMEOUT valid", env: with("FENCEPROXY_DRAIN_TIMEOUT", "1500ms"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.DrainTimeout != 1500*time.Millisecond {
					t.Errorf("DrainTimeout = %v, want 1.5s", cfg.DrainTimeout)
				}
			}},
		{name: "RESOURCE_DEPTH negative", env: with("FENCEPROXY_RESOURCE_DEPTH", "-1"), wantErr: []string{"FENCEPROXY_RESOURCE_DEPTH"}},
		{name: "RESOURCE_DEPTH word", env: with("FENCEPROXY_RESOURCE_DEPTH", "two"), wantErr: []string{"FENCEPROXY_RESOURCE_DEPTH"}},
		{name: "RESOURCE_DEPTH 2", env: with("FENCEPROXY_RESOURCE_DEPTH", "2"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.ResourceDepth != 2 {
					t.Errorf("ResourceDepth = %d, want 2", cfg.ResourceDepth)
				}
			}},
		{name: "REQUIRE_TOKEN maybe", env: with("FENCEPROXY_REQUIRE_TOKEN", "maybe"), wantErr: []string{"FENCEPROXY_REQUIRE_TOKEN"}},
		{name: "REQUIRE_TOKEN false", env: with("FENCEPROXY_REQUIRE_TOKEN", "false"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.RequireToken {
					t.Error("RequireToken = true, want false")
				}
			}},
		// A token header that HTTP, the proxy or a front proxy already gives
		// a meaning would read something else as the token.
		{name: "TOKEN_HEADER Content-Length", env: with("FENCEPROXY_TOKEN_HEADER", "Content-Length"),
			wantErr: []string{"FENCEPROXY_TOKEN_HEADER", "frames the body (its length would be the token)"}},
		{name: "TOKEN_HEADER content-length in lower case", env: with("FENCEPROXY_TOKEN_HEADER", "content-length"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Host", env: with("FENCEPROXY_TOKEN_HEADER", "Host"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER", "target host"}},
		{name: "TOKEN_HEADER Destination", env: with("FENCEPROXY_TOKEN_HEADER", "Destination"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER", "WebDAV"}},
		{name: "TOKEN_HEADER the signature header", env: with("FENCEPROXY_TOKEN_HEADER", "X-Fencing-Token-Signature"),
			wantErr: []string{"FENCEPROXY_TOKEN_HEADER", "signature"}},
		{name: "TOKEN_HEADER the prefix header", env: with("FENCEPROXY_TOKEN_HEADER", "x-fencing-prefix"),
			wantErr: []string{"FENCEPROXY_TOKEN_HEADER", "prefix fence"}},
		{name: "TOKEN_HEADER Transfer-Encoding", env: with("FENCEPROXY_TOKEN_HEADER", "Transfer-Encoding"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Connection", env: with("FENCEPROXY_TOKEN_HEADER", "Connection"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER", "hop-by-hop"}},
		{name: "TOKEN_HEADER TE", env: with("FENCEPROXY_TOKEN_HEADER", "TE"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER", "hop-by-hop"}},
		{name: "TOKEN_HEADER Trailer", env: with("FENCEPROXY_TOKEN_HEADER", "Trailer"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Upgrade", env: with("FENCEPROXY_TOKEN_HEADER", "Upgrade"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Keep-Alive", env: with("FENCEPROXY_TOKEN_HEADER", "Keep-Alive"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Expect", env: with("FENCEPROXY_TOKEN_HEADER", "Expect"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Authorization", env: with("FENCEPROXY_TOKEN_HEADER", "Authorization"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER", "credentials"}},
		{name: "TOKEN_HEADER Cookie", env: with("FENCEPROXY_TOKEN_HEADER", "Cookie"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER a method override", env: with("FENCEPROXY_TOKEN_HEADER", "x-http-method-override"),
			wantErr: []string{"FENCEPROXY_TOKEN_HEADER", "another method"}},
		{name: "TOKEN_HEADER X-Method-Override", env: with("FENCEPROXY_TOKEN_HEADER", "X-Method-Override"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER X-HTTP-Method", env: with("FENCEPROXY_TOKEN_HEADER", "X-HTTP-Method"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Proxy-Authorization", env: with("FENCEPROXY_TOKEN_HEADER", "Proxy-Authorization"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Proxy-Connection", env: with("FENCEPROXY_TOKEN_HEADER", "Proxy-Connection"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER X-Forwarded-For", env: with("FENCEPROXY_TOKEN_HEADER", "X-Forwarded-For"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Forwarded", env: with("FENCEPROXY_TOKEN_HEADER", "Forwarded"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Fencing-Current-Token", env: with("FENCEPROXY_TOKEN_HEADER", "Fencing-Current-Token"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Via", env: with("FENCEPROXY_TOKEN_HEADER", "Via"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Max-Forwards", env: with("FENCEPROXY_TOKEN_HEADER", "Max-Forwards"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER HTTP2-Settings", env: with("FENCEPROXY_TOKEN_HEADER", "HTTP2-Settings"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Content-Type", env: with("FENCEPROXY_TOKEN_HEADER", "Content-Type"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Content-Encoding", env: with("FENCEPROXY_TOKEN_HEADER", "Content-Encoding"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Range", env: with("FENCEPROXY_TOKEN_HEADER", "Range"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER Date", env: with("FENCEPROXY_TOKEN_HEADER", "Date"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER of its own", env: with("FENCEPROXY_TOKEN_HEADER", "X-Lock-Token"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.TokenHeader != "X-Lock-Token" {
					t.Errorf("TokenHeader = %q, want X-Lock-Token", cfg.TokenHeader)
				}
			}},
		// An explicit 0s is no grace; unset is 2/3 of each lease's TTL.
		{name: "LEASE_GRACE unset", env: minimal(),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.LeaseGrace != nil {
					t.Errorf("LeaseGrace = %v, want nil (2/3 of the TTL)", *cfg.LeaseGrace)
				}
			}},
		{name: "LEASE_GRACE 0s is none", env: with("FENCEPROXY_LEASE_GRACE", "0s"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.LeaseGrace == nil || *cfg.LeaseGrace != 0 {
					t.Errorf("LeaseGrace = %v, want a pointer to 0", cfg.LeaseGrace)
				}
			}},
		{name: "LEASE_GRACE 2s", env: with("FENCEPROXY_LEASE_GRACE", "2s"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.LeaseGrace == nil || *cfg.LeaseGrace != 2*time.Second {
					t.Errorf("LeaseGrace = %v, want a pointer to 2s", cfg.LeaseGrace)
				}
			}},
		{name: "LEASE_GRACE negative", env: with("FENCEPROXY_LEASE_GRACE", "-1s"), wantErr: []string{"FENCEPROXY_LEASE_GRACE", "negative"}},
		{name: "LEASE_RETENTION default", env: minimal(),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.LeaseRetention != 15*time.Minute {
					t.Errorf("LeaseRetention = %v, want 15m", cfg.LeaseRetention)
				}
			}},
		{name: "LEASE_RETENTION 0s", env: with("FENCEPROXY_LEASE_RETENTION", "0s"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.LeaseRetention != 0 {
					t.Errorf("LeaseRetention = %v, want 0", cfg.LeaseRetention)
				}
			}},
		{name: "LEASE_RETENTION negative", env: with("FENCEPROXY_LEASE_RETENTION", "-1s"), wantErr: []string{"FENCEPROXY_LEASE_RETENTION", "negative"}},
		{name: "LEASE_GRACE empty", env: with("FENCEPROXY_LEASE_GRACE", ""), wantErr: []string{"FENCEPROXY_LEASE_GRACE"}},
		// A holder is suspect only before its lease expires.
		{name: "LEASE_REVOKE_AFTER above LEASE_MAX_TTL", env: with("FENCEPROXY_LEASE_REVOKE_AFTER", "2h"),
			wantErr: []string{"FENCEPROXY_LEASE_REVOKE_AFTER", "FENCEPROXY_LEASE_MAX_TTL",
				"a lease whose TTL is at most FENCEPROXY_LEASE_REVOKE_AFTER is never reported as suspect, so no lease ever would be"},
			notErr: []string{"before its lease expires"}},
		{name: "LEASE_REVOKE_AFTER equal to LEASE_MAX_TTL", env: with("FENCEPROXY_LEASE_REVOKE_AFTER", "30s", "FENCEPROXY_LEASE_MAX_TTL", "30s"),
			wantErr: []string{"FENCEPROXY_LEASE_REVOKE_AFTER", "FENCEPROXY_LEASE_MAX_TTL"}},
		{name: "LEASE_REVOKE_AFTER below LEASE_MAX_TTL", env: with("FENCEPROXY_LEASE_REVOKE_AFTER", "29s", "FENCEPROXY_LEASE_MAX_TTL", "30s")},
		{name: "LEASE_REVOKE_AFTER 0s", env: with("FENCEPROXY_LEASE_REVOKE_AFTER", "0s"),
			wantErr: []string{"FENCEPROXY_LEASE_REVOKE_AFTER", "unset it for half the lease's TTL"}},
		{name: "LEASE_REVOKE_AFTER negative", env: with("FENCEPROXY_LEASE_REVOKE_AFTER", "-1s"), wantErr: []string{"FENCEPROXY_LEASE_REVOKE_AFTER"}},
		// ABANDON_GRACE unset is derived from DRAIN_TIMEOUT: a bad
		// DRAIN_TIMEOUT is the one error.
		{name: "DRAIN_TIMEOUT negative, ABANDON_GRACE unset", env: with("FENCEPROXY_DRAIN_TIMEOUT", "-1s"),
			wantErr: []string{"FENCEPROXY_DRAIN_TIMEOUT"}, notErr: []string{"FENCEPROXY_ABANDON_GRACE"}},
		{name: "DRAIN_TIMEOUT zero, ABANDON_GRACE unset", env: with("FENCEPROXY_DRAIN_TIMEOUT", "0s"),
			wantErr: []string{"FENCEPROXY_DRAIN_TIMEOUT"}, notErr: []string{"FENCEPROXY_ABANDON_GRACE"}},
		{name: "DRAIN_TIMEOUT unparsable, ABANDON_GRACE unset", env: with("FENCEPROXY_DRAIN_TIMEOUT", "-1"),
			wantErr: []string{"FENCEPROXY_DRAIN_TIMEOUT"}, notErr: []string{"FENCEPROXY_ABANDON_GRACE"}},
		{name: "ABANDON_GRACE set negative is its own error", env: with("FENCEPROXY_ABANDON_GRACE", "-1s"),
			wantErr: []string{"FENCEPROXY_ABANDON_GRACE"}},
		{name: "ABANDON_GRACE not below DRAIN_TIMEOUT", env: with("FENCEPROXY_ABANDON_GRACE", "10s", "FENCEPROXY_DRAIN_TIMEOUT", "10s"),
			wantErr: []string{"FENCEPROXY_ABANDON_GRACE", "FENCEPROXY_DRAIN_TIMEOUT"}},
		{name: "DRAIN_TIMEOUT short, ABANDON_GRACE unset is half of it", env: with("FENCEPROXY_DRAIN_TIMEOUT", "2s"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.AbandonGrace != time.Second {
					t.Errorf("AbandonGrace = %v, want 1s", cfg.AbandonGrace)
				}
			}},
		{name: "TOKEN_HEADER with space", env: with("FENCEPROXY_TOKEN_HEADER", "bad header"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "TOKEN_HEADER with colon", env: with("FENCEPROXY_TOKEN_HEADER", "X-Token:"), wantErr: []string{"FENCEPROXY_TOKEN_HEADER"}},
		{name: "UNFENCED_METHODS empty element", env: with("FENCEPROXY_UNFENCED_METHODS", "GET,,HEAD"), wantErr: []string{"FENCEPROXY_UNFENCED_METHODS"}},
		{name: "UNFENCED_METHODS trimmed", env: with("FENCEPROXY_UNFENCED_METHODS", "GET, HEAD"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if !slices.Equal(cfg.UnfencedMethods, []string{"GET", "HEAD"}) {
					t.Errorf("UnfencedMethods = %q, want [GET HEAD]", cfg.UnfencedMethods)
				}
			}},
		{name: "LISTEN set but empty", env: with("FENCEPROXY_LISTEN", ""), wantErr: []string{"FENCEPROXY_LISTEN"}},
		{name: "LISTEN not host:port", env: with("FENCEPROXY_LISTEN", "8080"), wantErr: []string{"FENCEPROXY_LISTEN"}},
		{name: "LISTEN equals CONTROL_LISTEN", env: with("FENCEPROXY_LISTEN", ":7000", "FENCEPROXY_CONTROL_LISTEN", ":7000"),
			wantErr: []string{"FENCEPROXY_CONTROL_LISTEN", "FENCEPROXY_LISTEN"}},
		// Port 0 asks the kernel for a free port, so two listeners on
		// 127.0.0.1:0 get different ports: not a clash (tests and ad-hoc runs
		// use it; internal/servertest does by default).
		{name: "LISTEN and CONTROL_LISTEN both port 0", env: with("FENCEPROXY_LISTEN", "127.0.0.1:0", "FENCEPROXY_CONTROL_LISTEN", "127.0.0.1:0")},
		{name: "LISTEN and CONTROL_LISTEN both :0", env: with("FENCEPROXY_LISTEN", ":0", "FENCEPROXY_CONTROL_LISTEN", ":0", "FENCEPROXY_LEASE_TOKEN", "t")},
		{name: "LISTEN default equals CONTROL_LISTEN", env: with("FENCEPROXY_CONTROL_LISTEN", ":8080"),
			wantErr: []string{"FENCEPROXY_CONTROL_LISTEN"}},
		{name: "LOG_LEVEL loud", env: with("FENCEPROXY_LOG_LEVEL", "loud"), wantErr: []string{"FENCEPROXY_LOG_LEVEL"}},
		{name: "LOG_LEVEL debug", env: with("FENCEPROXY_LOG_LEVEL", "debug"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.LogLevel != slog.LevelDebug {
					t.Errorf("LogLevel = %v, want DEBUG", cfg.LogLevel)
				}
			}},
		{name: "ACCESS_LOG on", env: with("FENCEPROXY_ACCESS_LOG", "true"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if !cfg.AccessLog {
					t.Errorf("AccessLog = false, want true")
				}
			}},
		{name: "ACCESS_LOG on at debug", env: with("FENCEPROXY_ACCESS_LOG", "true", "FENCEPROXY_LOG_LEVEL", "debug")},
		{name: "ACCESS_LOG on at warn", env: with("FENCEPROXY_ACCESS_LOG", "true", "FENCEPROXY_LOG_LEVEL", "warn"),
			wantErr: []string{"FENCEPROXY_ACCESS_LOG: true needs FENCEPROXY_LOG_LEVEL info or debug (it is warn)"}, notErr: []string{"FENCEPROXY_LOG_LEVEL:"}},
		{name: "ACCESS_LOG off at error", env: with("FENCEPROXY_ACCESS_LOG", "false", "FENCEPROXY_LOG_LEVEL", "error")},
		{name: "ACCESS_LOG not a bool", env: with("FENCEPROXY_ACCESS_LOG", "yes please"), wantErr: []string{"FENCEPROXY_ACCESS_LOG"}},
		{name: "TRACING on", env: with("FENCEPROXY_TRACING", "true"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if !cfg.Tracing {
					t.Errorf("Tracing = false, want true")
				}
			}},
		{name: "TRACING on with the standard variables", env: with("FENCEPROXY_TRACING", "true", "OTEL_TRACES_EXPORTER", "otlp",
			"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")},
		{name: "TRACING not a bool", env: with("FENCEPROXY_TRACING", "on"), wantErr: []string{"FENCEPROXY_TRACING"}},
		// Every bad OTEL_* variable named in one run, each once.
		{name: "TRACING on with bad OTEL variables", env: with("FENCEPROXY_TRACING", "true", "OTEL_TRACES_EXPORTER", "zipkin",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc",
			"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
			wantErr: []string{`OTEL_TRACES_EXPORTER: "zipkin"`, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json"`,
				`OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318"`},
			notErr: []string{"OTEL_EXPORTER_OTLP_PROTOCOL:", "FENCEPROXY_TRACING:"}},
		// Off, the OTEL_* variables are another program's business.
		{name: "TRACING off ignores OTEL variables", env: with("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")},
		{name: "ADMIN_TOKEN set but empty is fine", env: with("FENCEPROXY_ADMIN_TOKEN", ""),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.AdminToken != "" {
					t.Errorf("AdminToken = %q, want empty", cfg.AdminToken)
				}
			}},
		{name: "ADMIN_TOKEN set", env: with("FENCEPROXY_ADMIN_TOKEN", "s3cret"),
			check: func(t *testing.T, cfg Config, _ []string) {
				if cfg.AdminToken != "s3cret" {
					t.Errorf("AdminToken = %q, want s3cret", cfg.AdminToken)
				}
			}},
		{name: "several bad variables at once", env: with(
			"FENCEPROXY_UPSTREAM", unset,
			"FENCEPROXY_DRAIN_TIMEOUT", "10",
			"FENCEPROXY_RESOURCE_DEPTH", "two",
			"FENCEPROXY_REQUIRE_TOKEN", "maybe",
			"FENCEPROXY_LOG_LEVEL", "loud",
			"FENCEPROXY_LISTEN", ""),
			wantErr: []string{"FENCEPROXY_UPSTREAM", "FENCEPROXY_DRAIN_TIMEOUT", "FENCEPROXY_RESOURCE_DEPTH",
				"FENCEPROXY_REQUIRE_TOKEN", "FENCEPROXY_LOG_LEVEL", "FENCEPROXY_LISTEN"}},
		{name: "several invalid values at once", env: with(
			"FENCEPROXY_UPSTREAM", "ftp://x",
			"FENCEPROXY_DRAIN_TIMEOUT", "-1s",
			"FENCEPROXY_RESOURCE_DEPTH", "-1",
			"FENCEPROXY_TOKEN_HEADER", "bad header",
			"FENCEPROXY_UNFENCED_METHODS", "GET,,HEAD"),
			wantErr: []string{"FENCEPROXY_UPSTREAM", "FENCEPROXY_DRAIN_TIMEOUT", "FENCEPROXY_RESOURCE_DEPTH",
				"FENCEPROXY_TOKEN_HEADER", "FENCEPROXY_UNFENCED_METHODS"}},
		// A value that does not parse and a value that parses but is invalid,
		// together: Parse's contract is that every bad variable is listed.
		{name: "unparsable and invalid values at once", env: with(
			"FENCEPROXY_DRAIN_TIMEOUT", "10",
			"FENCEPROXY_TOKEN_HEADER", "bad header",
			"FENCEPROXY_UPSTREAM", "ftp://x"),
			wantErr: []string{"FENCEPROXY_DRAIN_TIMEOUT", "FENCEPROXY_TOKEN_HEADER", "FENCEPROXY_UPSTREAM"}},
		{name: "unknown variable warns", env: with("FENCEPROXY_FOO", "1"),
			check: func(t *testing.T, _ Config, warnings []string) {
				if len(warnings) != 1 || !strings.Contains(warnings[0], "FENCEPROXY_FOO") {
					t.Errorf("warnings = %q, want one naming FENCEPROXY_FOO", warnings)
				}
			}},
		{name: "misspelt variable warns", env: with("FENCEPROXY_DRAIN_TIMOUT", "5s"),
			check: func(t *testing.T, cfg Config, warnings []string) {
				if len(warnings) != 1 || !strings.Contains(warnings[0], "FENCEPROXY_DRAIN_TIMOUT") {
					t.Errorf("warnings = %q, want one naming FENCEPROXY_DRAIN_TIMOUT", warnings)
				}
				if cfg.DrainTimeout != 30*time.Second {
					t.Errorf("DrainTimeout = %v, want the default 30s", cfg.DrainTimeout)
				}
			}},
		{name: "kubernetes service links do not warn", env: with(
			"FENCEPROXY_SERVICE_HOST", "10.0.0.7",
			"FENCEPROXY_SERVICE_PORT", "8080",
			"FENCEPROXY_SERVICE_PORT_HTTP", "8080",
			"FENCEPROXY_PORT", "tcp://10.0.0.7:8080",
			"FENCEPROXY_PORT_8080_TCP", "tcp://10.0.0.7:8080",
			"FENCEPROXY_PORT_8080_TCP_PROTO", "tcp",
			"FENCEPROXY_PORT_8080_TCP_PORT", "8080",
			"FENCEPROXY_PORT_8080_TCP_ADDR", "10.0.0.7"),
			check: func(t *testing.T, _ Config, warnings []string) {
				if len(warnings) != 0 {
					t.Errorf("warnings = %q, want none for Kubernetes service links", warnings)
				}
			}},
		{name: "other prefixes are ignored", env: with("OTHER_FOO", "1", "PATH", "/bin"),
			check: func(t *testing.T, _ Config, warnings []string) {
				if len(warnings) != 0 {
					t.Errorf("warnings = %q, want none", warnings)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := maps.Clone(tt.env)
			cfg, warnings, err := Parse(env)
			if !maps.Equal(env, tt.env) {
				t.Errorf("Parse modified its input")
			}
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Parse() error = %v, want none", err)
				}
				if verr := cfg.Validate(); verr != nil {
					t.Errorf("Parse succeeded but Validate() = %v", verr)
				}
			} else {
				if err == nil {
					t.Fatalf("Parse() succeeded with %+v, want an error naming %q", cfg, tt.wantErr)
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Parse() error does not name %s:\n%v", want, err)
					}
				}
				for _, not := range tt.notErr {
					if strings.Contains(err.Error(), not) {
						t.Errorf("Parse() error names %s, which is not wrong:\n%v", not, err)
					}
				}
			}
			if tt.check != nil {
				tt.check(t, cfg, warnings)
			}
		})
	}
}

// TestParseErrorLinesNameVariables: every line of a failed Parse's error
// starts with (or at least contains) the name of a variable, so an operator
// can map each complaint to the setting.
func TestParseErrorLinesNameVariables(t *testing.T) {
	env := with(
		"FENCEPROXY_UPSTREAM", unset,
		"FENCEPROXY_DATA_DIR", "",
		"FENCEPROXY_DRAIN_TIMEOUT", "10",
		"FENCEPROXY_RESOURCE_DEPTH", "two",
		"FENCEPROXY_REQUIRE_TOKEN", "maybe",
		"FENCEPROXY_LOG_LEVEL", "loud",
	)
	_, _, err := Parse(env)
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	var lines []string
	for _, e := range unwrapAll(err) {
		lines = append(lines, e.Error())
	}
	if len(lines) < 6 {
		t.Errorf("got %d errors, want at least one per bad variable (6):\n%v", len(lines), err)
	}
	for _, l := range lines {
		if !strings.Contains(l, Prefix) {
			t.Errorf("error %q names no variable", l)
		}
	}
}

// unwrapAll flattens an errors.Join tree into its leaves.
func unwrapAll(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unwrapAll(e)...)
		}
		return out
	}
	return []error{err}
}

func TestValidateZeroConfig(t *testing.T) {
	err := Config{}.Validate()
	if err == nil {
		t.Fatal("Validate() of the zero Config = nil, want errors")
	}
	for _, name := range []string{"UPSTREAM", "DATA_DIR", "LISTEN", "CONTROL_LISTEN", "TOKEN_HEADER", "DRAIN_TIMEOUT", "SHUTDOWN_TIMEOUT"} {
		if !strings.Contains(err.Error(), Prefix+name) {
			t.Errorf("Validate() of the zero Config does not name %s%s:\n%v", Prefix, name, err)
		}
	}
}

// TestUsageListsEveryVariable compares Usage() against Config's env tags.
func TestUsageListsEveryVariable(t *testing.T) {
	usage := Usage()
	lines := strings.Split(usage, "\n")
	typ := reflect.TypeOf(Config{})
	if typ.NumField() == 0 {
		t.Fatal("Config has no fields")
	}
	for i := 0; i < typ.NumField(); i++ {
		sf := typ.Field(i)
		tag, ok := sf.Tag.Lookup("env")
		if !ok {
			t.Errorf("field %s has no env tag", sf.Name)
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		variable := Prefix + name
		var line string
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] == variable {
				line = l
				break
			}
		}
		if line == "" {
			t.Errorf("Usage() does not list %s:\n%s", variable, usage)
			continue
		}
		fields := strings.Fields(line)
		wantDefault := sf.Tag.Get("envDefault")
		switch {
		case strings.Contains(opts, "required"):
			wantDefault = "(required)"
		case wantDefault == "":
			wantDefault = "(unset)"
		}
		if len(fields) < 2 || fields[1] != wantDefault {
			t.Errorf("Usage() line for %s shows default %q, want %q:\n%s", variable, fields[1:], wantDefault, line)
		}
		if help := sf.Tag.Get("help"); help == "" {
			t.Errorf("field %s has no help tag", sf.Name)
		} else if !strings.Contains(line, help) {
			t.Errorf("Usage() line for %s lacks its help text %q:\n%s", variable, help, line)
		}
	}
}

// The help states each variable's limits: CACHE_SIZE's minimum,
// LEASE_REVOKE_AFTER's bounds, and that a size without a unit is bytes.
func TestUsageStatesLimits(t *testing.T) {
	usage := Usage()
	for variable, wants := range map[string][]string{
		"FENCEPROXY_CACHE_SIZE":         {"at least 1MiB", "a bare number is bytes"},
		"FENCEPROXY_MIN_FREE_SPACE":     {"a bare number is bytes"},
		"FENCEPROXY_LEASE_REVOKE_AFTER": {"above 0s and below LEASE_MAX_TTL", "a lease whose TTL is at most it is never reported as suspect"},
	} {
		var line string
		for _, l := range strings.Split(usage, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == variable {
				line = l
			}
		}
		for _, w := range wants {
			if !strings.Contains(line, w) {
				t.Errorf("Usage() line for %s lacks %q:\n%s", variable, w, line)
			}
		}
	}
}

// FuzzParse feeds arbitrary values of three variables to Parse: it never
// panics; on success the Config validates and its durations are positive; on
// failure the error names one of the variables that was fuzzed (the rest of the
// environment is valid).
func FuzzParse(f *testing.F) {
	f.Add("30s", "0", "http://127.0.0.1:9000")
	f.Add("10", "two", "not a url")
	f.Add("-1s", "-1", "ftp://x")
	f.Add("", "", "")
	f.Add("1ns", "9223372036854775807", "http://")
	f.Add("1h2m3.5s", "+3", "https://h:8443/p/?")
	f.Add("9223372036854775807ns", "0x10", "http://[::1]:80/")
	f.Add("0", "1e3", "http://u:p@h/")
	f.Add("2562047h", " 1", "http://h/p#frag")
	f.Add("1µs", "00", "HTTP://H/")
	f.Fuzz(func(t *testing.T, drain, depth, upstream string) {
		env := minimal()
		env["FENCEPROXY_DRAIN_TIMEOUT"] = drain
		env["FENCEPROXY_RESOURCE_DEPTH"] = depth
		env["FENCEPROXY_UPSTREAM"] = upstream
		cfg, _, err := Parse(env)
		if err != nil {
			msg := err.Error()
			if !strings.Contains(msg, "FENCEPROXY_DRAIN_TIMEOUT") && !strings.Contains(msg, "FENCEPROXY_RESOURCE_DEPTH") &&
				!strings.Contains(msg, "FENCEPROXY_UPSTREAM") {
				t.Errorf("Parse(%q, %q, %q) error names none of the fuzzed variables: %v", drain, depth, upstream, err)
			}
			return
		}
		if verr := cfg.Validate(); verr != nil {
			t.Errorf("Parse(%q, %q, %q) succeeded but Validate() = %v", drain, depth, upstream, verr)
		}
		for name, d := range map[string]time.Duration{
			"DrainTimeout": cfg.DrainTimeout, "ShutdownTimeout": cfg.ShutdownTimeout,
			"UpstreamDialTimeout": cfg.UpstreamDialTimeout, "UpstreamResponseTimeout": cfg.UpstreamResponseTimeout,
		} {
			if d <= 0 {
				t.Errorf("Parse(%q, %q, %q): %s = %v, want positive", drain, depth, upstream, name, d)
			}
		}
		if cfg.ResourceDepth < 0 {
			t.Errorf("ResourceDepth = %d, want >= 0", cfg.ResourceDepth)
		}
		u := cfg.Upstream
		if u == nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
			t.Errorf("Parse(%q) accepted upstream %#v", upstream, u)
		}
		if cfg.DataDir == "" {
			t.Error("DataDir empty after a successful Parse")
		}
	})
}

// Parse errors of the standard library are reworded to say what is wanted.
func TestParseErrorsArePlain(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"REQUIRE_TOKEN", "yes", `FENCEPROXY_REQUIRE_TOKEN: "yes" must be true or false`},
		{"MAX_TOKEN_JUMP", "-1", `FENCEPROXY_MAX_TOKEN_JUMP: "-1" must be a whole number from 0 to 18446744073709551615`},
		{"RESOURCE_DEPTH", "two", `FENCEPROXY_RESOURCE_DEPTH: "two" must be a whole number`},
		{"LOG_LEVEL", "verbose", "use debug, info, warn or error"},
		{"UPSTREAM", "127.0.0.1:9500", "give an absolute URL such as http://127.0.0.1:9000"},
		{"LEASE_MAX_TTL", "1d", `FENCEPROXY_LEASE_MAX_TTL: "1d" is not a duration: write it in Go's units, such as 500ms, 30s, 5m or 24h`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"FENCEPROXY_UPSTREAM": "http://127.0.0.1:9000", "FENCEPROXY_DATA_DIR": t.TempDir()}
			env["FENCEPROXY_"+tc.name] = tc.value
			_, _, err := Parse(env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// An unreadable value is one error, not one more for whatever its zero value
// breaks: LEASE_MAX_TTL=1d says nothing about LEASE_MIN_TTL.
func TestParseOneErrorPerBadValue(t *testing.T) {
	_, _, err := Parse(with("FENCEPROXY_LEASE_MAX_TTL", "1d"))
	if err == nil {
		t.Fatal("LEASE_MAX_TTL=1d accepted")
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 1 || strings.Contains(err.Error(), "LEASE_MIN_TTL") {
		t.Errorf("LEASE_MAX_TTL=1d gave %d errors: %v; want the one naming LEASE_MAX_TTL", n, err)
	}
	// A real conflict between two readable values is still reported.
	if _, _, err := Parse(with("FENCEPROXY_LEASE_MAX_TTL", "1s", "FENCEPROXY_LEASE_MIN_TTL", "5s")); err == nil {
		t.Error("LEASE_MIN_TTL above LEASE_MAX_TTL accepted")
	}
}

// A misspelt name is pointed at the name it misspells, in the warning, and
// in the error when the variable it misspells is required and missing.
func TestParseSuggestsClosestName(t *testing.T) {
	_, _, err := Parse(with("FENCEPROXY_UPSTREAM", unset, "FENCEPROXY_UPSTREAM_URL", "http://127.0.0.1:9000"))
	if err == nil || !strings.Contains(err.Error(), "FENCEPROXY_UPSTREAM is required but not set (FENCEPROXY_UPSTREAM_URL is set: did you mean FENCEPROXY_UPSTREAM?)") {
		t.Errorf("UPSTREAM_URL instead of UPSTREAM: %v", err)
	}
	for name, want := range map[string]string{
		"FENCEPROXY_DRAIN_TIMOUT":  "FENCEPROXY_DRAIN_TIMEOUT",
		"FENCEPROXY_CONTROLLISTEN": "FENCEPROXY_CONTROL_LISTEN",
		"FENCEPROXY_ADMINTOKEN":    "FENCEPROXY_ADMIN_TOKEN",
		"FENCEPROXY_QUUX":          "",
	} {
		_, warnings, _ := Parse(with(name, "1"))
		got := strings.Join(warnings, "; ")
		if want == "" && strings.Contains(got, "did you mean") || want != "" && !strings.Contains(got, "did you mean "+want+"?") {
			t.Errorf("%s: warnings %q, want a suggestion of %q", name, got, want)
		}
	}
}

// writeTemp writes content to a new file and returns its name.
func writeTemp(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// The control listener is loopback unless set; beyond loopback it needs a
// lease token, or LEASE_OPEN=true saying the lease API is meant to be open.
func TestControlListenBeyondLoopback(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		refused bool
		warning string
	}{
		{name: "default", env: minimal()},
		{name: "127.0.0.1", env: with("FENCEPROXY_CONTROL_LISTEN", "127.0.0.1:9191")},
		{name: "127.0.0.2", env: with("FENCEPROXY_CONTROL_LISTEN", "127.0.0.2:9191")},
		{name: "::1", env: with("FENCEPROXY_CONTROL_LISTEN", "[::1]:9191")},
		{name: "localhost", env: with("FENCEPROXY_CONTROL_LISTEN", "localhost:9191")},
		{name: "every interface", env: with("FENCEPROXY_CONTROL_LISTEN", ":9090"), refused: true},
		{name: "0.0.0.0", env: with("FENCEPROXY_CONTROL_LISTEN", "0.0.0.0:9090"), refused: true},
		{name: "::", env: with("FENCEPROXY_CONTROL_LISTEN", "[::]:9090"), refused: true},
		{name: "an interface", env: with("FENCEPROXY_CONTROL_LISTEN", "10.0.0.7:9090"), refused: true},
		{name: "a host name", env: with("FENCEPROXY_CONTROL_LISTEN", "fenceproxy.internal:9090"), refused: true},
		{name: "empty lease token", env: with("FENCEPROXY_CONTROL_LISTEN", ":9090", "FENCEPROXY_LEASE_TOKEN", ""), refused: true},
		{name: "lease token", env: with("FENCEPROXY_CONTROL_LISTEN", ":9090", "FENCEPROXY_LEASE_TOKEN", "s3cret")},
		{name: "open", env: with("FENCEPROXY_CONTROL_LISTEN", "0.0.0.0:9090", "FENCEPROXY_LEASE_OPEN", "true")},
		{name: "open and a token", env: with("FENCEPROXY_CONTROL_LISTEN", ":9090", "FENCEPROXY_LEASE_OPEN", "true", "FENCEPROXY_LEASE_TOKEN", "s3cret"),
			warning: "FENCEPROXY_LEASE_OPEN is ignored"},
		{name: "not open", env: with("FENCEPROXY_CONTROL_LISTEN", ":9090", "FENCEPROXY_LEASE_OPEN", "false"), refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, warnings, err := Parse(tc.env)
			if !tc.refused {
				if err != nil {
					t.Fatalf("Parse: %v, want no error", err)
				}
			} else {
				if err == nil {
					t.Fatal("Parse accepted it")
				}
				for _, want := range []string{"FENCEPROXY_CONTROL_LISTEN: " + `"` + tc.env["FENCEPROXY_CONTROL_LISTEN"] + `"`, "listens beyond loopback",
					"FENCEPROXY_LEASE_TOKEN", "FENCEPROXY_LEASE_OPEN=true", "127.0.0.1:9090"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error lacks %q:\n%v", want, err)
					}
				}
			}
			got := strings.Join(warnings, "\n")
			if tc.warning == "" && got != "" || !strings.Contains(got, tc.warning) {
				t.Errorf("warnings %q, want %q", got, tc.warning)
			}
		})
	}
	// An unreadable LEASE_OPEN is one error, its own.
	_, _, err := Parse(with("FENCEPROXY_CONTROL_LISTEN", ":9090", "FENCEPROXY_LEASE_OPEN", "yes"))
	if err == nil || !strings.Contains(err.Error(), "FENCEPROXY_LEASE_OPEN") || strings.Contains(err.Error(), "listens beyond loopback") {
		t.Errorf("LEASE_OPEN=yes: %v, want only its own error", err)
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9090": true, "127.1.2.3:0": true, "[::1]:9090": true, "localhost:9090": true, "LocalHost:1": true,
		"[::ffff:127.0.0.1]:9090": true,
		":9090":                   false, "0.0.0.0:9090": false, "[::]:9090": false, "10.0.0.7:9090": false, "[fe80::1]:9090": false,
		"example.com:9090": false, "localhost.example.com:9090": false, "9090": false, "": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestLeaseAPIGuard(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		guarded bool
		want    string
	}{
		{minimal(), false, "loopback only"},
		{with("FENCEPROXY_LEASE_TOKEN", "s3cret"), true, "FENCEPROXY_LEASE_TOKEN"},
		{with("FENCEPROXY_CONTROL_LISTEN", ":9090", "FENCEPROXY_LEASE_OPEN", "true"), false, "FENCEPROXY_LEASE_OPEN=true"},
	} {
		cfg, _, err := Parse(tc.env)
		if err != nil {
			t.Fatal(err)
		}
		text, guarded := cfg.LeaseAPIGuard()
		if guarded != tc.guarded || !strings.Contains(text, tc.want) {
			t.Errorf("%v: LeaseAPIGuard() = %q, %v; want %v and a text naming %q", tc.env, text, guarded, tc.guarded, tc.want)
		}
	}
}

func TestUpstreamProbeSettings(t *testing.T) {
	if _, _, err := Parse(with("FENCEPROXY_UPSTREAM_PROBE_INTERVAL", "50ms")); err == nil || !strings.Contains(err.Error(), "FENCEPROXY_UPSTREAM_PROBE_INTERVAL: 50ms is below the minimum of 100ms") {
		t.Errorf("UPSTREAM_PROBE_INTERVAL=50ms: %v", err)
	}
	cfg, _, err := Parse(with("FENCEPROXY_UPSTREAM_PROBE_INTERVAL", "250ms", "FENCEPROXY_READY_NEEDS_UPSTREAM", "true"))
	if err != nil || cfg.UpstreamProbeInterval != 250*time.Millisecond || !cfg.ReadyNeedsUpstream {
		t.Errorf("Parse: %v, %v, %v", err, cfg.UpstreamProbeInterval, cfg.ReadyNeedsUpstream)
	}
	for upstream, want := range map[string]string{
		"http://127.0.0.1:9000": "127.0.0.1:9000", "http://backend": "backend:80", "https://s3.example.com/base": "s3.example.com:443",
		"https://[::1]": "[::1]:443", "http://[::1]:9000/": "[::1]:9000",
	} {
		cfg, _, err := Parse(with("FENCEPROXY_UPSTREAM", upstream))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.UpstreamAddr(); got != want {
			t.Errorf("UpstreamAddr() of %s = %q, want %q", upstream, got, want)
		}
	}
}

// Settings lists every variable with its value in effect, says which are
// defaults, and never shows a secret.
func TestSettings(t *testing.T) {
	secrets := map[string]string{
		"FENCEPROXY_ADMIN_TOKEN": "admin-s3cret-value",
		"FENCEPROXY_LEASE_TOKEN": "lease-s3cret-value",
		"FENCEPROXY_TOKEN_KEY":   "c2VjcmV0LWtleS1vZi1hdC1sZWFzdC0zMi1ieXRlcyE=",
	}
	env := with("FENCEPROXY_DRAIN_TIMEOUT", "10s", "FENCEPROXY_CACHE_SIZE", "64MiB", "FENCEPROXY_UNFENCED_METHODS", "GET,HEAD")
	maps.Copy(env, secrets)
	cfg, _, err := Parse(env)
	if err != nil {
		t.Fatal(err)
	}
	settings := cfg.Settings(env)
	byVar := map[string]Setting{}
	for _, s := range settings {
		byVar[s.Var] = s
	}
	for _, f := range fields() {
		if _, ok := byVar[f.Var]; !ok {
			t.Errorf("Settings lacks %s", f.Var)
		}
	}
	if len(settings) != len(fields()) {
		t.Errorf("%d settings for %d variables", len(settings), len(fields()))
	}
	for _, want := range []Setting{
		{Var: "FENCEPROXY_UPSTREAM", Value: "http://127.0.0.1:9000"},
		{Var: "FENCEPROXY_DRAIN_TIMEOUT", Value: "10s"},
		{Var: "FENCEPROXY_CACHE_SIZE", Value: "64 MiB"},
		{Var: "FENCEPROXY_UNFENCED_METHODS", Value: "GET,HEAD"},
		{Var: "FENCEPROXY_LISTEN", Value: ":8080", Default: true},
		{Var: "FENCEPROXY_CONTROL_LISTEN", Value: "127.0.0.1:9090", Default: true},
		{Var: "FENCEPROXY_SHUTDOWN_TIMEOUT", Value: "30s", Default: true},
		{Var: "FENCEPROXY_ABANDON_GRACE", Value: "5s", Default: true}, // derived: half of DRAIN_TIMEOUT
		{Var: "FENCEPROXY_LEASE_REVOKE_AFTER", Value: "", Default: true},
		{Var: "FENCEPROXY_LEASE_GRACE", Value: "", Default: true},
		{Var: "FENCEPROXY_REQUIRE_TOKEN", Value: "true", Default: true},
		{Var: "FENCEPROXY_LOG_LEVEL", Value: "INFO", Default: true},
		{Var: "FENCEPROXY_ADMIN_TOKEN", Value: Redacted, Secret: true},
		{Var: "FENCEPROXY_LEASE_TOKEN", Value: Redacted, Secret: true},
		{Var: "FENCEPROXY_TOKEN_KEY", Value: Redacted, Secret: true},
		{Var: "FENCEPROXY_PEER_SECRET", Value: "", Default: true, Secret: true},
		{Var: "FENCEPROXY_ETCD_PASSWORD", Value: "", Default: true, Secret: true},
	} {
		if got := byVar[want.Var]; got != want {
			t.Errorf("%s: %+v, want %+v", want.Var, got, want)
		}
	}
	all := fmt.Sprint(settings)
	for name, secret := range secrets {
		if strings.Contains(all, secret) {
			t.Errorf("Settings shows the value of %s", name)
		}
	}
	// Every variable whose name says it holds a credential is a secret.
	for _, s := range settings {
		name := strings.TrimPrefix(s.Var, Prefix)
		credential := strings.HasSuffix(name, "_TOKEN") && name != "REQUIRE_TOKEN" || strings.Contains(name, "SECRET") || strings.Contains(name, "PASSWORD") || name == "TOKEN_KEY"
		if credential != s.Secret {
			t.Errorf("%s: Secret = %v, want %v", s.Var, s.Secret, credential)
		}
	}
}

// TracingExport: the protocol and endpoint in effect, the signal's own
// variables before the general ones, the SDK's defaults otherwise.
func TestTracingExport(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want OTLP
	}{
		{nil, OTLP{Protocol: OTLPHTTP, Endpoint: "http://localhost:4318"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, OTLP{Protocol: OTLPGRPC, Endpoint: "http://localhost:4317"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/v1/traces"},
			OTLP{Protocol: OTLPHTTP, Endpoint: "http://t:4318/v1/traces"}},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:pw@c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ""},
			OTLP{Protocol: OTLPHTTP, Endpoint: "https://user:xxxxx@c:4318"}},
	} {
		got, errs := TracingExport(tc.env)
		if errs != nil || got != tc.want {
			t.Errorf("TracingExport(%v) = %+v, %v; want %+v", tc.env, got, errs, tc.want)
		}
	}
}
