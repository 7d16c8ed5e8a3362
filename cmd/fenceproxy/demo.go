package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/server"
)

// demoBucket is created in the in-memory S3 backend at start.
const demoBucket = "demo"

// demo runs an in-memory S3-compatible backend (gofakes3) on a loopback port
// with the proxy in front of it in S3 mode (FENCEPROXY_S3=pass, domains
// localhost and 127.0.0.1), on a temporary DATA_DIR that is removed on
// exit. It listens on 127.0.0.1:8080 and 127.0.0.1:9090 unless FENCEPROXY_LISTEN
// or FENCEPROXY_CONTROL_LISTEN say otherwise; other FENCEPROXY_* variables apply.
// Its admin API is on, with FENCEPROXY_ADMIN_TOKEN or else a random token
// that the banner prints.
func demo(ctx context.Context, environ map[string]string, stdout, stderr io.Writer, started func(server.Addrs)) error {
	backend := s3mem.New()
	if err := backend.CreateBucket(demoBucket); err != nil {
		return fmt.Errorf("demo: create bucket: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: backend listener: %w", err)
	}
	// The proxy runs in S3 mode and preserves Host, so the backend sees
	// virtual-hosted names (demo.localhost:8080); gofakes3 matches them
	// without the port.
	fake := gofakes3.New(backend, gofakes3.WithHostBucketBase("localhost")).Server()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, _, err := net.SplitHostPort(r.Host); err == nil {
			r.Host = h
		}
		fake.ServeHTTP(w, r)
	})
	s3srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go s3srv.Serve(ln)
	defer s3srv.Close()

	dir, err := os.MkdirTemp("", "fenceproxy-demo-")
	if err != nil {
		return fmt.Errorf("demo: data directory: %w", err)
	}
	defer os.RemoveAll(dir)

	env := maps.Clone(environ)
	env[config.Prefix+"UPSTREAM"] = "http://" + ln.Addr().String()
	env[config.Prefix+"DATA_DIR"] = dir
	// A demo is for this machine only, unless the user says otherwise; its
	// backend speaks S3, in path and virtual-hosted style.
	for name, addr := range map[string]string{"LISTEN": "127.0.0.1:8080", "CONTROL_LISTEN": "127.0.0.1:9090",
		"S3": "pass", "S3_DOMAINS": "localhost,127.0.0.1"} {
		if _, ok := env[config.Prefix+name]; !ok {
			env[config.Prefix+name] = addr
		}
	}
	// The admin walk-through needs a token; one made up per start is never
	// a well-known one. A token the user set is theirs and not printed.
	adminToken := ""
	if env[config.Prefix+"ADMIN_TOKEN"] == "" {
		adminToken = rand.Text()
		env[config.Prefix+"ADMIN_TOKEN"] = adminToken
	}
	return serve(ctx, env, stderr, func(a server.Addrs) {
		fmt.Fprint(stdout, demoText(localURL(a.Proxy), localURL(a.Control), ln.Addr().String(), adminToken))
		if started != nil {
			started(a)
		}
	})
}

// localURL turns a listener address such as [::]:8080 into http://localhost:8080.
func localURL(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return "http://localhost:" + port
}

// demoText is the banner. adminToken is the admin token the demo made up, ""
// when FENCEPROXY_ADMIN_TOKEN was set.
func demoText(proxyURL, controlURL, backend, adminToken string) string {
	admin := "  # admin calls: the FENCEPROXY_ADMIN_TOKEN you set, also as a variable of this shell\n"
	if adminToken != "" {
		admin = "  # admin calls: the admin token this demo made up (FENCEPROXY_ADMIN_TOKEN sets your own), in a shell variable\n" +
			"  FENCEPROXY_ADMIN_TOKEN=" + adminToken + "\n"
	}
	r := strings.NewReplacer("{VHOST}", strings.Replace(proxyURL, "://", "://"+demoBucket+".", 1), "{PROXY}", proxyURL, "{CONTROL}", controlURL, "{BACKEND}", backend, "{BUCKET}", demoBucket, "{ADMIN}\n", admin)
	return r.Replace(`fenceproxy demo: an in-memory S3 backend on {BACKEND} (bucket "{BUCKET}"),
fenceproxy in front of it on {PROXY}, control API on {CONTROL}.
Logs (JSON) go to stderr. Stop with Ctrl-C. Try the takeover:

  # worker A holds the lease with fencing token 41 and writes
  curl -i -X PUT -H 'X-Fencing-Token: 41' --data-binary 'from A (41)' {PROXY}/{BUCKET}/report.txt
  # A stalls; its lease expires; worker B gets token 42 and writes
  curl -i -X PUT -H 'X-Fencing-Token: 42' --data-binary 'from B (42)' {PROXY}/{BUCKET}/report.txt
  # A wakes up and writes late with 41: 409 Conflict, Fencing-Refused: stale, nothing forwarded
  curl -i -X PUT -H 'X-Fencing-Token: 41' --data-binary 'late from A (41)' {PROXY}/{BUCKET}/report.txt
  # the object still holds B's data
  curl -s {PROXY}/{BUCKET}/report.txt
  # the same object in virtual-hosted style is the same resource: 409 as well
  curl -i -X PUT -H 'X-Fencing-Token: 41' --data-binary 'late from A (41)' {VHOST}/report.txt
  # the fence of the resource
  curl -s {CONTROL}/v1/fences/{BUCKET}/report.txt

{ADMIN}
  # list the fences
  curl -s -H "Authorization: Bearer $FENCEPROXY_ADMIN_TOKEN" '{CONTROL}/v1/fences?prefix={BUCKET}/'
  # raise a fence ahead of a takeover: from now on tokens below 50 are refused
  curl -s -X PUT -H "Authorization: Bearer $FENCEPROXY_ADMIN_TOKEN" -d '{"token":50}' {CONTROL}/v1/fences/{BUCKET}/report.txt
  # reset it, the resource key repeated as confirm: tokens start over
  curl -s -X DELETE -H "Authorization: Bearer $FENCEPROXY_ADMIN_TOKEN" '{CONTROL}/v1/fences/{BUCKET}/report.txt?confirm={BUCKET}/report.txt'

  # S3 clients (boto3, awscli, the Go SDK): the demo store checks no signature,
  # but an SDK signs nothing without credentials, so give it any:
  export AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_DEFAULT_REGION=us-east-1
  # endpoint {PROXY}, bucket "{BUCKET}"; the token goes in X-Fencing-Token (docs/S3.md, "Clients")

`)
}
