// Command slowbody measures what one slow upload in flight costs a
// fenceproxy process (docs/PERFORMANCE.md, "Slow uploads"): it starts a
// backend that reads every body to its end, runs the fenceproxy binary
// against it, opens -n uploads over raw TCP that send their headers and one
// body byte and then hold, and reads the proxy's own metrics before and
// after (heap and stacks after a forced GC, RSS, goroutines, descriptors).
// It prints the deltas divided by the number of uploads the proxy held.
//
//	go build -o /tmp/fenceproxy ./cmd/fenceproxy
//	go run ./bench/slowbody -bin /tmp/fenceproxy -n 1000 -size 1048576
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

func main() {
	bin := flag.String("bin", "fenceproxy", "the fenceproxy binary")
	n := flag.Int("n", 1000, "slow uploads to hold open")
	size := flag.Int("size", 1<<20, "Content-Length of each upload (at most 64 KiB: the fast path; above: net/http's client)")
	settle := flag.Duration("settle", 3*time.Second, "wait after the last upload started")
	extra := flag.String("env", "", "extra FENCEPROXY_* settings, comma-separated NAME=value")
	profile := flag.String("profile", "", "write the proxy's heap profile, uploads held, to this file")
	flag.Parse()

	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer backend.Close()
	dir, err := os.MkdirTemp("", "slowbody-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	proxyAddr, controlAddr := freePort(), freePort()
	cmd := exec.Command(*bin, "serve")
	cmd.Env = append(os.Environ(), "FENCEPROXY_UPSTREAM="+backend.URL, "FENCEPROXY_DATA_DIR="+dir,
		"FENCEPROXY_LISTEN="+proxyAddr, "FENCEPROXY_CONTROL_LISTEN="+controlAddr, "FENCEPROXY_ADMIN_TOKEN=t",
		"FENCEPROXY_LOG_LEVEL=error", "FENCEPROXY_UPLOAD_IDLE_TIMEOUT=10m")
	if *extra != "" {
		cmd.Env = append(cmd.Env, strings.Split(*extra, ",")...)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	defer cmd.Process.Kill()
	for i := 0; ; i++ {
		if res, err := http.Get("http://" + controlAddr + "/healthz"); err == nil {
			res.Body.Close()
			break
		}
		if i > 100 {
			log.Fatal("fenceproxy did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}
	before := sample(controlAddr)
	conns := make([]net.Conn, 0, *n)
	for i := range *n {
		c, err := net.Dial("tcp", proxyAddr)
		if err != nil {
			log.Fatalf("upload %d: %v", i, err)
		}
		fmt.Fprintf(c, "PUT /slow/%d HTTP/1.1\r\nHost: x\r\nX-Fencing-Token: 1\r\nContent-Length: %d\r\n\r\nx", i, *size)
		conns = append(conns, c)
	}
	time.Sleep(*settle)
	after := sample(controlAddr)
	if *profile != "" {
		req, _ := http.NewRequest("GET", "http://"+controlAddr+"/debug/pprof/heap", nil)
		req.Header.Set("Authorization", "Bearer t")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if err := os.WriteFile(*profile, b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
	held := *n
	for _, c := range conns { // an upload the proxy already answered is not in flight
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == nil || !os.IsTimeout(err) {
			held--
		}
	}
	fmt.Printf("uploads %d (held %d), Content-Length %d\n", *n, held, *size)
	for _, k := range []string{"go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "process_resident_memory_bytes", "go_goroutines", "process_open_fds"} {
		d := after[k] - before[k]
		fmt.Printf("%-32s before %12.0f after %12.0f  per upload %10.1f\n", k, before[k], after[k], d/float64(max(held, 1)))
	}
	for _, c := range conns {
		c.Close()
	}
}

// sample forces a GC in the proxy (the heap profile with gc=1) and reads its metrics.
func sample(control string) map[string]float64 {
	req, _ := http.NewRequest("GET", "http://"+control+"/debug/pprof/heap?gc=1", nil)
	req.Header.Set("Authorization", "Bearer t")
	if res, err := http.DefaultClient.Do(req); err == nil {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	res, err := http.Get("http://" + control + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			if v, err := strconv.ParseFloat(f[1], 64); err == nil {
				m[f[0]] = v
			}
		}
	}
	return m
}

func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
