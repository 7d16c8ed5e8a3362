package etcdtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testbin"
)

// Debian's etcd-server first on PATH (a script printing its version here)
// is passed over, named in the notes, for the etcd 3.7.3 in GOPATH/bin: the
// one this test binary resolved, linked into a GOPATH of the test's own.
func TestFindPassesOverOtherVersion(t *testing.T) {
	built := lookPath(t)
	root := t.TempDir()
	debian := filepath.Join(root, "usr", "bin")
	gobin := filepath.Join(root, "go", "bin")
	for _, d := range []string{debian, gobin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(debian, Binary), []byte("#!/bin/sh\necho 'etcd Version: 3.4.23'\necho 'Git SHA: Not provided'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(built, filepath.Join(gobin, Binary)); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", debian+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(Env, "")
	t.Setenv("GOBIN", "")
	t.Setenv("GOPATH", filepath.Join(root, "go"))
	t.Setenv("XDG_CACHE_HOME", filepath.Join(root, "cache"))
	tool := Tool
	tool.Build = nil // found, not built
	bin, notes, err := testbin.Find(context.Background(), tool)
	if err != nil || bin != filepath.Join(gobin, Binary) {
		t.Fatalf("Find = %q, %v; want %s", bin, err, filepath.Join(gobin, Binary))
	}
	if n := strings.Join(notes, "\n"); !strings.Contains(n, filepath.Join(debian, Binary)) || !strings.Contains(n, "3.4.23") {
		t.Fatalf("notes %q do not name the etcd passed over", notes)
	}
	t.Log(notes)
}
