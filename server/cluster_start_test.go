package server_test

import (
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/etcdtest"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
	"github.com/fenceproxy/fenceproxy/internal/testbin"
)

// A fresh replica's /readyz says ready only once every shard has an owner:
// the writes it then lets in, one on each of the 64 shards, are admitted,
// none answered 503 shard_unavailable. Without the wait (Cluster.Ready
// checking the etcd lease only), most of them were.
func TestClusterReadyMeansEveryShardPlaced(t *testing.T) {
	c := etcdtest.Start(t)
	backend := servertest.NewRecordingBackend(t)
	client := servertest.NewClient(t)
	in := startReplicas(t, c, backend.URL(), 1, map[string]string{"FENCEPROXY_SHARDS": "64", "FENCEPROXY_LOG_LEVEL": "debug"})[0]

	// /readyz is polled without a pause: the first 200 is the moment a load
	// balancer would send traffic.
	var notReady string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(in.ControlURL() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 512)
		n, _ := resp.Body.Read(b)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		notReady = string(b[:n])
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not ready after 30s: %d %s", resp.StatusCode, notReady)
		}
	}
	t.Logf("last answer before ready: %s", notReady)

	// 400 names cover all 64 shards (the chance that one is missed is
	// below 1e-9); the writes go in parallel, as a load balancer's would.
	const names = 400
	statuses := make(chan int, names)
	for i := range names {
		go func() {
			req, _ := http.NewRequest(http.MethodPut, in.ProxyURL()+"/ready/k"+strconv.Itoa(i), strings.NewReader("x"))
			req.Header.Set("X-Fencing-Token", "1")
			resp, err := client.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	unavailable := 0
	for range names {
		switch s := <-statuses; {
		case s == http.StatusServiceUnavailable:
			unavailable++
		case s >= 300 || s == 0:
			t.Errorf("a write right after /readyz: %d", s)
		}
	}
	if unavailable > 0 {
		t.Fatalf("%d of %d writes sent right after /readyz said ready were answered 503", unavailable, names)
	}
	if !in.Logs.Contains("every shard has an owner; ready") {
		t.Errorf("no log line for the moment the replica became ready:\n%s", in.Logs)
	}
	if in.Logs.Contains("older than 3.5") {
		t.Errorf("warned about etcd %s:\n%s", etcdtest.Version, in.Logs)
	}
}

// oldEtcd returns an etcd binary older than 3.5, Debian's etcd-server
// (3.4.23, /usr/bin/etcd) or FENCEPROXY_TEST_ETCD_OLD's: the test is
// skipped without one, or fails when CI is set (.ci/run installs it).
func oldEtcd(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("FENCEPROXY_TEST_ETCD_OLD"), "/usr/bin/etcd"}
	if p, err := exec.LookPath("etcd"); err == nil {
		candidates = append(candidates, p)
	}
	for _, bin := range candidates {
		if bin == "" {
			continue
		}
		v, err := testbin.VersionLine(bin)
		if err == nil && strings.HasPrefix(v, "etcd Version: 3.") {
			if minor, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(v, "etcd Version: 3."), ".", 2)[0]); err == nil && minor < 5 {
				return bin
			}
		}
	}
	msg := "no etcd older than 3.5 (install Debian's etcd-server, or name one in FENCEPROXY_TEST_ETCD_OLD)"
	if os.Getenv("CI") != "" {
		t.Fatal("CI is set: " + msg)
	}
	t.Skip(msg)
	return ""
}

// A cluster started on etcd 3.4 runs, and says at start that the release
// lacks lease fixes it relies on.
func TestClusterWarnsOnOldEtcd(t *testing.T) {
	c := etcdtest.StartBinary(t, oldEtcd(t), 1)
	backend := servertest.NewRecordingBackend(t)
	client := servertest.NewClient(t)
	in := startReplicas(t, c, backend.URL(), 1, nil)[0]
	if !in.Logs.WaitFor("older than 3.5", 10*time.Second) {
		t.Fatalf("no warning about etcd 3.4 at start:\n%s", in.Logs)
	}
	if !in.Logs.Contains(`"version":"3.4.`) {
		t.Errorf("the warning does not name the version:\n%s", in.Logs)
	}
	settle(t, client, []*servertest.Instance{in}, []string{"/old/a"})
}
