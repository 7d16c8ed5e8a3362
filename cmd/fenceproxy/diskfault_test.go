package main

// Disk faults end to end: below FENCEPROXY_MIN_FREE_SPACE raises fail with
// 503 store_error, nothing is forwarded, /readyz is 503, and service resumes
// once space returns. One test fills a real small tmpfs under the real binary
// (it needs root and a working mount, and skips without them); the other
// runs everywhere, with a reserve above the test directory's real free space.
// store/badger's TestSpace* tests cover the same behaviour with an injected
// statfs.

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// dfAnswer is a response with its body read.
type dfAnswer struct {
	status int
	header http.Header
	body   string
}

// dfPut sends a fenced PUT to base+path with token and X-Request-Id id.
func dfPut(t *testing.T, base, path, token, id string) dfAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, base+path, strings.NewReader("payload of "+id))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Fencing-Token", token)
	req.Header.Set("X-Request-Id", id)
	return dfDo(t, req)
}

func dfGet(t *testing.T, url string) dfAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return dfDo(t, req)
}

func dfDo(t *testing.T, req *http.Request) dfAnswer {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return dfAnswer{resp.StatusCode, resp.Header, string(body)}
}

// dfStoreError asserts a is the proxy's 503 store_error problem.
func dfStoreError(t *testing.T, a dfAnswer) {
	t.Helper()
	if a.status != http.StatusServiceUnavailable || a.header.Get("Fencing-Refused") != "store_error" || a.header.Get("Retry-After") == "" {
		t.Fatalf("got %d Fencing-Refused=%q Retry-After=%q %s; want 503 store_error with Retry-After",
			a.status, a.header.Get("Fencing-Refused"), a.header.Get("Retry-After"), a.body)
	}
	var pb struct {
		Status int    `json:"status"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(a.body), &pb); err != nil || pb.Status != 503 || pb.Reason != "store_error" {
		t.Fatalf("problem body %q (%v), want status 503 reason store_error", a.body, err)
	}
}

// dfCount counts the JSON log lines whose msg starts with prefix.
func dfCount(logs, prefix string) int {
	n := 0
	for line := range strings.SplitSeq(logs, "\n") {
		var rec struct{ Msg string }
		if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, prefix) {
			n++
		}
	}
	return n
}

const (
	dfLowMsg  = "low on disk space"
	dfBackMsg = "disk space back above the reserve"
)

func dfFree(t *testing.T, dir string) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Bavail) * uint64(st.Bsize)
}

// dfMountTmpfs mounts a tmpfs of size bytes on a new directory, or skips the
// test with the reason; cleanup unmounts it (after cleanups registered later,
// such as stopping a process that uses it).
func dfMountTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root; store/badger's TestSpace* tests cover this with an injected statfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+strconv.Itoa(size)+",mode=0700"); err != nil {
		t.Skipf("mount of a tmpfs refused (%v); store/badger's TestSpace* tests cover this with an injected statfs", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// dfFill creates a file of n bytes whose blocks are really taken.
func dfFill(t *testing.T, path string, n uint64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(n)); err == nil {
		return
	} else if !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("fallocate %d bytes: %v", n, err)
	}
	chunk := make([]byte, 1<<20)
	for left := n; left > 0; {
		k := min(left, uint64(len(chunk)))
		if _, err := f.Write(chunk[:k]); err != nil {
			t.Fatalf("filling %s: %v", path, err)
		}
		left -= k
	}
}

// A real small tmpfs under the real binary: fill it below the reserve, watch
// raises fail closed, delete the filler, watch service resume, and see the
// process exit cleanly (Badger writes through mmap; on a full tmpfs a write
// would kill it with SIGBUS).
func TestDiskFaultTmpfs(t *testing.T) {
	const size, reserve = 64 << 20, 16 << 20
	mnt := dfMountTmpfs(t, size)
	backend := servertest.NewRecordingBackend(t)
	env := serveEnv(backend.URL(), filepath.Join(mnt, "data"))
	env["FENCEPROXY_MIN_FREE_SPACE"] = "16MiB"
	p := startProcess(t, env)
	p.waitServing(t)
	proxyURL, controlURL := "http://"+p.Proxy, "http://"+p.Control

	if a := dfPut(t, proxyURL, "/bkt/obj", "1", "first"); a.status != http.StatusOK {
		t.Fatalf("first write: %d %s", a.status, a.body)
	}
	filler := filepath.Join(mnt, "filler")
	dfFill(t, filler, dfFree(t, mnt)-reserve/2)
	if free := dfFree(t, mnt); free >= reserve {
		t.Fatalf("%d bytes still free after filling, want below %d", free, reserve)
	}

	for i := range 3 {
		id := "low-" + strconv.Itoa(i)
		dfStoreError(t, dfPut(t, proxyURL, "/bkt/obj", "2", id))
		if backend.Saw(id) {
			t.Fatalf("%s reached the backend while the disk was low", id)
		}
	}
	// The current holder's token needs no raise, so it still passes.
	if a := dfPut(t, proxyURL, "/bkt/obj", "1", "holder"); a.status != http.StatusOK || !backend.Saw("holder") {
		t.Fatalf("write with the current token while low: %d %s", a.status, a.body)
	}
	if a := dfGet(t, controlURL+"/readyz"); a.status != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while low: %d %s", a.status, a.body)
	}
	if code, body := servertest.Call(t, http.MethodPost, controlURL+"/v1/leases/bkt/other", `{"holder":"A","ttl":"10s"}`, ""); code != http.StatusServiceUnavailable {
		t.Fatalf("lease acquire while low: %d %v", code, body)
	}
	if code, body := servertest.Call(t, http.MethodGet, controlURL+"/v1/fences/bkt/obj", "", ""); code != http.StatusOK || body["token"] != "1" {
		t.Fatalf("fence after refused raises: %d %v, want token 1", code, body)
	}
	if n := dfCount(p.Stderr.String(), dfLowMsg); n != 1 {
		t.Fatalf("%d %q log lines, want 1\nstderr:\n%s", n, dfLowMsg, p.Stderr)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if a := dfPut(t, proxyURL, "/bkt/obj", "2", "after"); a.status != http.StatusOK || !backend.Saw("after") {
		t.Fatalf("the same write after space returned: %d %s", a.status, a.body)
	}
	if a := dfGet(t, controlURL+"/readyz"); a.status != http.StatusOK {
		t.Fatalf("/readyz after space returned: %d %s", a.status, a.body)
	}
	if n := dfCount(p.Stderr.String(), dfBackMsg); n != 1 {
		t.Fatalf("%d %q log lines, want 1\nstderr:\n%s", n, dfBackMsg, p.Stderr)
	}
	backend.CheckOrder(t)

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := p.wait(20 * time.Second)
	if err != nil || code != 0 || strings.Contains(p.Stderr.String(), "fatal error") {
		t.Fatalf("exit after SIGTERM: code %d, %v; want a clean 0\nstderr:\n%s", code, err, p.Stderr)
	}
}

// Everywhere, without mounting: a reserve above the real free space of the
// test's file system refuses raises and lease changes and makes /readyz 503;
// after a restart with a small reserve, the refused token turns out never to
// have been written, and writes go through.
func TestDiskFaultReserveAboveFreeSpace(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	dir := t.TempDir()
	env := map[string]string{
		"FENCEPROXY_UPSTREAM": backend.URL(), "FENCEPROXY_DATA_DIR": dir,
		"FENCEPROXY_MIN_FREE_SPACE": strconv.FormatUint(dfFree(t, dir)+1<<30, 10),
	}
	in := servertest.Start(t, env)
	if !strings.Contains(in.Logs.String(), `"min_free_space":"`) {
		t.Fatalf("start-up log lacks min_free_space:\n%s", in.Logs)
	}
	for i := range 3 {
		id := "low-" + strconv.Itoa(i)
		dfStoreError(t, dfPut(t, in.ProxyURL(), "/bkt/obj", "10", id))
		if backend.Saw(id) {
			t.Fatalf("%s reached the backend below the reserve", id)
		}
	}
	if a := dfGet(t, in.ControlURL()+"/readyz"); a.status != http.StatusServiceUnavailable {
		t.Fatalf("/readyz below the reserve: %d %s", a.status, a.body)
	}
	if code, body := servertest.Call(t, http.MethodPost, in.ControlURL()+"/v1/leases/bkt/lease", `{"holder":"A","ttl":"10s"}`, ""); code != http.StatusServiceUnavailable {
		t.Fatalf("lease acquire below the reserve: %d %v", code, body)
	}
	if n := dfCount(in.Logs.String(), dfLowMsg); n != 1 {
		t.Fatalf("%d %q log lines, want 1\nlogs:\n%s", n, dfLowMsg, in.Logs)
	}
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}

	env["FENCEPROXY_MIN_FREE_SPACE"] = "1MiB"
	in = servertest.Start(t, env)
	if a := dfGet(t, in.ControlURL()+"/readyz"); a.status != http.StatusOK {
		t.Fatalf("/readyz with a small reserve: %d %s", a.status, a.body)
	}
	// 7 < 10: had the refused raise to 10 been written, 7 would be stale.
	if a := dfPut(t, in.ProxyURL(), "/bkt/obj", "7", "after"); a.status != http.StatusOK || !backend.Saw("after") {
		t.Fatalf("write after the restart: %d %s", a.status, a.body)
	}
	if tok := servertest.FenceMax(t, servertest.NewClient(t), in.Control, "bkt/obj"); tok != 7 {
		t.Fatalf("fence after the restart: %d, want 7", tok)
	}
	if got := len(backend.Requests()); got != 1 {
		t.Fatalf("backend got %d requests, want only the one after the restart", got)
	}
}
