package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// With DATA_DIR removed under it, fenceproxy fails closed and still exits on
// SIGTERM: Badger would retry its final flush forever, so the close is
// bounded (every maximum is fsynced already).
func TestSIGTERMAfterDataDirRemoved(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	p := startProcess(t, serveEnv(backend.URL(), dataDir))
	p.waitServing(t)
	client := servertest.NewClient(t)
	if st, _ := servertest.PutToken(t, client, "http://"+p.Proxy, "/bkt/obj", "3", "before"); st != http.StatusOK {
		t.Fatalf("PUT before removal: %d", st)
	}
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	if st, _ := servertest.PutToken(t, client, "http://"+p.Proxy, "/bkt/obj", "4", "after"); st != http.StatusServiceUnavailable {
		t.Errorf("raise after removal: %d, want 503", st)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// server.Close gives up on closing the store after 10s.
	if _, err := p.wait(10*time.Second + 10*time.Second); err != nil {
		t.Fatalf("no exit after SIGTERM: %v\nstderr:\n%s", err, p.Stderr)
	}
	if !strings.Contains(p.Stderr.String(), "fenceproxy stopped") {
		t.Errorf("no stop logged:\n%s", p.Stderr)
	}
}
