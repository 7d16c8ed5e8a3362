package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The memory of a fenceproxy process is bounded in bytes, not by the number
// of resources: every write raises a maximum that is kept on disk for good,
// so an unauthenticated client can make as many resources as it has
// requests. Kubernetes kills the container at its memory limit.
const (
	// memoryResourcesEnv sets how many resources TestMemoryBoundedInBytes
	// writes; the proof is 300000 (about 3 minutes on 2 cores).
	memoryResourcesEnv     = "FENCEPROXY_TEST_MEMORY_RESOURCES"
	memoryDefaultResources = 60_000
	// manifestMemoryLimit is limits.memory in deploy/k8s (sidecar and
	// gateway): 256Mi.
	manifestMemoryLimit = 256 << 20
	// memoryBound is what the test allows the anonymous memory: the limit
	// with a quarter to spare.
	memoryBound = manifestMemoryLimit * 3 / 4
)

// procMemory reads a process's resident set from /proc: VmRSS now, VmHWM
// (its peak) and the anonymous part of VmRSS, in bytes.
func procMemory(pid int) (rss, hwm, anon int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		kb, _ := strconv.ParseInt(fields[0], 10, 64)
		switch name {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			hwm = kb << 10
		case "RssAnon":
			anon = kb << 10
		}
	}
	return rss, hwm, anon, sc.Err()
}

// memoryCgroup makes a cgroup (v1 or v2) below this process's own with a
// memory limit of limit bytes, removed at cleanup, and returns its
// cgroup.procs file and a function reading its peak usage in bytes (page
// cache included, as Kubernetes counts it). It returns "" when it cannot
// (not root, no writable memory controller).
func memoryCgroup(t *testing.T, limit int64) (procs string, peak func() int64) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", nil
	}
	var dir, limitFile, peakFile string
	for line := range strings.SplitSeq(strings.TrimSpace(string(self)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case strings.Contains(","+parts[1]+",", ",memory,"): // v1
			dir, limitFile, peakFile = filepath.Join("/sys/fs/cgroup/memory", parts[2]), "memory.limit_in_bytes", "memory.max_usage_in_bytes"
		case parts[1] == "" && dir == "": // v2, unless v1 has the memory controller
			if c, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && strings.Contains(string(c), "memory") {
				dir, limitFile, peakFile = filepath.Join("/sys/fs/cgroup", parts[2]), "memory.max", "memory.peak"
			}
		}
	}
	if dir == "" {
		return "", nil
	}
	cg := filepath.Join(dir, fmt.Sprintf("fenceproxy-memory-test-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Logf("no cgroup of its own for the process (%v)", err)
		return "", nil
	}
	t.Cleanup(func() { os.Remove(cg) }) // after the process's own cleanup has killed it
	if err := os.WriteFile(filepath.Join(cg, limitFile), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Logf("no memory limit on the cgroup (%v)", err)
		return "", nil
	}
	return filepath.Join(cg, "cgroup.procs"), func() int64 {
		b, _ := os.ReadFile(filepath.Join(cg, peakFile))
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
}

// TestMemoryBoundedInBytes runs the binary with the product's defaults in a
// cgroup with the Kubernetes manifests' memory limit (256Mi), as a container
// would run (where the test cannot make a cgroup, GOMEMLIMIT is set to what
// fenceproxy sets itself in such a container), and writes to distinct
// resources with random 1 KiB keys (S3's longest) until
// FENCEPROXY_TEST_MEMORY_RESOURCES of them have a maximum. Every write must
// succeed (the process is not killed) and the peak of its anonymous memory,
// what the kernel cannot reclaim, must stay under three quarters of the
// limit. The pages of Badger's memory-mapped tables count toward the
// cgroup's usage too, but the kernel drops them under pressure; the test
// reports them.
func TestMemoryBoundedInBytes(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc to read the process's memory")
	}
	resources := memoryDefaultResources
	if s := os.Getenv(memoryResourcesEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", memoryResourcesEnv, s)
		}
		resources = n
	}
	var applied atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		applied.Add(1)
	}))
	defer backend.Close()
	dataDir := t.TempDir()
	env := serveEnv(backend.URL, dataDir)
	procs, cgroupPeak := memoryCgroup(t, manifestMemoryLimit)
	if procs == "" {
		env["GOMEMLIMIT"] = strconv.FormatInt(int64(manifestMemoryLimit*7/10), 10)
		t.Logf("no cgroup: GOMEMLIMIT=%s, as fenceproxy sets it under a %d-byte limit", env["GOMEMLIMIT"], manifestMemoryLimit)
	}
	p := startProcessIn(t, procs, env)
	p.waitServing(t)
	pid := p.cmd.Process.Pid

	const workers = 32
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	// "/bkt/" + 1020 random hex digits: the key is 1,024 bytes long, and no
	// two keys share more than a short prefix, so Badger cannot store them
	// in less than their length (keys with one long common prefix cost it
	// next to nothing).
	key := func(i int64) string {
		rng := rand.New(rand.NewPCG(uint64(i), 0x6b657973))
		b := make([]byte, 510)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		return "bkt/" + hex.EncodeToString(b)
	}
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(resources) || failed.Load() > 0 {
					return
				}
				req, _ := http.NewRequest(http.MethodPut, "http://"+p.Proxy+"/"+key(i), strings.NewReader("x"))
				req.Header.Set("X-Fencing-Token", "7")
				resp, err := client.Do(req)
				if err != nil {
					if failed.Add(1) == 1 {
						t.Errorf("write %d: %v", i, err)
					}
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK && failed.Add(1) == 1 {
					t.Errorf("write %d: %d", i, resp.StatusCode)
				}
			}
		})
	}
	var peakAnon int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if _, _, anon, err := procMemory(pid); err == nil && anon > peakAnon {
				peakAnon = anon
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-sampled
	took := time.Since(start)
	if failed.Load() > 0 {
		t.FailNow()
	}
	rss, hwm, anon, err := procMemory(pid)
	if err != nil {
		t.Fatal(err)
	}
	if got := applied.Load(); got != int64(resources) {
		t.Fatalf("the backend applied %d writes, want %d", got, resources)
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	t.Logf("%d resources with 1 KiB keys in %v: peak RSS (VmHWM) %s, RSS now %s (anonymous %s, peak anonymous %s); bound %s, manifests' limit %s",
		resources, took.Round(time.Second), mib(hwm), mib(rss), mib(anon), mib(peakAnon), mib(memoryBound), mib(manifestMemoryLimit))
	// The disk the records take (they are never removed), measured after a
	// clean stop has flushed Badger's memtables.
	p.cmd.Process.Signal(os.Interrupt)
	if code, err := p.wait(30 * time.Second); err != nil || code != 0 {
		t.Errorf("stop: exit %d, %v\nstderr:\n%s", code, err, p.Stderr)
	}
	var disk int64
	filepath.WalkDir(dataDir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				disk += fi.Size()
			}
		}
		return nil
	})
	t.Logf("DATA_DIR after a clean stop: %s, %d bytes a resource", mib(disk), disk/int64(resources))
	if cgroupPeak != nil {
		// fenceproxy found the cgroup's limit and set GOMEMLIMIT from it.
		want := fmt.Sprintf(`"msg":"Go memory limit","bytes":%d`, int64(manifestMemoryLimit*7/10))
		if !strings.Contains(p.Stderr.String(), want) {
			t.Errorf("no log line %s in a cgroup limited to %d bytes\nstderr:\n%s", want, manifestMemoryLimit, p.Stderr)
		}
		t.Logf("the cgroup's peak usage (page cache included): %s of its %s limit", mib(cgroupPeak()), mib(manifestMemoryLimit))
	}
	if peakAnon > memoryBound {
		t.Errorf("peak anonymous memory %s, above %s (three quarters of the manifests' limit)", mib(peakAnon), mib(memoryBound))
	}
}
