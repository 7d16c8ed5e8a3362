package testbin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const want = "9.9.9"

// fake writes an executable script dir/fptool that prints "fptool Version: v"
// for --version, and returns its path.
func fake(t *testing.T, dir, v string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "fptool")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho 'fptool Version: "+v+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func fakeTool(builds *atomic.Int32, buildErr error) Tool {
	return Tool{
		Name:    "fptool",
		Version: want,
		Env:     "FENCEPROXY_TEST_FPTOOL",
		Check: func(bin string) error {
			v, err := VersionLine(bin)
			if err != nil {
				return err
			}
			if v != "fptool Version: "+want {
				return fmt.Errorf("%s is %q, want %s", bin, v, want)
			}
			return nil
		},
		Build: func(ctx context.Context, gocmd string, env []string, out string) error {
			builds.Add(1)
			if buildErr != nil {
				return buildErr
			}
			time.Sleep(300 * time.Millisecond) // a build takes a while: another Find must wait for it
			return os.WriteFile(out, []byte("#!/bin/sh\necho 'fptool Version: "+want+"'\n"), 0o755)
		},
		Provide: "run the fptool installer",
	}
}

// places is a test's own PATH, GOBIN, GOPATH and cache, all empty.
type places struct {
	path, gobin, gopath, cache string
}

func setPlaces(t *testing.T) places {
	t.Helper()
	root := t.TempDir()
	p := places{
		path:   filepath.Join(root, "path"),
		gobin:  filepath.Join(root, "gobin"),
		gopath: filepath.Join(root, "gopath"),
		cache:  filepath.Join(root, "cache"),
	}
	t.Setenv("PATH", p.path)
	t.Setenv("GOBIN", "")
	t.Setenv("GOPATH", p.gopath)
	t.Setenv("XDG_CACHE_HOME", p.cache)
	t.Setenv("FENCEPROXY_TEST_FPTOOL", "")
	return p
}

func (p places) cached() string {
	return filepath.Join(p.cache, "fenceproxy", "fptool-"+want, "fptool")
}

// The lookup order: the variable, PATH, GOBIN, GOPATH/bin, the cache; a
// wrong version anywhere is passed over and noted.
func TestFindOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, p places)
		want   func(p places) string
		passed string // a note must name it
	}{
		{"variable first", func(t *testing.T, p places) {
			fake(t, p.path, want)
			t.Setenv("FENCEPROXY_TEST_FPTOOL", fake(t, filepath.Join(p.path, "..", "explicit"), want))
		}, func(p places) string { return filepath.Join(p.path, "..", "explicit", "fptool") }, ""},
		{"PATH", func(t *testing.T, p places) {
			fake(t, p.path, want)
			fake(t, filepath.Join(p.gopath, "bin"), want)
		}, func(p places) string { return filepath.Join(p.path, "fptool") }, ""},
		{"wrong version on PATH passed over for GOPATH/bin", func(t *testing.T, p places) {
			fake(t, p.path, "1.0.0")
			fake(t, filepath.Join(p.gopath, "bin"), want)
			fake(t, filepath.Dir(p.cached()), want)
		}, func(p places) string { return filepath.Join(p.gopath, "bin", "fptool") }, "1.0.0"},
		{"GOBIN before GOPATH/bin", func(t *testing.T, p places) {
			t.Setenv("GOBIN", p.gobin)
			fake(t, p.gobin, want)
			fake(t, filepath.Join(p.gopath, "bin"), want)
		}, func(p places) string { return filepath.Join(p.gobin, "fptool") }, ""},
		{"cache last", func(t *testing.T, p places) {
			fake(t, p.path, "1.0.0")
			fake(t, filepath.Join(p.gopath, "bin"), "1.0.1")
			fake(t, filepath.Dir(p.cached()), want)
		}, func(p places) string { return p.cached() }, "1.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := setPlaces(t)
			tc.setup(t, p)
			var builds atomic.Int32
			bin, notes, err := Find(context.Background(), fakeTool(&builds, nil))
			if err != nil || bin != tc.want(p) {
				t.Fatalf("Find = %q, %v; want %q", bin, err, tc.want(p))
			}
			if builds.Load() != 0 {
				t.Errorf("built %d times, want none", builds.Load())
			}
			if tc.passed != "" && !strings.Contains(strings.Join(notes, "\n"), tc.passed) {
				t.Errorf("notes %q do not name the version passed over, %s", notes, tc.passed)
			}
		})
	}
}

// The variable naming a wrong version is an error, not a skip.
func TestFindVariableWrong(t *testing.T) {
	p := setPlaces(t)
	fake(t, filepath.Join(p.gopath, "bin"), want)
	t.Setenv("FENCEPROXY_TEST_FPTOOL", fake(t, p.path, "1.0.0"))
	var builds atomic.Int32
	_, _, err := Find(context.Background(), fakeTool(&builds, nil))
	if err == nil || isMissing(err) || !strings.Contains(err.Error(), "FENCEPROXY_TEST_FPTOOL") {
		t.Fatalf("Find = %v, want an error naming the variable, not a missing tool", err)
	}
}

// Nowhere: Finds at once build it into the cache once, under the lock, and
// the next Find uses it.
func TestFindBuildsOnce(t *testing.T) {
	p := setPlaces(t)
	fake(t, p.path, "1.0.0")
	var builds atomic.Int32
	tool := fakeTool(&builds, nil)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	bins := make([]string, 3)
	notes := make([][]string, 3)
	for i := range 3 {
		wg.Go(func() { bins[i], notes[i], errs[i] = Find(context.Background(), tool) })
	}
	wg.Wait()
	built := 0 // the others waited for it, or (late) found it cached
	for i := range 3 {
		if errs[i] != nil || bins[i] != p.cached() {
			t.Fatalf("Find %d = %q, %v; want %q", i, bins[i], errs[i], p.cached())
		}
		n := strings.Join(notes[i], "\n")
		if strings.Contains(n, "built "+p.cached()) {
			built++
		}
	}
	if n := builds.Load(); n != 1 || built != 1 {
		t.Fatalf("built %d times, noted built by %d Finds; want once by one: %q", n, built, notes)
	}
	if bin, _, err := Find(context.Background(), tool); err != nil || bin != p.cached() || builds.Load() != 1 {
		t.Fatalf("Find after the build = %q, %v, %d builds; want the cached one, unbuilt", bin, err, builds.Load())
	}
	if entries, _ := os.ReadDir(filepath.Dir(p.cached())); len(entries) != 2 { // the binary and the lock
		t.Errorf("cache directory holds %d entries, want the binary and the lock", len(entries))
	}
}

// Nowhere and the build fails: a missing tool, whose message says how to
// provide it and what was passed over.
func TestFindBuildFails(t *testing.T) {
	p := setPlaces(t)
	fake(t, p.path, "1.0.0")
	var builds atomic.Int32
	_, _, err := Find(context.Background(), fakeTool(&builds, errors.New("no network")))
	if !isMissing(err) {
		t.Fatalf("Find = %v, want a missing tool", err)
	}
	for _, s := range []string{"no network", "run the fptool installer", "FENCEPROXY_TEST_FPTOOL", "1.0.0"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("message %q lacks %q", err, s)
		}
	}
}

// Require skips on a missing tool, and fails with CI set. The test runs
// itself as a child to see both.
func TestRequireMissing(t *testing.T) {
	if os.Getenv("TESTBIN_CHILD") == "1" {
		var builds atomic.Int32
		Require(t, fakeTool(&builds, errors.New("no network")))
		t.Fatal("Require returned without the tool")
	}
	root := t.TempDir()
	for _, ci := range []string{"", "1"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRequireMissing$", "-test.v")
		cmd.Env = []string{"PATH=", "HOME=" + root, "XDG_CACHE_HOME=" + filepath.Join(root, "cache"), "GOPATH=" + filepath.Join(root, "go"), "TESTBIN_CHILD=1", "CI=" + ci}
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case ci == "" && (err != nil || !strings.Contains(string(out), "--- SKIP") || !strings.Contains(string(out), "run the fptool installer")):
			t.Errorf("without CI: %v, want a skip that says how to provide it\n%s", err, out)
		case ci != "" && (!errors.As(err, &exit) || !strings.Contains(string(out), "--- FAIL") || !strings.Contains(string(out), "CI is set")):
			t.Errorf("with CI=1: %v, want a failure\n%s", err, out)
		}
	}
}
