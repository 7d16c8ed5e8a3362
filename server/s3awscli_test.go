package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// TestS3AWSCLI: the real aws command, with the shipped plugin
// (examples/awscli/fenceproxy_awscli.py) configured as docs/S3.md says,
// through fenceproxy in pass mode to versitygw, which verifies every
// signature. For each awscli found (the aws on PATH, and /usr/bin/aws, where
// Debian's awscli package puts it, when that is another version), one
// subtest per flow a worker runs, asserting on the command's exit status and
// output and on what the store holds: the takeover, DeleteObjects,
// CopyObject, virtual-hosted and path style as one resource, a presigned
// URL, a sync with deletions, and a bucket created before each of two jobs.
// Skipped without awscli, unless CI is set (.ci/run installs Debian's
// awscli).
func TestS3AWSCLI(t *testing.T) {
	for _, cli := range awscliBinaries(t) {
		t.Run("awscli-"+cli.version, func(t *testing.T) {
			t.Parallel() // each aws command spends a second or two starting Python
			testS3AWSCLI(t, cli, false)
		})
	}
}

// TestS3AWSCLIResign: TestS3AWSCLI's flows through fenceproxy in gateway
// mode (FENCEPROXY_S3=resign) to versitygw over HTTPS: each aws command has
// only the worker's proxy key and AWS_CA_BUNDLE trusting the proxy, the
// virtual-hosted style goes through the forwarder as a CONNECT tunnel, and a
// further flow shows the key refused outside its grant with AccessDenied.
// The installed CLIs run one after the other: the store's keys reach each
// proxy through the process environment.
func TestS3AWSCLIResign(t *testing.T) {
	for _, cli := range awscliBinaries(t) {
		t.Run("awscli-"+cli.version, func(t *testing.T) {
			testS3AWSCLI(t, cli, true)
		})
	}
}

// awscliTimeout bounds one aws command.
const awscliTimeout = 60 * time.Second

// awscliBinary is one awscli to run.
type awscliBinary struct {
	path    string // the command
	version string // as it reports it, "2.9.19"
	major   int    // 1 or 2
}

var awscliVersionRE = regexp.MustCompile(`aws-cli/(([12])\.\d+\.\d+)`)

// awscliBinaries returns the aws on PATH and /usr/bin/aws, one per version.
// Without any it skips the test, or fails it when CI is set.
func awscliBinaries(t *testing.T) []awscliBinary {
	var paths []string
	if p, err := exec.LookPath("aws"); err == nil {
		paths = append(paths, p)
	}
	if _, err := os.Stat("/usr/bin/aws"); err == nil {
		paths = append(paths, "/usr/bin/aws")
	}
	if len(paths) == 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set, so awscli is required (apt-get install awscli)")
		}
		t.Skip("awscli not found: no aws on PATH, no /usr/bin/aws")
	}
	var clis []awscliBinary
	for _, p := range paths {
		cmd := exec.Command(p, "--version")
		cmd.Env = awscliBaseEnv(t.TempDir())
		out, err := cmd.CombinedOutput()
		m := awscliVersionRE.FindStringSubmatch(string(out))
		if err != nil || m == nil {
			t.Fatalf("%s --version: %v\n%s", p, err, out)
		}
		if slices.ContainsFunc(clis, func(c awscliBinary) bool { return c.version == m[1] }) {
			continue
		}
		clis = append(clis, awscliBinary{path: p, version: m[1], major: int(m[2][0] - '0')})
	}
	return clis
}

// awscliBaseEnv is this process's environment without anything that would
// steer awscli (AWS_*, proxies, PYTHONPATH), with HOME set to home and no
// bytecode written next to the plugin.
func awscliBaseEnv(home string) []string {
	env := []string{"HOME=" + home, "AWS_PAGER=", "PYTHONDONTWRITEBYTECODE=1"}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch upper := strings.ToUpper(name); {
		case strings.HasPrefix(upper, "AWS_"), upper == "HOME", upper == "PYTHONPATH", upper == "PYTHONDONTWRITEBYTECODE", upper == "FENCING_TOKEN",
			upper == "HTTP_PROXY", upper == "HTTPS_PROXY", upper == "NO_PROXY", upper == "ALL_PROXY":
		default:
			env = append(env, kv)
		}
	}
	return env
}

// awscliEnv runs one awscli against one fenceproxy, as a worker configured
// by docs/S3.md's recipe would.
type awscliEnv struct {
	t        *testing.T
	cli      awscliBinary
	home     string // HOME, the config files and the files to upload
	plugins  string // the directory of fenceproxy_awscli.py
	endpoint string // http://localhost:{port} of the proxy (https:// in gateway mode)
	access   string // the backend's credentials (the worker's proxy key in gateway mode)
	secret   string
	caBundle string // AWS_CA_BUNDLE in gateway mode: the proxy's test CA
	// forwarder is an HTTP proxy for the aws process that reaches the
	// fenceproxy whatever the host name: jobs.localhost needs no DNS.
	forwarder *awscliForwarder
}

// awscliConfig is what a config file holds besides region and retries.
type awscliConfig struct {
	style  string // addressing_style: path or virtual
	plugin bool   // the [plugins] section of the recipe
}

// awscliResult is one aws command's outcome.
type awscliResult struct {
	code           int
	stdout, stderr string
}

func (r awscliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, strings.TrimSpace(r.stdout), strings.TrimSpace(r.stderr))
}

// configFile writes the config file for c (once) and returns its path. The
// [plugins] section is docs/S3.md's recipe for the CLI's major version.
func (e *awscliEnv) configFile(c awscliConfig) string {
	path := filepath.Join(e.home, fmt.Sprintf("config-%s-%t", c.style, c.plugin))
	if _, err := os.Stat(path); err == nil {
		return path
	}
	text := "[default]\nregion = " + s3backend.Region + "\ns3 =\n    addressing_style = " + c.style + "\n"
	if e.cli.major == 1 {
		// v1 presigns with SigV2 unless told otherwise; stores such as
		// versitygw take SigV4 only.
		text += "    signature_version = s3v4\n"
	}
	if c.plugin {
		text += "[plugins]\n"
		if e.cli.major >= 2 {
			text += "cli_legacy_plugin_path = " + e.plugins + "\n"
		}
		text += "fenceproxy = fenceproxy_awscli\n"
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// runWith runs aws with config c and FENCING_TOKEN=token (unset when empty)
// against the proxy at endpoint; virtual-hosted style goes through the
// forwarder. It logs the command and its output.
func (e *awscliEnv) runWith(c awscliConfig, endpoint, token string, args ...string) awscliResult {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), awscliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.cli.path, append([]string{"--endpoint-url", endpoint}, args...)...)
	cmd.Dir = e.home
	cmd.Env = append(awscliBaseEnv(e.home), "AWS_CONFIG_FILE="+e.configFile(c),
		"AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(e.home, "no-credentials"),
		"AWS_ACCESS_KEY_ID="+e.access, "AWS_SECRET_ACCESS_KEY="+e.secret)
	if e.cli.major == 1 && c.plugin {
		cmd.Env = append(cmd.Env, "PYTHONPATH="+e.plugins) // v1 has no cli_legacy_plugin_path
	}
	if token != "" {
		cmd.Env = append(cmd.Env, "FENCING_TOKEN="+token)
	}
	if e.caBundle != "" {
		cmd.Env = append(cmd.Env, "AWS_CA_BUNDLE="+e.caBundle)
	}
	if c.style == "virtual" {
		cmd.Env = append(cmd.Env, "HTTP_PROXY="+e.forwarder.URL, "HTTPS_PROXY="+e.forwarder.URL)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := awscliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		e.t.Fatalf("aws %s: still running after %v\n%s", strings.Join(args, " "), awscliTimeout, r)
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		e.t.Fatalf("aws %s: %v", strings.Join(args, " "), err)
	}
	tok := "unset"
	if token != "" {
		tok = token
	}
	e.t.Logf("FENCING_TOKEN=%s aws %s (%s style, plugin %t): %s", tok, strings.Join(args, " "), c.style, c.plugin, r)
	return r
}

// run runs aws in path style with the plugin against the proxy.
func (e *awscliEnv) run(token string, args ...string) awscliResult {
	e.t.Helper()
	return e.runWith(awscliConfig{style: "path", plugin: true}, e.endpoint, token, args...)
}

// ok fails the test unless r succeeded.
func (e *awscliEnv) ok(r awscliResult) awscliResult {
	e.t.Helper()
	if r.code != 0 {
		e.t.Fatalf("aws failed: %s", r)
	}
	return r
}

// s3apiExit is the exit status of an s3api command that got an error from
// the service: 255 in awscli v1, 254 in v2.
func (e *awscliEnv) s3apiExit() int {
	if e.cli.major == 1 {
		return 255
	}
	return 254
}

// refused checks that r failed with exit status code and the S3 error code
// s3code for operation op in its stderr, with "current maximum is current"
// when current is not empty.
func (e *awscliEnv) refused(r awscliResult, code int, s3code, op, current string) {
	e.t.Helper()
	want := fmt.Sprintf("An error occurred (%s) when calling the %s operation", s3code, op)
	if r.code != code || !strings.Contains(r.stderr, want) {
		e.t.Fatalf("want exit %d and %q in stderr, got %s", code, want, r)
	}
	if current != "" && !strings.Contains(r.stderr, "current maximum is "+current) {
		e.t.Errorf("stderr lacks %q: %s", "current maximum is "+current, r.stderr)
	}
}

// file writes a file to upload under the home directory and returns its name
// relative to it (commands run there).
func (e *awscliEnv) file(name, content string) string {
	e.t.Helper()
	path := filepath.Join(e.home, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return name
}

// awscliForwarder is an HTTP proxy (the HTTP_PROXY and HTTPS_PROXY of an
// aws process) that sends every request to the fenceproxy at one address
// with its Host unchanged, and tunnels every CONNECT there, so that
// {bucket}.localhost reaches the proxy without DNS; it records the Hosts it
// saw (a CONNECT's host:port).
type awscliForwarder struct {
	*httptest.Server
	mu    sync.Mutex
	hosts []string
}

func newAWSCLIForwarder(t *testing.T, addr string) *awscliForwarder {
	f := &awscliForwarder{}
	transport := &http.Transport{Proxy: nil, DisableCompression: true}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", addr, pr.In.Host
		},
		Transport: transport,
	}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.hosts = append(f.hosts, r.Host)
		f.mu.Unlock()
		if r.Method == http.MethodConnect {
			awscliTunnel(w, addr)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { f.Close(); transport.CloseIdleConnections() })
	return f
}

// awscliTunnel answers a CONNECT with 200 and then copies bytes both ways
// between the client and addr until either side closes.
func awscliTunnel(w http.ResponseWriter, addr string) {
	up, err := net.Dial("tcp", addr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer up.Close()
	w.WriteHeader(http.StatusOK)
	down, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer down.Close()
	if n := rw.Reader.Buffered(); n > 0 { // bytes the client sent after its CONNECT
		b, _ := rw.Reader.Peek(n)
		up.Write(b)
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, down); done <- struct{}{} }()
	go func() { io.Copy(down, up); done <- struct{}{} }()
	<-done
}

func (f *awscliForwarder) saw(host string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.hosts, host)
}

// awscliObjects returns the objects under prefix in bucket, read straight
// from the backend: key to content.
func awscliObjects(t *testing.T, backend *s3backend.Server, bucket, prefix string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := backend.Client()
	out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatalf("backend: ListObjectsV2 %s/%s: %v", bucket, prefix, err)
	}
	objects := map[string]string{}
	for _, o := range out.Contents {
		objects[*o.Key] = s3GetObject(ctx, t, c, bucket, *o.Key)
	}
	return objects
}

// awscliWantObjects checks what the backend holds under prefix.
func awscliWantObjects(t *testing.T, backend *s3backend.Server, bucket, prefix string, want map[string]string) {
	t.Helper()
	got := awscliObjects(t, backend, bucket, prefix)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("backend holds under %s/%s:\n %v\nwant\n %v", bucket, prefix, got, want)
	}
}

// testS3AWSCLI runs the flows with cli through fenceproxy in pass mode, or
// in gateway mode (resign) with the worker's proxy key, which is granted the
// buckets jobs, nightly and nightly-fenced and is refused gwDenied.
func testS3AWSCLI(t *testing.T, cli awscliBinary, resign bool) {
	const bucket = "jobs"
	var (
		backend  *s3backend.Server
		in       *servertest.Instance
		proxyEnv map[string]string
		scheme   = "http"
		e        = &awscliEnv{t: t, cli: cli, home: t.TempDir()}
		client   = &http.Client{Transport: &http.Transport{Proxy: nil}}
	)
	if resign {
		g := startGatewaySuite(t, []string{bucket, "nightly", "nightly-fenced"}, nil, bucket)
		backend, in, proxyEnv, scheme = g.backend, g.in, g.env, "https"
		e.access, e.secret, e.caBundle = gwSuiteKey, gwSuiteSecret, g.certFile
		client = &http.Client{Transport: &http.Transport{Proxy: nil, TLSClientConfig: g.pool}}
	} else {
		backend = s3backend.StartVirtualHosted(t, "localhost")
		backend.CreateBucket(t, bucket)
		proxyEnv = map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
			"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "localhost"}
		in = servertest.Start(t, proxyEnv)
		e.access, e.secret = backend.AccessKey, backend.SecretKey
	}
	_, port, err := net.SplitHostPort(in.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	if e.plugins, err = filepath.Abs("../examples/awscli"); err != nil {
		t.Fatal(err)
	}
	e.endpoint, e.forwarder = scheme+"://localhost:"+port, newAWSCLIForwarder(t, in.Proxy)
	flow := func(name string, f func(t *testing.T, e *awscliEnv)) {
		t.Run(name, func(t *testing.T) {
			fe := *e
			fe.t = t
			f(t, &fe)
		})
	}

	// The takeover: 41 writes, 42 takes over, 41's late write is refused
	// with StaleFencingToken in the CLI's output. The token reaches the proxy
	// only through the plugin.
	flow("takeover", func(t *testing.T, e *awscliEnv) {
		const key = "takeover/report.txt"
		dst := "s3://" + bucket + "/" + key
		e.ok(e.run("41", "s3", "cp", e.file("a41.txt", "from A (41)"), dst))
		e.ok(e.run("42", "s3", "cp", e.file("b42.txt", "from B (42)"), dst))
		late := e.file("late41.txt", "late from A (41)")
		e.refused(e.run("41", "s3", "cp", late, dst), 1, "StaleFencingToken", "PutObject", "42")
		e.refused(e.run("41", "s3api", "put-object", "--bucket", bucket, "--key", key, "--body", late),
			e.s3apiExit(), "StaleFencingToken", "PutObject", "42")
		// Without the plugin the token in the environment is never sent.
		e.refused(e.runWith(awscliConfig{style: "path"}, e.endpoint, "43", "s3", "cp", late, dst), 1, "MissingFencingToken", "PutObject", "")
		// A value that is no token stops the command before it sends anything.
		if r := e.run("042", "s3", "cp", late, dst); r.code == 0 || !strings.Contains(r.stderr, "FENCING_TOKEN='042' is no fencing token") {
			t.Errorf("FENCING_TOKEN=042: want a failure naming the variable, got %s", r)
		}
		awscliWantObjects(t, backend, bucket, "takeover/", map[string]string{key: "from B (42)"})
		if r := e.ok(e.run("", "s3", "cp", dst, "-")); r.stdout != "from B (42)" {
			t.Errorf("aws s3 cp %s - printed %q, want B's", dst, r.stdout)
		}
		if tok, _ := s3FenceOf(t, in, bucket+"/"+key); tok != "42" {
			t.Errorf("fence of %s/%s = %q, want 42", bucket, key, tok)
		}
	})

	// DeleteObjects: one stale key refuses the whole batch and nothing is
	// deleted; a batch with the current token deletes all.
	flow("delete-objects", func(t *testing.T, e *awscliEnv) {
		for key, token := range map[string]string{"batch/1": "70", "batch/2": "70", "batch/3": "71"} {
			e.ok(e.run(token, "s3api", "put-object", "--bucket", bucket, "--key", key, "--body", e.file("batch.txt", "in the batch")))
		}
		batch := `{"Objects":[{"Key":"batch/1"},{"Key":"batch/2"},{"Key":"batch/3"}]}`
		e.refused(e.run("70", "s3api", "delete-objects", "--bucket", bucket, "--delete", batch),
			e.s3apiExit(), "StaleFencingToken", "DeleteObjects", "71")
		all := map[string]string{"batch/1": "in the batch", "batch/2": "in the batch", "batch/3": "in the batch"}
		awscliWantObjects(t, backend, bucket, "batch/", all)
		r := e.ok(e.run("71", "s3api", "delete-objects", "--bucket", bucket, "--delete", batch))
		for key := range all {
			if !strings.Contains(r.stdout, `"Key": "`+key+`"`) {
				t.Errorf("delete-objects output does not list %s as deleted: %s", key, r.stdout)
			}
		}
		awscliWantObjects(t, backend, bucket, "batch/", map[string]string{})
	})

	// CopyObject is fenced on its destination; its source is only read.
	flow("copy-object", func(t *testing.T, e *awscliEnv) {
		e.ok(e.run("80", "s3api", "put-object", "--bucket", bucket, "--key", "copy/src", "--body", e.file("src.txt", "source of 80")))
		e.ok(e.run("81", "s3api", "put-object", "--bucket", bucket, "--key", "copy/dst", "--body", e.file("dst.txt", "destination of 81")))
		e.refused(e.run("80", "s3api", "copy-object", "--bucket", bucket, "--key", "copy/dst", "--copy-source", bucket+"/copy/src"),
			e.s3apiExit(), "StaleFencingToken", "CopyObject", "81")
		awscliWantObjects(t, backend, bucket, "copy/", map[string]string{"copy/src": "source of 80", "copy/dst": "destination of 81"})
		e.ok(e.run("81", "s3api", "copy-object", "--bucket", bucket, "--key", "copy/dst", "--copy-source", bucket+"/copy/src"))
		// A token far below the source's maximum copies it to a new key.
		e.ok(e.run("5", "s3", "cp", "s3://"+bucket+"/copy/src", "s3://"+bucket+"/copy/new"))
		awscliWantObjects(t, backend, bucket, "copy/", map[string]string{"copy/src": "source of 80", "copy/dst": "source of 80", "copy/new": "source of 80"})
		for key, want := range map[string]string{"copy/src": "80", "copy/dst": "81", "copy/new": "5"} {
			if tok, _ := s3FenceOf(t, in, bucket+"/"+key); tok != want {
				t.Errorf("fence of %s/%s = %q, want %s", bucket, key, tok, want)
			}
		}
	})

	// Virtual-hosted (jobs.localhost) and path style (localhost/jobs) are
	// one resource: a stale write in the other style is refused.
	flow("virtual-hosted", func(t *testing.T, e *awscliEnv) {
		vhost := awscliConfig{style: "virtual", plugin: true}
		e.ok(e.runWith(vhost, e.endpoint, "42", "s3", "cp", e.file("vh42.txt", "from 42, virtual-hosted"), "s3://"+bucket+"/vh/x"))
		if host := bucket + ".localhost:" + port; !e.forwarder.saw(host) {
			t.Fatalf("no request with Host %s: the CLI did not use virtual-hosted style", host)
		}
		e.refused(e.run("41", "s3", "cp", e.file("path41.txt", "from 41, path style"), "s3://"+bucket+"/vh/x"), 1, "StaleFencingToken", "PutObject", "42")
		e.ok(e.run("51", "s3", "cp", e.file("path51.txt", "from 51, path style"), "s3://"+bucket+"/vh/y"))
		e.refused(e.runWith(vhost, e.endpoint, "50", "s3", "cp", e.file("vh50.txt", "from 50, virtual-hosted"), "s3://"+bucket+"/vh/y"),
			1, "StaleFencingToken", "PutObject", "51")
		awscliWantObjects(t, backend, bucket, "vh/", map[string]string{"vh/x": "from 42, virtual-hosted", "vh/y": "from 51, path style"})
		if tok, _ := s3FenceOf(t, in, bucket+"/vh/x"); tok != "42" {
			t.Errorf("fence of %s/vh/x = %q, want 42", bucket, tok)
		}
	})

	// aws s3 presign makes GET URLs only (it has no method option); with the
	// plugin the URL carries the token in its query, covered by the
	// signature, and works through the proxy. A presigned PUT with the token
	// in the URL: TestS3RealPresignedPut.
	flow("presign", func(t *testing.T, e *awscliEnv) {
		e.ok(e.run("90", "s3", "cp", e.file("presign.txt", "presigned read"), "s3://"+bucket+"/presign/obj"))
		get := func(u string) (int, string) {
			t.Helper()
			resp, err := client.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}
		for _, token := range []string{"90", ""} {
			u := strings.TrimSpace(e.ok(e.run(token, "s3", "presign", "s3://"+bucket+"/presign/obj", "--expires-in", "300")).stdout)
			if has := strings.Contains(u, "X-Fencing-Token=90"); has != (token != "") || !strings.Contains(u, "X-Amz-Signature=") {
				t.Errorf("FENCING_TOKEN=%q: presigned URL %s: want a SigV4 URL with the token in its query exactly when set", token, u)
			}
			if status, body := get(u); status != http.StatusOK || body != "presigned read" {
				t.Errorf("GET %s: %d %q, want 200 with the object", u, status, body)
			}
			if token != "" {
				// The signature covers the token: another one does not verify.
				forged := strings.Replace(u, "X-Fencing-Token=90", "X-Fencing-Token=91", 1)
				if status, body := get(forged); status != http.StatusForbidden || !strings.Contains(body, "SignatureDoesNotMatch") {
					t.Errorf("GET with the token changed in the URL: %d %q, want 403 SignatureDoesNotMatch", status, body)
				}
			}
		}
	})

	// A multipart upload interrupted by a takeover: the stale holder's next
	// part and its complete are refused, its abort of its own upload goes
	// through, it cannot abort the new holder's upload, and no upload is left.
	flow("multipart-abort", func(t *testing.T, e *awscliEnv) {
		const key = "mp/out.bin"
		uploadID := func(r awscliResult) string {
			t.Helper()
			var out struct{ UploadId string }
			if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.UploadId == "" {
				t.Fatalf("create-multipart-upload printed %q: %v", r.stdout, err)
			}
			return out.UploadId
		}
		id41 := uploadID(e.ok(e.run("41", "s3api", "create-multipart-upload", "--bucket", bucket, "--key", key)))
		part := e.file("part1.bin", strings.Repeat("1", 5<<20))
		e.ok(e.run("41", "s3api", "upload-part", "--bucket", bucket, "--key", key, "--upload-id", id41, "--part-number", "1", "--body", part))
		e.ok(e.run("42", "s3api", "put-object", "--bucket", bucket, "--key", key, "--body", e.file("mp42.txt", "object of 42")))
		e.refused(e.run("41", "s3api", "upload-part", "--bucket", bucket, "--key", key, "--upload-id", id41, "--part-number", "2",
			"--body", e.file("tail41.txt", "tail of 41")), e.s3apiExit(), "StaleFencingToken", "UploadPart", "42")
		e.refused(e.run("41", "s3api", "complete-multipart-upload", "--bucket", bucket, "--key", key, "--upload-id", id41,
			"--multipart-upload", `{"Parts":[{"PartNumber":1,"ETag":"x"}]}`), e.s3apiExit(), "StaleFencingToken", "CompleteMultipartUpload", "42")
		e.ok(e.run("41", "s3api", "abort-multipart-upload", "--bucket", bucket, "--key", key, "--upload-id", id41))
		id42 := uploadID(e.ok(e.run("42", "s3api", "create-multipart-upload", "--bucket", bucket, "--key", key)))
		e.refused(e.run("41", "s3api", "abort-multipart-upload", "--bucket", bucket, "--key", key, "--upload-id", id42),
			e.s3apiExit(), "StaleFencingToken", "AbortMultipartUpload", "42")
		e.ok(e.run("42", "s3api", "abort-multipart-upload", "--bucket", bucket, "--key", key, "--upload-id", id42))
		left, err := backend.Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
		if err != nil {
			t.Fatalf("ListMultipartUploads at versitygw: %v", err)
		}
		if len(left.Uploads) != 0 {
			t.Errorf("versitygw still lists %d multipart uploads, want none", len(left.Uploads))
		}
		awscliWantObjects(t, backend, bucket, "mp/", map[string]string{key: "object of 42"})
	})

	// A sync with deletions: the holder's uploads and deletes go through; a
	// stale holder's sync of its older copy is refused and changes nothing.
	flow("sync-delete", func(t *testing.T, e *awscliEnv) {
		dst := "s3://" + bucket + "/sync"
		old := map[string]string{"a.txt": "a1", "b.txt": "b1", "old.txt": "old"}
		for name, content := range old {
			e.file("sync60/"+name, content)
		}
		e.ok(e.run("60", "s3", "sync", "sync60", dst, "--delete"))
		// Every file of the new holder differs in size from the old one's, so
		// the stale holder's sync below wants to write every key.
		current := map[string]string{"a.txt": "a2 from 61", "b.txt": "b2 from 61", "c.txt": "c2 from 61"}
		for name, content := range current {
			e.file("sync61/"+name, content)
		}
		r := e.ok(e.run("61", "s3", "sync", "sync61", dst, "--delete"))
		if !strings.Contains(r.stdout, "delete: "+dst+"/old.txt") || !strings.Contains(r.stdout, "upload: sync61/c.txt to "+dst+"/c.txt") {
			t.Errorf("sync by 61 did not upload c.txt and delete old.txt: %s", r)
		}
		want := map[string]string{}
		for name, content := range current {
			want["sync/"+name] = content
		}
		awscliWantObjects(t, backend, bucket, "sync/", want)

		r = e.run("60", "s3", "sync", "sync60", dst, "--delete")
		if r.code != 1 || strings.Count(r.stderr, "(StaleFencingToken)") != 4 ||
			!strings.Contains(r.stderr, "delete failed: "+dst+"/c.txt") || !strings.Contains(r.stderr, "upload failed: sync60/old.txt to "+dst+"/old.txt") {
			t.Errorf("stale sync by 60: want exit 1 and 4 StaleFencingToken failures (3 uploads, the delete of c.txt), got %s", r)
		}
		awscliWantObjects(t, backend, bucket, "sync/", want)
	})

	// A bucket created before each of two jobs with unrelated token
	// sequences: CreateBucket passes unfenced, so both succeed. Between the
	// jobs the scratch bucket is removed at the store. With
	// S3_BUCKET_WRITES=fence the second job's create is refused: the failure
	// this default avoids.
	flow("create-bucket", func(t *testing.T, e *awscliEnv) {
		removeBucket := func(name string) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c := backend.Client()
			for key := range awscliObjects(t, backend, name, "") {
				if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(name), Key: aws.String(key)}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(name)}); err != nil {
				t.Fatal(err)
			}
		}
		job := func(endpoint, name, token string) awscliResult {
			t.Helper()
			create := e.runWith(awscliConfig{style: "path", plugin: true}, endpoint, token, "s3api", "create-bucket", "--bucket", name)
			if create.code == 0 {
				e.ok(e.runWith(awscliConfig{style: "path", plugin: true}, endpoint, token, "s3", "cp", e.file("job.txt", "job "+token), "s3://"+name+"/job-"+token+"/out.txt"))
			}
			return create
		}
		if r := e.ok(e.run("900", "s3", "mb", "s3://nightly")); !strings.Contains(r.stdout, "make_bucket: nightly") {
			t.Errorf("aws s3 mb: %s", r)
		}
		e.ok(e.run("900", "s3", "cp", e.file("job.txt", "job 900"), "s3://nightly/job-900/out.txt"))
		removeBucket("nightly")
		e.ok(job(e.endpoint, "nightly", "3"))
		awscliWantObjects(t, backend, "nightly", "", map[string]string{"job-3/out.txt": "job 3"})
		if _, status := s3FenceOf(t, in, "nightly"); status != http.StatusNotFound {
			t.Errorf("fence of the bucket nightly: status %d, want 404 (CreateBucket raised a fence)", status)
		}

		fenced := servertest.Start(t, servertest.Env(proxyEnv, map[string]string{"FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_S3_BUCKET_WRITES": "fence"}))
		_, fport, _ := net.SplitHostPort(fenced.Proxy)
		fendpoint := scheme + "://localhost:" + fport
		e.ok(job(fendpoint, "nightly-fenced", "900"))
		removeBucket("nightly-fenced")
		e.refused(job(fendpoint, "nightly-fenced", "3"), e.s3apiExit(), "StaleFencingToken", "CreateBucket", "900")
	})

	if !resign {
		return
	}
	// Gateway mode: the worker's key outside its grant gets the proxy's
	// AccessDenied, for a write and for a read, and the store's object is
	// untouched.
	flow("outside-grant", func(t *testing.T, e *awscliEnv) {
		dst := "s3://" + gwDenied + "/" + gwDeniedKey
		e.refused(e.run("100", "s3", "cp", e.file("outside.txt", "outside the grant"), dst), 1, "AccessDenied", "PutObject", "")
		e.refused(e.run("100", "s3api", "get-object", "--bucket", gwDenied, "--key", gwDeniedKey, "out.txt"),
			e.s3apiExit(), "AccessDenied", "GetObject", "")
		awscliWantObjects(t, backend, gwDenied, "", map[string]string{gwDeniedKey: "not for the workers"})
	})
}
