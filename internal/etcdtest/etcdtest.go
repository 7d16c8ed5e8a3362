// Package etcdtest starts a real etcd for tests: separate etcd processes on
// loopback ports, each over a t.TempDir data directory. Start runs one
// member; StartCluster runs a cluster of several, whose members a test can
// kill, stop, continue and restart.
//
// The binary is etcd v3.7.3 built from the Go module go.etcd.io/etcd/server/v3
// (its root package is etcd's main). A current release, since Debian's
// etcd-server (3.4.23) lacks several lease fixes of 3.5 and later, and the
// cluster mode relies on leases. It is found by internal/testbin: the path in
// FENCEPROXY_TEST_ETCD, else etcd on PATH if it is 3.7.3 (another version is
// passed over), else $(go env GOPATH)/bin/etcd, else the cache
// (os.UserCacheDir()/fenceproxy/etcd-3.7.3/etcd), else it is built into the
// cache once. `go install go.etcd.io/etcd/server/v3@v3.7.3` does not work (the
// module's go.mod has replace directives), so it is built in a scratch module,
// as .ci/run does into $(go env GOPATH)/bin:
//
//	d=$(mktemp -d) && cd "$d" && go mod init etcdbuild &&
//	go get go.etcd.io/etcd/server/v3@v3.7.3 &&
//	go build -trimpath -o "$(go env GOPATH)/bin/etcd" go.etcd.io/etcd/server/v3
//
// When it is nowhere and cannot be built (no network), a test is skipped
// with those commands, or fails when CI is set (as .ci/run sets it), as for
// versitygw.
package etcdtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testbin"
)

// Binary is the command looked up; Version is the version its --version
// must print; Env may name its path.
const (
	Binary  = "etcd"
	Version = "3.7.3"
	Env     = "FENCEPROXY_TEST_ETCD"
)

// Install is how to install the binary, for skip messages.
const Install = "build etcd " + Version + " from go.etcd.io/etcd/server/v3 in a scratch module (go install refuses the module: it has replace directives): " +
	`d=$(mktemp -d) && cd "$d" && go mod init etcdbuild && go get go.etcd.io/etcd/server/v3@v` + Version +
	` && go build -trimpath -o "$(go env GOPATH)/bin/etcd" go.etcd.io/etcd/server/v3`

// Tool is etcd for internal/testbin: checked by its --version, built as
// Install says.
var Tool = testbin.Tool{
	Name:    Binary,
	Version: Version,
	Env:     Env,
	Check:   checkVersion,
	Build:   build,
	Provide: Install,
}

const (
	startTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
)

// Cluster is a running etcd cluster of one or more members.
type Cluster struct {
	Members []*Member
	t       testing.TB
	bin     string
	token   string
	initial string   // --initial-cluster
	args    []string // added to every member's command line
}

// Member is one etcd process.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:port, gRPC and HTTP (/health, /metrics)
	PeerURL   string
	DataDir   string

	c      *Cluster
	mu     sync.Mutex
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{} // closed when the current process has exited
}

// Start runs a one-member etcd and returns once it is healthy; args are
// added to etcd's command line (e.g. "--max-txn-ops", "10"). Cleanup stops
// it. When etcd 3.7.3 is nowhere and cannot be built, the test is skipped
// (fails with CI set).
func Start(t testing.TB, args ...string) *Cluster {
	t.Helper()
	return StartCluster(t, 1, args...)
}

// StartCluster runs an etcd cluster of n members, each a process with its
// own loopback ports and data directory, and returns once every member is
// healthy (a leader elected). Cleanup stops them (SIGTERM, then SIGKILL);
// their output is logged when the test failed. args are added to every
// member's command line.
func StartCluster(t testing.TB, n int, args ...string) *Cluster {
	t.Helper()
	return StartBinary(t, lookPath(t), n, args...)
}

// StartBinary is StartCluster with the etcd binary at bin, whatever its
// version: for a test of how fenceproxy meets another etcd release.
func StartBinary(t testing.TB, bin string, n int, args ...string) *Cluster {
	t.Helper()
	c := &Cluster{t: t, bin: bin, token: "etcdtest-" + randomHex(t, 8), args: args}
	// Ports are found by listening on port 0 and closing; another process
	// may take one meanwhile, so the whole start is tried a few times.
	var err error
	for range 3 {
		if err = c.start(n); err == nil {
			return c
		}
		c.stopAll()
	}
	t.Fatalf("etcd did not start: %v\n%s", err, c.output())
	return nil
}

func (c *Cluster) start(n int) error {
	c.Members = nil
	var initial []string
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	for i := range n {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: "http://127.0.0.1:" + strconv.Itoa(ports[2*i]),
			PeerURL:   "http://127.0.0.1:" + strconv.Itoa(ports[2*i+1]),
			DataDir:   c.t.TempDir(),
			c:         c,
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	c.initial = strings.Join(initial, ",")
	c.t.Cleanup(c.stopAll)
	c.t.Cleanup(func() {
		if c.t.Failed() {
			c.t.Logf("etcd output:\n%s", c.output())
		}
	})
	for _, m := range c.Members {
		if err := m.run("new"); err != nil {
			return err
		}
	}
	for _, m := range c.Members {
		if err := m.WaitHealthy(startTimeout); err != nil {
			return err
		}
	}
	return nil
}

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

func (c *Cluster) stopAll() {
	for _, m := range c.Members {
		m.stop()
	}
}

func (c *Cluster) output() string {
	var b strings.Builder
	for _, m := range c.Members {
		if m.out != nil {
			fmt.Fprintf(&b, "--- %s (%s)\n%s", m.Name, m.ClientURL, m.out)
		}
	}
	return b.String()
}

// run starts the member's process; state is "new" for the first start,
// "existing" for a restart over its data directory.
func (m *Member) run(state string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.c
	if m.out == nil {
		m.out = &syncBuffer{}
	}
	args := []string{
		"--name", m.Name,
		"--data-dir", m.DataDir,
		"--listen-client-urls", m.ClientURL,
		"--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", c.initial,
		"--initial-cluster-state", state,
		"--initial-cluster-token", c.token,
		"--log-level", "warn",
		// A small machine under load: the defaults (100 ms, 1 s) make
		// spurious elections likelier.
		"--heartbeat-interval", "100",
		"--election-timeout", "1000",
	}
	args = append(args, c.args...)
	m.cmd = exec.Command(c.bin, args...)
	m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
	if err := m.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", m.Name, err)
	}
	exited := make(chan struct{})
	m.exited = exited
	cmd := m.cmd
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return nil
}

// WaitHealthy polls the member's /health until it answers healthy (it has a
// leader and serves linearizable reads), or fails after timeout.
func (m *Member) WaitHealthy(timeout time.Duration) error {
	cl := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
	defer cl.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		select {
		case <-m.exitedChan():
			return fmt.Errorf("etcd %s exited before it was healthy", m.Name)
		default:
		}
		resp, err := cl.Get(m.ClientURL + "/health")
		if err == nil {
			var h struct {
				Health string `json:"health"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if h.Health == "true" {
				return nil
			}
			last = fmt.Sprintf("health %q", h.Health)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd %s not healthy on %s within %v: %s", m.Name, m.ClientURL, timeout, last)
		}
		time.Sleep(50 * time.Millisecond) // polls etcd, another process: no event
	}
}

func (m *Member) exitedChan() chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exited
}

// Signal sends sig to the member's process (SIGSTOP, SIGCONT...).
func (m *Member) Signal(sig syscall.Signal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits for the process to exit: a crash.
func (m *Member) Kill() {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.mu.Unlock()
	_ = cmd.Process.Kill()
	<-exited
}

// Restart starts the member again over its data directory, after Kill, and
// waits until it is healthy.
func (m *Member) Restart() error {
	select {
	case <-m.exitedChan():
	default:
		return fmt.Errorf("etcd %s is still running", m.Name)
	}
	if err := m.run("existing"); err != nil {
		return err
	}
	return m.WaitHealthy(startTimeout)
}

// Metric returns the sum of the samples of a counter or gauge named name on
// the member's /metrics whose labels contain every one of labels (each as
// `key="value"`).
func (m *Member) Metric(name string, labels ...string) (float64, error) {
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer cl.CloseIdleConnections()
	resp, err := cl.Get(m.ClientURL + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return 0, err
	}
	var sum float64
	found := false
lines:
	for line := range strings.Lines(buf.String()) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
		found = true
	}
	if !found {
		return 0, fmt.Errorf("no sample of %s%v on %s/metrics", name, labels, m.ClientURL)
	}
	return sum, nil
}

func (m *Member) stop() {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot handle SIGTERM
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(stopTimeout):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// lookPath finds the binary (testbin.Require): without it the test is
// skipped, or fails when CI is set.
func lookPath(t testing.TB) string {
	t.Helper()
	return testbin.Require(t, Tool)
}

func checkVersion(bin string) error {
	v, err := testbin.VersionLine(bin)
	if err != nil {
		return err
	}
	if v != "etcd Version: "+Version {
		return fmt.Errorf("%s is %q, want etcd Version: %s", bin, v, Version)
	}
	return nil
}

// build builds etcd into out as Install says, in a scratch module.
func build(ctx context.Context, gocmd string, env []string, out string) error {
	dir, err := os.MkdirTemp("", "etcdbuild-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, args := range [][]string{
		{"mod", "init", "etcdbuild"},
		{"get", "go.etcd.io/etcd/server/v3@v" + Version},
		{"build", "-trimpath", "-o", out, "go.etcd.io/etcd/server/v3"},
	} {
		if err := testbin.Run(ctx, dir, env, gocmd, args...); err != nil {
			return err
		}
	}
	return nil
}

// freePorts returns n loopback ports that were free a moment ago, all held
// open together so they differ.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// syncBuffer is a process's output, written by exec's copying goroutines
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
