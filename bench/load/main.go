// Command load drives the benchmark workloads that wrk cannot: a streamed
// upload, and writing and re-reading many distinct resources across a restart.
// Each subcommand prints one "BENCH k=v ..." line for bench/run to parse.
//
//	load upload -url URL -bytes N -token T
//	    One PUT of N bytes (zeros, generated while sending, never held whole)
//	    with Content-Length N. Prints bytes, seconds, mib_s and status.
//	load fill -url URL -n N -c C -token T [-stride S]
//	    PUTs 1 KiB with token T to URL/bkt/obj-0, obj-S, obj-2S, ... (N
//	    requests) from C concurrent keep-alive connections. Prints requests,
//	    non2xx, errors, seconds and req/s (2xx only).
//	load upload -url URL -bytes N -token T -key K -secret S [-region R]
//	    As above, sent as a signed stream (STREAMING-AWS4-HMAC-SHA256-PAYLOAD,
//	    64 KiB chunks) with the SigV4 key K: the S3 gateway mode's upload.
//	load sign -host H -n N -token T -key K -secret S [-region R] -out FILE
//	    Writes N SigV4-signed raw PUTs of 1 KiB (/bkt/obj-0 ...) for wrk
//	    (bench/wrk/put-signed.lua).
//	load first -url URL -method M -path P -token T -since UNIXNANO [-timeout D]
//	    Repeats one request (a PUT sends 1 KiB with token T, a GET nothing)
//	    every 2 ms until it is answered 2xx; prints first_ms, the time from
//	    UNIXNANO (the proxy's start) to that answer.
//	load etcdput -endpoints URLS -c C -d D -n N -prefix P
//	    Plain etcd Puts of 8-byte values to N keys under P, round-robin,
//	    from C goroutines sharing one client (as the goroutines of one
//	    fenceproxy share its client), for D: etcd's own write rate, the
//	    baseline of fenceproxy's raises in cluster mode. Prints the fields of
//	    bench/wrk/put.lua's line (requests: Puts that succeeded; errors:
//	    Puts that failed).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: load upload|fill|first|sign|prefixes|etcdput [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	url := fs.String("url", "http://127.0.0.1:18081", "proxy base URL")
	token := fs.String("token", "1", "X-Fencing-Token of every request")
	var err error
	switch os.Args[1] {
	case "upload":
		n := fs.Int64("bytes", 1<<30, "upload size in bytes")
		key := fs.String("key", "", "SigV4 access key id: send a signed stream")
		secret := fs.String("secret", "", "SigV4 secret access key")
		region := fs.String("region", "us-east-1", "SigV4 region")
		_ = fs.Parse(os.Args[2:])
		if *key != "" {
			err = signedUpload(*url+"/bkt/upload", *token, *key, *secret, *region, *n)
		} else {
			err = upload(*url+"/bkt/upload", *token, *n)
		}
	case "sign":
		host := fs.String("host", "127.0.0.1:18081", "Host of the requests")
		n := fs.Int("n", 1000, "requests (distinct resources)")
		key := fs.String("key", "", "SigV4 access key id")
		secret := fs.String("secret", "", "SigV4 secret access key")
		region := fs.String("region", "us-east-1", "SigV4 region")
		out := fs.String("out", "signed.txt", "output file")
		_ = fs.Parse(os.Args[2:])
		err = signPuts(*out, *host, *token, *key, *secret, *region, *n)
	case "fill":
		n := fs.Int("n", 1_000_000, "requests (distinct resources)")
		c := fs.Int("c", 64, "concurrent connections")
		stride := fs.Int("stride", 1, "resource number step between requests")
		_ = fs.Parse(os.Args[2:])
		err = fill(*url, *token, *n, *c, *stride)
	case "first":
		method := fs.String("method", http.MethodPut, "PUT or GET")
		path := fs.String("path", "/bkt/obj-0", "request path")
		since := fs.Int64("since", 0, "start time of the proxy, Unix nanoseconds")
		timeout := fs.Duration("timeout", time.Minute, "give up after this long")
		_ = fs.Parse(os.Args[2:])
		err = first(*method, *url+*path, *token, time.Unix(0, *since), *timeout)
	case "prefixes":
		dir := fs.String("dir", "prefixes", "Badger data directory to create")
		n := fs.Int("n", 10000, "prefix fences bkt/p0/ .. bkt/p<n-1>/")
		_ = fs.Parse(os.Args[2:])
		err = seedPrefixes(*dir, *n, *token)
	case "etcdput":
		endpoints := fs.String("endpoints", "http://127.0.0.1:2379", "etcd client URLs, comma-separated")
		c := fs.Int("c", 64, "concurrent Puts")
		d := fs.Duration("d", 10*time.Second, "how long to put")
		n := fs.Int("n", 1000, "distinct keys")
		prefix := fs.String("prefix", "/bench/etcdput/", "prefix of the keys")
		_ = fs.Parse(os.Args[2:])
		err = etcdPut(strings.Split(*endpoints, ","), *prefix, *c, *n, *d)
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func upload(url, token string, n int64) error {
	req, err := http.NewRequest(http.MethodPut, url, io.LimitReader(zeros{}, n))
	if err != nil {
		return err
	}
	req.ContentLength = n
	req.Header.Set("X-Fencing-Token", token)
	return send(req, n)
}

// send sends an upload of n payload bytes and prints its figures.
func send(req *http.Request, n int64) error {
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	secs := time.Since(start).Seconds()
	fmt.Printf("BENCH bytes=%d seconds=%.3f mib_s=%.1f status=%d\n", n, secs, float64(n)/(1<<20)/secs, resp.StatusCode)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("upload answered %s", resp.Status)
	}
	return nil
}

var body = bytes.Repeat([]byte("x"), 1024)

func put(c *http.Client, url, token string) (int, error) {
	return do(c, http.MethodPut, url, token)
}

// do sends one request, a PUT with a 1 KiB body and token, or a GET.
func do(c *http.Client, method, url, token string) (int, error) {
	var b io.Reader
	if method == http.MethodPut {
		b = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, b)
	if err != nil {
		return 0, err
	}
	if b != nil {
		req.Header.Set("X-Fencing-Token", token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func fill(base, token string, n, conns, stride int) error {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = conns
	tr.MaxIdleConns = conns
	c := &http.Client{Transport: tr}
	var next, ok, non2xx, failed atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				status, err := put(c, base+"/bkt/obj-"+strconv.FormatInt(i*int64(stride), 10), token)
				switch {
				case err != nil:
					failed.Add(1)
					once.Do(func() { firstErr = err })
				case status/100 == 2:
					ok.Add(1)
				default:
					non2xx.Add(1)
				}
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	fmt.Printf("BENCH requests=%d non2xx=%d errors=%d seconds=%.3f rps=%.1f\n", n, non2xx.Load(), failed.Load(), secs, float64(ok.Load())/secs)
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, "load: first error:", firstErr)
	}
	return nil
}

func first(method, url, token string, since time.Time, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := &http.Client{Timeout: timeout}
	for {
		status, err := do(c, method, url, token)
		if err == nil && status/100 == 2 {
			fmt.Printf("BENCH first_ms=%.1f\n", float64(time.Since(since).Microseconds())/1000)
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("no 2xx answer within %s (last status %d)", timeout, status), err)
		case <-time.After(2 * time.Millisecond):
		}
	}
}
