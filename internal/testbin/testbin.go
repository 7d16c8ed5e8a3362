// Package testbin finds, or builds once, a tool of a pinned version that
// tests run as a separate process (etcd for internal/etcdtest, versitygw for
// internal/s3backend).
//
// A tool is looked up in this order, the first of the right version winning:
//
//  1. the path in its environment variable (FENCEPROXY_TEST_ETCD...): when
//     set, it must be the right version, or the test fails;
//  2. its name on PATH;
//  3. $(go env GOBIN), then $(go env GOPATH)/bin, where .ci/run and the
//     README's commands install it;
//  4. the cache, os.UserCacheDir()/fenceproxy/NAME-VERSION/NAME.
//
// Another version on PATH (Debian's etcd-server, say) is passed over and
// named in the test's log. When none is found the tool is built into the
// cache from the Go module proxy, with the go command of the toolchain
// running the tests, under a file lock so that the test binaries go test
// runs in parallel build it once. When that fails too (no network), the test
// is skipped with the commands that provide the tool, or fails when the
// environment variable CI is set.
package testbin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Tool is a binary of a pinned version.
type Tool struct {
	Name    string // the command, "etcd"
	Version string // as the messages and the cache directory name it, "3.7.3"
	Env     string // the variable that may name its path, "FENCEPROXY_TEST_ETCD"

	// Check returns nil when bin is Version, else an error that says what
	// it is instead.
	Check func(bin string) error
	// Build builds Version into the file out (which does not exist yet),
	// running gocmd; env is the environment for it.
	Build func(ctx context.Context, gocmd string, env []string, out string) error
	// Provide is how to install it by hand: shell commands, for the skip
	// message.
	Provide string
}

// BuildTimeout bounds a build (its downloads included); cold, etcd takes
// about 2.5 minutes on 2 idle cores.
const BuildTimeout = 15 * time.Minute

// missingError is a tool that is nowhere and could not be built: a skip,
// not a failure, unless CI is set.
type missingError struct{ msg string }

func (e *missingError) Error() string { return e.msg }

func isMissing(err error) bool {
	var m *missingError
	return errors.As(err, &m)
}

type result struct {
	once  sync.Once
	bin   string
	notes []string
	err   error
}

var (
	mu      sync.Mutex
	results = map[string]*result{}
)

// Require returns the path of tool, found or built once per test binary
// (see the package comment). Without it t is skipped, or fails when CI is
// set; an explicit path of the wrong version fails t. What was passed over,
// or built, is logged.
func Require(t testing.TB, tool Tool) string {
	t.Helper()
	mu.Lock()
	r := results[tool.Name+"@"+tool.Version]
	if r == nil {
		r = &result{}
		results[tool.Name+"@"+tool.Version] = r
	}
	mu.Unlock()
	r.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), buildBudget(t))
		defer cancel()
		r.bin, r.notes, r.err = Find(ctx, tool)
	})
	for _, n := range r.notes {
		t.Logf("%s: %s", tool.Name, n)
	}
	switch {
	case r.err == nil:
		return r.bin
	case isMissing(r.err) && os.Getenv("CI") == "":
		t.Skip(r.err)
	case isMissing(r.err):
		t.Fatalf("CI is set, so %s %s is required: %v", tool.Name, tool.Version, r.err)
	default:
		t.Fatal(r.err)
	}
	return ""
}

// buildBudget is how long finding (waiting for another process's build, or
// building) may take: BuildTimeout, or less when the test binary's -timeout
// comes sooner, leaving a minute for the tests.
func buildBudget(t testing.TB) time.Duration {
	budget := BuildTimeout
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := d.Deadline(); ok {
			budget = min(budget, time.Until(end)-time.Minute)
		}
	}
	return max(budget, time.Second)
}

// Find looks tool up in the order of the package comment and builds it into
// the cache when it is nowhere. notes say what was passed over and what was
// built. The error says how to provide the tool when it is nowhere and
// was not built (Require skips then).
func Find(ctx context.Context, tool Tool) (bin string, notes []string, err error) {
	if p := os.Getenv(tool.Env); p != "" {
		if err := tool.Check(p); err != nil {
			return "", nil, fmt.Errorf("%s=%s: %w", tool.Env, p, err)
		}
		return p, nil, nil
	}
	var passed []string // what was not the right version
	try := func(p string) bool {
		if p == "" {
			return false
		}
		if _, err := os.Stat(p); err != nil {
			return false
		}
		if err := tool.Check(p); err != nil {
			passed = append(passed, err.Error())
			notes = append(notes, "passed over: "+err.Error())
			return false
		}
		return true
	}
	if p, err := exec.LookPath(tool.Name); err == nil && try(p) {
		return p, notes, nil
	}
	gocmd := goCommand()
	gobin, gopath := goEnv(ctx, gocmd)
	var looked []string
	for _, dir := range []string{gobin, firstPath(gopath, "bin")} {
		if dir == "" || slices.Contains(looked, dir) {
			continue
		}
		looked = append(looked, dir)
		if p := filepath.Join(dir, tool.Name); try(p) {
			return p, notes, nil
		}
	}
	dir, err := CacheDir(tool)
	if err != nil {
		return "", notes, &missingError{fmt.Sprintf("%s %s is not on PATH nor in %s%s, and there is no cache directory to build it in (%v). To provide it, %s; or set %s to its path",
			tool.Name, tool.Version, strings.Join(looked, " or "), passedNote(passed), err, tool.Provide, tool.Env)}
	}
	looked = append(looked, dir)
	cached := filepath.Join(dir, tool.Name)
	if try(cached) {
		return cached, notes, nil
	}
	start := time.Now()
	built, err := build(ctx, tool, gocmd, dir, cached)
	if err != nil {
		return "", notes, &missingError{fmt.Sprintf("%s %s is not on PATH nor in %s%s, and building it into %s failed: %v. To provide it, %s; or set %s to its path",
			tool.Name, tool.Version, strings.Join(looked, " or "), passedNote(passed), dir, err, tool.Provide, tool.Env)}
	}
	took := time.Since(start).Round(time.Second)
	if built {
		notes = append(notes, fmt.Sprintf("%s %s was nowhere: built %s in %v", tool.Name, tool.Version, cached, took))
	} else {
		notes = append(notes, fmt.Sprintf("%s %s was nowhere: waited %v for another test process to build %s", tool.Name, tool.Version, took, cached))
	}
	return cached, notes, nil
}

func passedNote(passed []string) string {
	if len(passed) == 0 {
		return ""
	}
	return " (passed over: " + strings.Join(passed, "; ") + ")"
}

// CacheDir is where tool is built when it is nowhere else:
// os.UserCacheDir()/fenceproxy/NAME-VERSION.
func CacheDir(tool Tool) (string, error) {
	c, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(c, "fenceproxy", tool.Name+"-"+tool.Version), nil
}

// build builds tool into out, holding an flock on dir/lock: another test
// binary building it meanwhile is waited for, and its binary used (built is
// false).
func build(ctx context.Context, tool Tool, gocmd, dir, out string) (built bool, err error) {
	if tool.Build == nil {
		return false, errors.New("no build known")
	}
	if gocmd == "" {
		return false, errors.New("no go command (neither in runtime.GOROOT() nor on PATH)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	unlock, err := lock(ctx, filepath.Join(dir, "lock"))
	if err != nil {
		return false, err
	}
	defer unlock()
	if _, err := os.Stat(out); err == nil && tool.Check(out) == nil {
		return false, nil // built by another test binary while this one waited
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	if err := tool.Build(ctx, gocmd, buildEnv(), filepath.Join(tmp, tool.Name)); err != nil {
		if ctx.Err() != nil {
			return false, fmt.Errorf("not done within %v: %w", time.Since(start).Round(time.Second), err)
		}
		return false, err
	}
	if err := tool.Check(filepath.Join(tmp, tool.Name)); err != nil {
		return false, fmt.Errorf("built, but %w", err)
	}
	return true, os.Rename(filepath.Join(tmp, tool.Name), out)
}

// lock takes an exclusive flock on path, polling until ctx is done.
func lock(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("another test process held %s (building it) until the time ran out", path)
		case <-time.After(200 * time.Millisecond): // another process's flock: no event to wait on
		}
	}
}

// goCommand is the go command of the toolchain that built the test binary
// when it is still there, else go on PATH.
func goCommand() string {
	exe := "go"
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	if root := runtime.GOROOT(); root != "" {
		if p := filepath.Join(root, "bin", exe); isFile(p) {
			return p
		}
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return ""
}

// goEnv returns go env GOBIN and GOPATH, or GOPATH's default without a go
// command.
func goEnv(ctx context.Context, gocmd string) (gobin, gopath string) {
	if gocmd != "" {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, gocmd, "env", "GOBIN", "GOPATH").Output()
		if lines := strings.Split(string(out), "\n"); err == nil && len(lines) >= 2 {
			return strings.TrimSpace(lines[0]), strings.TrimSpace(lines[1])
		}
	}
	if p := os.Getenv("GOPATH"); p != "" {
		return os.Getenv("GOBIN"), p
	}
	if home, err := os.UserHomeDir(); err == nil {
		return os.Getenv("GOBIN"), filepath.Join(home, "go")
	}
	return os.Getenv("GOBIN"), ""
}

// firstPath joins elem to the first entry of a GOPATH list.
func firstPath(list, elem string) string {
	first, _, _ := strings.Cut(list, string(os.PathListSeparator))
	if first == "" {
		return ""
	}
	return filepath.Join(first, elem)
}

// buildEnv is the environment of a build: the tests' own, outside any
// workspace, with no GOFLAGS of the caller's module (-mod=vendor...).
func buildEnv() []string {
	return append(os.Environ(), "GOWORK=off", "GOFLAGS=")
}

// Run runs the go command gocmd with args in dir, for a Build; on failure
// its error has the last lines of the command's output.
func Run(ctx context.Context, dir string, env []string, gocmd string, args ...string) error {
	cmd := exec.CommandContext(ctx, gocmd, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.WaitDelay = 10 * time.Second // a killed go's compilers may hold its output open
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, tail(out.String(), 8))
	}
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// VersionLine runs bin --version and returns its first line.
func VersionLine(bin string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v: %s", bin, err, tail(string(out), 3))
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first), nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
