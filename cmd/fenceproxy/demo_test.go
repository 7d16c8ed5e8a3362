package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fenceproxy/fenceproxy/client"
)

// demoTokenLine is the banner's line that sets the admin token for the
// commands after it.
var demoTokenLine = regexp.MustCompile(`(?m)^  FENCEPROXY_ADMIN_TOKEN=(\S+)$`)

// startDemo runs `fenceproxy demo` on loopback ports chosen by the kernel
// with env added, and returns it serving, with its banner.
func startDemo(t *testing.T, env map[string]string) (*fpProcess, string) {
	t.Helper()
	full := map[string]string{"FENCEPROXY_LISTEN": testListen, "FENCEPROXY_CONTROL_LISTEN": testControlListen}
	for k, v := range env {
		full[k] = v
	}
	p := startProcess(t, full, "demo")
	p.waitServing(t)
	if !p.Stdout.WaitFor("?confirm=", 10*time.Second) {
		t.Fatalf("no complete banner within 10s:\n%s", p.Stdout)
	}
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		p.wait(10 * time.Second)
	})
	return p, p.Stdout.String()
}

// adminStatus is GET /v1/fences on the demo's control listener with bearer.
func adminStatus(t *testing.T, p *fpProcess, bearer string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+p.Control+"/v1/fences", nil)
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// The demo makes up an admin token for each start, prints it in its banner
// with the admin commands using it, and the admin API takes it; a start on
// its new temporary directory logs no start-up grace.
func TestDemoPrintsAdminToken(t *testing.T) {
	p, banner := startDemo(t, nil)
	m := demoTokenLine.FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("the banner sets no admin token:\n%s", banner)
	}
	token := m[1]
	if len(token) < 20 {
		t.Errorf("admin token %q: want a random one of at least 20 characters", token)
	}
	if !strings.Contains(banner, `-H "Authorization: Bearer $FENCEPROXY_ADMIN_TOKEN"`) {
		t.Errorf("the banner's admin commands do not use the token:\n%s", banner)
	}
	if got := adminStatus(t, p, token); got != http.StatusOK {
		t.Errorf("admin call with the printed token: %d, want 200", got)
	}
	if got := adminStatus(t, p, "wrong"); got != http.StatusUnauthorized {
		t.Errorf("admin call with another token: %d, want 401", got)
	}
	if logs := p.Stderr.String(); strings.Contains(logs, "start-up grace") {
		t.Errorf("the demo's start on a new directory logged a start-up grace:\n%s", logs)
	}

	// Another start, another token.
	_, banner2 := startDemo(t, nil)
	if m2 := demoTokenLine.FindStringSubmatch(banner2); m2 == nil || m2[1] == token {
		t.Errorf("a second demo's admin token %q, want another than %q", m2, token)
	}
}

// With FENCEPROXY_ADMIN_TOKEN set, the demo uses it and does not print it.
func TestDemoUsesAdminTokenSet(t *testing.T) {
	const mine = "my-own-admin-token-for-the-demo"
	p, banner := startDemo(t, map[string]string{"FENCEPROXY_ADMIN_TOKEN": mine})
	if strings.Contains(banner, mine) || demoTokenLine.MatchString(banner) {
		t.Errorf("the banner prints the admin token that was set:\n%s", banner)
	}
	if !strings.Contains(banner, `-H "Authorization: Bearer $FENCEPROXY_ADMIN_TOKEN"`) {
		t.Errorf("the banner's admin commands do not use $FENCEPROXY_ADMIN_TOKEN:\n%s", banner)
	}
	if got := adminStatus(t, p, mine); got != http.StatusOK {
		t.Errorf("admin call with the token set: %d, want 200", got)
	}
}

// The demo runs in S3 mode: its takeover, then the stale write in
// virtual-hosted style (Host demo.localhost) is the same resource and
// refused, and a Host it does not serve is refused; the banner shows the
// virtual-hosted command.
func TestDemoVirtualHostedIsOneResource(t *testing.T) {
	p, banner := startDemo(t, nil)
	_, port, _ := strings.Cut(p.Proxy, ":")
	if want := "http://demo.localhost:" + port + "/report.txt"; !strings.Contains(banner, want) {
		t.Errorf("the banner has no virtual-hosted command for %s:\n%s", want, banner)
	}
	put := func(host, path, token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, "http://"+p.Proxy+path, strings.NewReader("from "+token))
		req.Host = host
		req.Header.Set("X-Fencing-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		host, path, token string
		want              int
	}{
		{"localhost:" + port, "/demo/report.txt", "42", 200},
		{"demo.localhost:" + port, "/report.txt", "41", 409},
		{"demo.localhost:" + port, "/report.txt", "43", 200},
		{"127.0.0.1:" + port, "/demo/report.txt", "42", 409},
		{"elsewhere.example", "/demo/report.txt", "44", 400},
		// 127.0.0.1 is a domain of the demo, but an IP address has no
		// virtual-hosted buckets: gofakes3 reads this as path style (bucket
		// demo), so fencing it on reports/demo/report.txt would let 41 through.
		{"reports.127.0.0.1:" + port, "/demo/report.txt", "41", 400},
	} {
		if got := put(tc.host, tc.path, tc.token); got != tc.want {
			t.Errorf("PUT %s%s with %s: %d, want %d", tc.host, tc.path, tc.token, got, tc.want)
		}
	}
}

// demoCredentials is the banner's line that gives an S3 SDK credentials.
var demoCredentials = regexp.MustCompile(`(?m)^  export AWS_ACCESS_KEY_ID=(\S+) AWS_SECRET_ACCESS_KEY=(\S+) AWS_DEFAULT_REGION=(\S+)$`)

// The credentials the banner gives let an S3 SDK write through the demo
// with a token, and the takeover holds for it: a late smaller token is a
// StaleError, and the object keeps the newer write.
func TestDemoS3Credentials(t *testing.T) {
	p, banner := startDemo(t, nil)
	m := demoCredentials.FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("the banner gives an S3 SDK no credentials:\n%s", banner)
	}
	c := awss3.New(awss3.Options{
		Region:       m[3],
		BaseEndpoint: aws.String("http://" + p.Proxy),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(m[1], m[2], ""),
	}, client.S3Fencing(client.ContextToken))
	put := func(token uint64, body string) error {
		_, err := c.PutObject(client.WithToken(context.Background(), token), &awss3.PutObjectInput{
			Bucket: aws.String("demo"), Key: aws.String("sdk/report.txt"), Body: strings.NewReader(body)})
		return err
	}
	if err := put(42, "from B (42)"); err != nil {
		t.Fatalf("PutObject with token 42 and the banner's credentials: %v", err)
	}
	if err := put(41, "late from A (41)"); !errors.Is(err, client.ErrStale) {
		t.Fatalf("PutObject with token 41 after 42: %v, want a stale refusal", err)
	}
	out, err := c.GetObject(context.Background(), &awss3.GetObjectInput{Bucket: aws.String("demo"), Key: aws.String("sdk/report.txt")})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Body.Close()
	if b, _ := io.ReadAll(out.Body); string(b) != "from B (42)" {
		t.Errorf("the object holds %q, want B's write", b)
	}
}
