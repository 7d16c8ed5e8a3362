package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/buildinfo"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// goVersionM is what `go version -m` reads from a binary: the Go version, the
// main module's version and the VCS settings.
type goVersionM struct {
	goVersion, version, revision, modified string
}

func readGoVersionM(t *testing.T, bin string) goVersionM {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", bin, err)
	}
	var m goVersionM
	sc := bufio.NewScanner(bytes.NewReader(out))
	for first := true; sc.Scan(); first = false {
		f := strings.Fields(sc.Text())
		switch {
		case first && len(f) == 2:
			m.goVersion = f[1]
		case len(f) >= 3 && f[0] == "mod":
			m.version = f[2]
		case len(f) == 2 && f[0] == "build":
			if v, ok := strings.CutPrefix(f[1], "vcs.revision="); ok {
				m.revision = v
			}
			if v, ok := strings.CutPrefix(f[1], "vcs.modified="); ok {
				m.modified = v
			}
		}
	}
	if m.goVersion == "" || m.version == "" {
		t.Fatalf("go version -m %s: no Go or module version in\n%s", bin, out)
	}
	return m
}

// wantVersionText checks the text of `fenceproxy version` against what
// `go version -m` reads from the same binary.
func wantVersionText(t *testing.T, text string, m goVersionM) {
	t.Helper()
	want := []string{"fenceproxy " + m.version + "\n", "go:        " + m.goVersion + " "}
	if m.revision == "" {
		want = append(want, "revision:  unknown (built without VCS information)\n")
	} else {
		want = append(want, "revision:  "+m.revision+"\n", "modified:  "+m.modified+"\n")
	}
	if !strings.HasPrefix(text, want[0]) {
		t.Errorf("version text does not start with %q:\n%s", want[0], text)
	}
	for _, w := range want[1:] {
		if !strings.Contains(text, w) {
			t.Errorf("version text lacks %q:\n%s", w, text)
		}
	}
}

// TestRunVersion: version, --version and -version print the build
// information, needing no configuration.
func TestRunVersion(t *testing.T) {
	want := buildinfo.Read().String()
	for _, arg := range []string{"version", "--version", "-version"} {
		var stdout, stderr bytes.Buffer
		if err := Run(context.Background(), []string{arg}, nil, &stdout, &stderr); err != nil {
			t.Fatalf("Run(%q) = %v", arg, err)
		}
		if stdout.String() != want || stderr.Len() != 0 {
			t.Errorf("Run(%q) printed %q (stderr %q), want %q", arg, stdout.String(), stderr.String(), want)
		}
	}
}

// TestBinaryVersion: the built binary's version, --version, start-up log line
// (serve and demo) and fenceproxy_build_info metric name the build that `go
// version -m` reads from the binary.
func TestBinaryVersion(t *testing.T) {
	bin := fenceproxyBinary(t)
	m := readGoVersionM(t, bin)
	var first string
	for _, arg := range []string{"version", "--version"} {
		code, stdout, stderr := runProcess(t, 30*time.Second, nil, arg)
		if code != 0 || stderr != "" {
			t.Fatalf("fenceproxy %s: exit %d, stderr %q", arg, code, stderr)
		}
		wantVersionText(t, stdout, m)
		if first != "" && stdout != first {
			t.Errorf("fenceproxy %s printed %q, version printed %q", arg, stdout, first)
		}
		first = stdout
	}

	revision := m.revision
	if revision == "" {
		revision = buildinfo.Unknown
	}
	backend := servertest.NewRecordingBackend(t)
	for _, args := range [][]string{{"serve"}, {"demo"}} {
		t.Run(args[0], func(t *testing.T) {
			p := startProcess(t, serveEnv(backend.URL(), t.TempDir()), args...)
			p.waitServing(t)
			var rec map[string]any
			for _, line := range strings.Split(p.Stderr.String(), "\n") {
				var r map[string]any
				if json.Unmarshal([]byte(line), &r) == nil && r["msg"] == "fenceproxy started" {
					rec = r
					break
				}
			}
			if rec == nil {
				t.Fatalf("no start-up log line:\n%s", p.Stderr)
			}
			for k, want := range map[string]any{"version": m.version, "revision": revision, "go_version": m.goVersion} {
				if rec[k] != want {
					t.Errorf("start-up log line: %s = %v, want %v", k, rec[k], want)
				}
			}
			series := fmt.Sprintf(`fenceproxy_build_info{goversion=%q,revision=%q,version=%q} 1`, m.goVersion, revision, m.version)
			resp, err := http.Get("http://" + p.Control + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), "\n"+series+"\n") {
				t.Errorf("/metrics lacks %s", series)
			}
		})
	}
}

// TestBinaryVersionFromGitCheckout: built with `go build` in a git checkout,
// the binary names its commit, and a modified tree says so. The module's
// files are copied into a new repository with one commit, since a worktree
// or an archive may carry no VCS information.
func TestBinaryVersionFromGitCheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fenceproxy twice; skipped with -short")
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git command")
	}
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	src := strings.TrimSpace(string(root))
	files, err := exec.Command(git, "-C", src, "ls-files", "-co", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("the module is not in a git checkout: %v", err)
	}
	repo := t.TempDir()
	for _, f := range strings.Fields(string(files)) {
		data, err := os.ReadFile(filepath.Join(src, f))
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(repo, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(git, append([]string{"-C", repo, "-c", "user.name=test", "-c", "user.email=test@invalid", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %q: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	gitIn("init", "-q")
	gitIn("add", "-A")
	gitIn("commit", "-q", "-m", "snapshot")
	head := gitIn("rev-parse", "HEAD")

	build := func(name string) string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), name)
		cmd := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/fenceproxy")
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		return bin
	}
	version := func(bin string) string {
		t.Helper()
		out, err := exec.Command(bin, "version").Output()
		if err != nil {
			t.Fatalf("%s version: %v", bin, err)
		}
		return string(out)
	}

	clean := build("clean")
	m := readGoVersionM(t, clean)
	if m.revision != head || m.modified != "false" {
		t.Fatalf("go version -m: revision %q modified %q, want %s and false", m.revision, m.modified, head)
	}
	text := version(clean)
	wantVersionText(t, text, m)
	if !strings.Contains(text, "revision:  "+head+"\n") || !strings.Contains(text, "modified:  false\n") {
		t.Errorf("clean build's version text lacks revision %s, modified false:\n%s", head, text)
	}

	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	text = version(build("dirty"))
	if !strings.Contains(text, "revision:  "+head+"\n") || !strings.Contains(text, "modified:  true\n") {
		t.Errorf("modified build's version text lacks revision %s, modified true:\n%s", head, text)
	}
}
