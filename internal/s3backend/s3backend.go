// Package s3backend starts versitygw, a real S3 server that verifies every
// request's SigV4 signature, as a backend for tests: a process on a loopback
// port over a temporary posix directory, with root credentials.
//
// The binary, versitygw v1.8.0, is found by internal/testbin (see Tool): on
// PATH or where go install puts it,
//
//	go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
//
// else it is built into the cache once. When it is nowhere and cannot be
// built, a test is skipped, unless the environment variable CI is set: then
// it fails, so CI never passes by skipping.
package s3backend

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fenceproxy/fenceproxy/internal/testbin"
)

// Binary is the command looked up on PATH; Module and Version are what its
// build info must name.
const (
	Binary  = "versitygw"
	Module  = "github.com/versity/versitygw"
	Version = "v1.8.0"
)

// Region is the region versitygw runs in (its default) and Options signs for.
const Region = "us-east-1"

const (
	startTimeout = 20 * time.Second
	stopTimeout  = 10 * time.Second
)

// Server is a running versitygw.
type Server struct {
	URL       string // base URL, http://127.0.0.1:port
	AccessKey string // root access key
	SecretKey string // root secret key
	Dir       string // the posix root: one directory per bucket

	transport *http.Transport
	cmd       *exec.Cmd
	certFile  string // with keyFile: TLS (StartTLS)
	keyFile   string
	domain    string // --virtual-domain (StartVirtualHosted)
	out       *syncBuffer
	exited    chan struct{} // closed when the process has exited
	waitErr   error         // its Wait error, set before exited is closed
}

// Start runs versitygw on a free loopback port over a new t.TempDir, with
// fresh random root credentials, and returns once it answers HTTP. It skips
// the test when versitygw v1.8.0 is nowhere and cannot be built (fails when
// CI is set), and fails it when the binary does not start within 20s. Its
// output is logged when the test fails. Cleanup stops it (SIGTERM, then
// SIGKILL after 10s).
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, "", "", nil, "")
}

// StartVirtualHosted is Start with versitygw also reading virtual-hosted
// style (--virtual-domain): a request whose Host is {bucket}.{domain}, any
// port, is for that bucket; any other Host is path style.
func StartVirtualHosted(t testing.TB, domain string) *Server {
	t.Helper()
	return start(t, "", "", nil, domain)
}

// StartTLS is Start with versitygw serving HTTPS with the certificate and
// key in certFile and keyFile; pool (trusting the certificate) is what the
// Server's own clients use. URL is https://.
func StartTLS(t testing.TB, certFile, keyFile string, pool *x509.CertPool) *Server {
	t.Helper()
	return start(t, certFile, keyFile, pool, "")
}

func start(t testing.TB, certFile, keyFile string, pool *x509.CertPool, virtualDomain string) *Server {
	t.Helper()
	bin := lookPath(t)
	s := &Server{
		AccessKey: "VGW" + randomHex(t, 8),
		SecretKey: randomHex(t, 20),
		Dir:       t.TempDir(),
		transport: &http.Transport{Proxy: nil, DisableCompression: true, TLSClientConfig: &tls.Config{RootCAs: pool}},
		certFile:  certFile,
		keyFile:   keyFile,
		domain:    virtualDomain,
	}
	t.Cleanup(s.transport.CloseIdleConnections)
	// A free port is found by listening on port 0 and closing: another
	// process may take it before versitygw binds it, so try a few times.
	var err error
	for range 3 {
		if err = s.run(t, bin); err == nil {
			return s
		}
	}
	t.Fatalf("versitygw did not start: %v\noutput:\n%s", err, s.out)
	return nil
}

// run starts the process on a fresh port and waits until it answers; on an
// error the process has been stopped.
func (s *Server) run(t testing.TB, bin string) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	s.URL = "http://" + addr
	args := []string{"--port", addr}
	if s.certFile != "" {
		s.URL = "https://" + addr
		args = append(args, "--cert", s.certFile, "--key", s.keyFile)
	}
	if s.domain != "" {
		args = append(args, "--virtual-domain", s.domain)
	}
	s.out = &syncBuffer{}
	s.exited = make(chan struct{})
	s.cmd = exec.Command(bin, append(args, "posix", s.Dir)...)
	s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.SecretKey)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		return err
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(); err != nil {
		s.stop(t)
		return err
	}
	t.Cleanup(func() {
		s.stop(t)
		if t.Failed() {
			t.Logf("versitygw output:\n%s", s.out)
		}
	})
	return nil
}

// waitReady polls the server until versitygw answers (an unsigned GET / gets
// 403); the Server header tells it from another process that took the port.
func (s *Server) waitReady() error {
	c := &http.Client{Transport: s.transport, Timeout: time.Second}
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("versitygw exited before answering: %v", s.waitErr)
		default:
		}
		resp, err := c.Get(s.URL + "/")
		if err == nil {
			resp.Body.Close()
			if resp.Header.Get("Server") != "VERSITYGW" {
				return fmt.Errorf("%s answered with Server %q, not versitygw's", s.URL, resp.Header.Get("Server"))
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw did not answer on %s within %v: %v", s.URL, startTimeout, err)
		}
		time.Sleep(50 * time.Millisecond) // polls versitygw, another process: no event
	}
}

func (s *Server) stop(t testing.TB) {
	if !stopProcess(s.cmd, s.exited) {
		t.Errorf("versitygw did not stop within %v of SIGTERM; killed it", stopTimeout)
	}
}

// stopProcess sends cmd SIGTERM and waits until exited is closed, at most
// stopTimeout; then it kills it and waits. It reports whether SIGTERM was
// enough.
func stopProcess(cmd *exec.Cmd, exited <-chan struct{}) bool {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return true
	case <-time.After(stopTimeout):
		_ = cmd.Process.Kill()
		<-exited
		return false
	}
}

// Options are the options of a path-style S3 client for endpoint (the
// server's URL, or a proxy's in front of it) that signs with the server's
// root credentials, computes no optional checksums and never retries (a
// refusal is seen exactly once). Its HTTP client ignores HTTP_PROXY.
func (s *Server) Options(endpoint string) s3.Options {
	return clientOptions(endpoint, s.AccessKey, s.SecretKey, s.transport)
}

// clientOptions are the options of a path-style S3 client of endpoint that
// signs with key and secret over transport, computes no optional checksums
// and never retries.
func clientOptions(endpoint, key, secret string, transport *http.Transport) s3.Options {
	return s3.Options{
		Region:                     Region,
		BaseEndpoint:               aws.String(endpoint),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(key, secret, ""),
		Retryer:                    aws.NopRetryer{},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		HTTPClient:                 &http.Client{Transport: transport},
	}
}

// Client is an S3 client straight to the server (Options with its URL).
func (s *Server) Client(opts ...func(*s3.Options)) *s3.Client {
	return s3.New(s.Options(s.URL), opts...)
}

// CreateBucket creates bucket on the server directly (not through a proxy),
// failing the test on an error.
func (s *Server) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	createBucket(t, "versitygw", s.Client(), bucket)
}

// createBucket creates bucket with c, failing the test on an error.
func createBucket(t testing.TB, server string, c *s3.Client, bucket string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("%s: CreateBucket %q: %v", server, bucket, err)
	}
}

// Tool is versitygw for internal/testbin: the path in FENCEPROXY_TEST_VERSITYGW,
// else versitygw on PATH if it is v1.8.0 (another version is passed over),
// else $(go env GOPATH)/bin/versitygw, else the cache, else go install'ed into
// the cache once.
var Tool = testbin.Tool{
	Name:    Binary,
	Version: Version,
	Env:     "FENCEPROXY_TEST_VERSITYGW",
	Check:   func(bin string) error { return checkVersion(bin, Module, Version) },
	Build: func(ctx context.Context, gocmd string, env []string, out string) error {
		return testbin.Run(ctx, filepath.Dir(out), append(env, "GOBIN="+filepath.Dir(out)), gocmd,
			"install", Module+"/cmd/"+Binary+"@"+Version)
	},
	Provide: "go install " + Module + "/cmd/" + Binary + "@" + Version,
}

// lookPath finds the binary (testbin.Require): without it the test is
// skipped, or fails when CI is set.
func lookPath(t testing.TB) string {
	t.Helper()
	return testbin.Require(t, Tool)
}

// checkVersion reads the module version go install (or go build in a
// scratch module) stamped into the binary: versitygw --version prints "git"
// for such builds, weed version no module version at all.
func checkVersion(bin, module, version string) error {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("%s: reading its build info: %w", bin, err)
	}
	if info.Main.Path != module || info.Main.Version != version {
		return fmt.Errorf("%s is %s %s, want %s %s", bin, info.Main.Path, info.Main.Version, module, version)
	}
	return nil
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Addr().(*net.TCPAddr).Port)), nil
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// syncBuffer is the process's output, written by exec's copying goroutines
// while the test may read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
