package main

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// The JSON fields the clean-stop mark shows in: server's tests read them too.
func cleanStopLogged(logs string) bool  { return strings.Contains(logs, `"clean_stop":true`) }
func cleanStartLogged(logs string) bool { return strings.Contains(logs, `"clean_start":true`) }

// TestCleanStopMarkTakenBeforeCrash: a process that started clean took the
// mark; killed with SIGKILL, it leaves none, and the start after it waits.
func TestCleanStopMarkTakenBeforeCrash(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	client := servertest.NewClient(t)
	dir := t.TempDir()
	env := serveEnv(backend.URL(), dir)
	first := servertest.Start(t, env)
	if st, _ := servertest.PutToken(t, client, first.ProxyURL(), "/bkt/obj", "5", "a"); st != http.StatusOK {
		t.Fatalf("first write: %d", st)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	if !cleanStopLogged(first.Logs.String()) {
		t.Fatalf("idle stop not clean:\n%s", first.Logs)
	}
	p := startProcess(t, env)
	p.waitServing(t)
	if !cleanStartLogged(p.Stderr.String()) {
		t.Fatalf("the start after a clean stop did not log clean_start=true:\n%s", p.Stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "CLEAN_STOP")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the mark is still there while the process serves: %v", err)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(10 * time.Second)
	third := servertest.Start(t, env)
	if cleanStartLogged(third.Logs.String()) {
		t.Fatalf("the start after a SIGKILL logged clean_start=true:\n%s", third.Logs)
	}
	if !strings.Contains(third.Logs.String(), "start-up grace: no clean-stop mark (a crash, a kill") {
		t.Fatalf("the start after a SIGKILL did not log its start-up grace:\n%s", third.Logs)
	}
}
