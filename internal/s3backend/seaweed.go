package s3backend

// SeaweedFS as a second real S3 store: `weed mini` (master, volume server,
// filer, S3 gateway and SeaweedFS's admin server in one process) on loopback
// ports over a temporary directory, with S3 authentication off, and a reader
// of its filer's entries to see what a request changed in the store.
//
// The binary comes from PATH. Its go.mod has a replace directive, so
// `go install ...@version` refuses it; .ci/run builds it in a scratch module
// (unoptimized, to halve the compile time; an optimized build serves as well):
//
//	go mod init x
//	go mod edit -replace github.com/tyler-smith/go-bip39=github.com/cosmos/go-bip39@v1.0.0
//	go get github.com/seaweedfs/seaweedfs/weed@v0.0.0-20261109003541-7506e5f91cd6
//	go build -trimpath -gcflags='all=-N -l' -ldflags='-s -w' -o "$(go env GOPATH)/bin/weed" github.com/seaweedfs/seaweedfs/weed
//
// As for versitygw, a missing binary skips the test unless CI is set.

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// SeaweedBinary is the command looked up on PATH; SeaweedModule and
// SeaweedVersion are the main module its build info must name (SeaweedFS
// 4.53, whose `weed version` prints "30GB 4.53").
const (
	SeaweedBinary  = "weed"
	SeaweedModule  = "github.com/seaweedfs/seaweedfs"
	SeaweedVersion = "v0.0.0-20261109003541-7506e5f91cd6"
)

// BucketsDir is the filer directory that holds one directory per S3 bucket.
const BucketsDir = "/buckets"

const (
	// maxHashedContent is the largest file whose content Entries reads to hash
	// it when the filer has no Md5 for it.
	maxHashedContent = 1 << 20
	// defaultPageSize is the limit of one filer listing request (the filer's
	// own default, -filer.dirListLimit).
	defaultPageSize = 1000
)

// Seaweed is a running `weed mini`: SeaweedFS's master, volume server, filer
// and S3 gateway in one process.
type Seaweed struct {
	URL       string // S3 endpoint, http://127.0.0.1:port
	FilerURL  string // the filer's HTTP API, http://127.0.0.1:port
	AccessKey string // what Options signs with: random, as auth is off any key is accepted
	SecretKey string
	Dir       string // -dir: master metadata, volumes, filer store (leveldb2)

	pageSize  int // entries per filer listing request
	transport *http.Transport
	cmd       *exec.Cmd
	out       *syncBuffer
	exited    chan struct{} // closed when the process has exited
	waitErr   error         // its Wait error, set before exited is closed
}

// StartSeaweed runs `weed mini` on free loopback ports over a new t.TempDir
// with S3 authentication off: any request, unsigned or signed with any key,
// is allowed everything. It returns once the S3 gateway has created, written
// to and deleted a probe bucket (at most 20s; typically about 5s). It skips
// the test when weed is not on PATH (fails when CI is set), and fails it when
// weed is another build or does not start. Its output is logged when the test
// fails. Cleanup stops it (SIGTERM, then SIGKILL after 10s).
//
// Against stock `weed mini`: volumes are at most 16 MiB and not preallocated
// (data takes what is written), telemetry, WebDAV, the admin UI and the
// Iceberg and Lance catalogs are off, and a directory that a delete leaves
// empty stays (SeaweedFS removes it after 2 minutes by default), so that
// Entries changes only because of requests. No configuration file is read:
// the process runs in Dir with HOME=Dir and without the AWS_*, S3_* and
// WEED_* environment variables that would turn authentication on or change
// its setup.
func StartSeaweed(t testing.TB) *Seaweed {
	t.Helper()
	bin := lookSeaweed(t)
	s := &Seaweed{
		AccessKey: "SW" + randomHex(t, 8),
		SecretKey: randomHex(t, 20),
		pageSize:  defaultPageSize,
		transport: &http.Transport{Proxy: nil, DisableCompression: true},
		out:       &syncBuffer{},
	}
	t.Cleanup(s.transport.CloseIdleConnections)
	// Ports are found free and then released before weed binds them: another
	// process may take one meanwhile, so try a few times, each in a fresh
	// directory (mini saves options into it).
	var err error
	for range 3 {
		s.Dir = t.TempDir()
		if err = s.run(t, bin); err == nil {
			return s
		}
	}
	t.Fatalf("weed mini did not start: %v\noutput:\n%s", err, s.out)
	return nil
}

// run starts the process on fresh ports and waits until it is ready; on an
// error the process has been stopped.
func (s *Seaweed) run(t testing.TB, bin string) error {
	ports, err := freePorts(10)
	if err != nil {
		return err
	}
	port := func(i int) string { return strconv.Itoa(ports[i]) }
	s.URL = "http://127.0.0.1:" + port(6)
	s.FilerURL = "http://127.0.0.1:" + port(4)
	args := []string{
		"-logtostderr", // also keeps glog from writing files into the system temp dir
		"mini",
		"-dir=" + s.Dir,
		"-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		// Every port explicit: mini moves a busy default port elsewhere
		// silently, and its gRPC ports default to port+10000, which may
		// be past 65535.
		"-master.port=" + port(0), "-master.port.grpc=" + port(1),
		"-volume.port=" + port(2), "-volume.port.grpc=" + port(3),
		"-filer.port=" + port(4), "-filer.port.grpc=" + port(5),
		"-s3.port=" + port(6), "-s3.port.grpc=" + port(7),
		"-admin.port=" + port(8), "-admin.port.grpc=" + port(9), "-admin.port.legacy=0",
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-webdav=false", "-admin.ui=false",
		"-master.telemetry=false",
		// Mini sizes volumes from the free disk space, up to 1 GiB each.
		"-master.volumeSizeLimitMB=16", "-master.volumePreallocate=false",
		"-volume.preStopSeconds=0",
	}
	s.out = &syncBuffer{}
	s.exited = make(chan struct{})
	s.cmd = exec.Command(bin, args...)
	s.cmd.Dir = s.Dir
	s.cmd.Env = append(seaweedEnv(os.Environ()),
		"HOME="+s.Dir,
		"WEED_FILER_OPTIONS_S3_EMPTY_FOLDER_CLEANUP_DELAY=87600h",
	)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		return err
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(); err != nil {
		s.stop(t)
		return err
	}
	t.Cleanup(func() {
		s.stop(t)
		if t.Failed() {
			t.Logf("weed mini output:\n%s", s.out)
		}
	})
	return nil
}

// seaweedEnv is env without the variables weed reads to configure itself:
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY make an admin identity (and so
// turn authentication on), S3_BUCKET and S3_TABLE_BUCKET make buckets at
// start, WEED_* override any configuration key, SENTRY_DSN reports errors.
func seaweedEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "HOME", name == "SENTRY_DSN",
			strings.HasPrefix(name, "AWS_"), strings.HasPrefix(name, "S3_"), strings.HasPrefix(name, "WEED_"):
			continue
		}
		out = append(out, kv)
	}
	return out
}

// waitReady polls until the S3 gateway answers as SeaweedFS, then until a
// probe bucket can be created, written to, and deleted: the first write
// otherwise waits for the filer's lock ring and the first volume. The probe
// object must show in this process's filer, which tells it from another
// weed that took a port.
func (s *Seaweed) waitReady() error {
	c := &http.Client{Transport: s.transport, Timeout: 5 * time.Second}
	probe := "/probe-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	// done is the status that also ends a step: its retry after a request
	// that timed out but went through.
	steps := []struct {
		method, url, body string
		done              int
	}{
		{http.MethodPut, s.URL + probe, "", http.StatusConflict},
		{http.MethodPut, s.URL + probe + "/probe", "probe", 0},
		{http.MethodGet, s.FilerURL + BucketsDir + probe + "/probe", "", 0},
		{http.MethodDelete, s.URL + probe + "/probe", "", http.StatusNotFound},
		{http.MethodDelete, s.URL + probe, "", http.StatusNotFound},
	}
	deadline := time.Now().Add(startTimeout)
	var last error
	for step := 0; step < len(steps); {
		select {
		case <-s.exited:
			return fmt.Errorf("weed exited before it was ready: %v", s.waitErr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("weed was not ready within %v: %v", startTimeout, last)
		}
		var body io.Reader
		if steps[step].body != "" {
			body = strings.NewReader(steps[step].body)
		}
		req, err := http.NewRequest(steps[step].method, steps[step].url, body)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			last = err
			time.Sleep(50 * time.Millisecond) // polls weed, another process: no event
			continue
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if server := resp.Header.Get("Server"); !strings.HasPrefix(server, "SeaweedFS ") {
			return fmt.Errorf("%s answered with Server %q, not SeaweedFS's", steps[step].url, server)
		}
		if resp.StatusCode/100 != 2 && resp.StatusCode != steps[step].done {
			last = fmt.Errorf("%s %s: %s %s", steps[step].method, steps[step].url, resp.Status, answer)
			time.Sleep(100 * time.Millisecond) // polls weed, another process: no event
			continue
		}
		step++
	}
	return nil
}

func (s *Seaweed) stop(t testing.TB) {
	if !stopProcess(s.cmd, s.exited) {
		// Not an error: the data is thrown away, and mini's graceful stop
		// waits on its admin's worker streams.
		t.Logf("weed did not stop within %v of SIGTERM; killed it", stopTimeout)
	}
}

// Options are the options of a path-style S3 client for endpoint (the S3
// gateway's URL, or a proxy's in front of it) that signs with AccessKey and
// SecretKey, computes no optional checksums and never retries (a refusal is
// seen exactly once). Its HTTP client ignores HTTP_PROXY.
func (s *Seaweed) Options(endpoint string) s3.Options {
	return clientOptions(endpoint, s.AccessKey, s.SecretKey, s.transport)
}

// Client is an S3 client straight to the gateway (Options with its URL).
func (s *Seaweed) Client(opts ...func(*s3.Options)) *s3.Client {
	return s3.New(s.Options(s.URL), opts...)
}

// CreateBucket creates bucket through the S3 gateway directly (not through a
// proxy), failing the test on an error.
func (s *Seaweed) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	createBucket(t, "weed", s.Client(), bucket)
}

// Entry is one filer entry below BucketsDir, as the filer's JSON listing
// gives it.
type Entry struct {
	// Path is the entry's full path below BucketsDir, without a leading or
	// trailing slash: "bkt", "bkt/dir", "bkt/dir/a.txt", "bkt/.uploads/ID".
	Path string
	// Dir is whether the entry is a directory (Mode has os.ModeDir). An S3
	// key ending in "/" is one, and so is a key that another key's path
	// goes through; such a directory may still hold content of its own.
	Dir bool
	// Size in bytes: the largest of FileSize, the end of the furthest chunk
	// and the length of the inline Content.
	Size int64
	// MD5 is the hex MD5 of the content: the filer's Md5 attribute; without
	// one, of the inline Content, or of the content read from the filer for
	// a file of at most 1 MiB. Empty otherwise (a directory without content,
	// a larger file without Md5, or a file gone before it was read).
	MD5 string
	// Mtime is the filer's modification time (to the second for S3 objects).
	Mtime time.Time
	// Mime is the stored Content-Type ("httpd/unix-directory" for a "dir/"
	// marker without one).
	Mime string
	// Extended are the extended attributes with their values decoded from
	// the JSON's base64 to the raw bytes: "X-Amz-Meta-Color" (user
	// metadata), "X-Amz-Tagging-k1" (one per tag), "Seaweed-X-Amz-Acl" (ACL
	// as JSON), "Seaweed-X-Amz-ETag", "Seaweed-X-Amz-Object-Lock-Mode",
	// "Seaweed-X-Amz-Retention-Until-Date", "Seaweed-X-Amz-Legal-Hold",
	// "x-seaweedfs-write-id" (new on every write), ... Nil when none.
	Extended map[string]string
	// Raw is the entry's whole JSON object with its keys sorted: equal Raw
	// means an unchanged entry. Nothing is left out: reads (GET, HEAD,
	// listing, tagging and ACL reads) change no field, not even Atime.
	Raw string
}

// filerEntry is the part of the filer's JSON for an entry (its filer.Entry:
// the Attr fields inline, []byte fields in base64) that Entry reads.
type filerEntry struct {
	FullPath string
	Mtime    time.Time
	Mode     os.FileMode
	Mime     string
	Md5      []byte
	FileSize uint64
	Extended map[string][]byte
	Content  []byte
	Chunks   []struct {
		Offset int64  `json:"offset"`
		Size   uint64 `json:"size"`
	} `json:"chunks"`
}

// filerListing is the filer's JSON answer to a directory listing.
type filerListing struct {
	Path                  string
	Entries               []json.RawMessage
	LastFileName          string
	ShouldDisplayLoadMore bool
}

// Entries is every entry the filer holds below BucketsDir, recursively,
// keyed by Entry.Path: the buckets, their directories and files, and
// SeaweedFS's own entries among them (".system/owners", a bucket's
// ".uploads/ID" multipart staging directories and their parts, ...). It
// fails the test on an error. See ReadEntries.
func (s *Seaweed) Entries(t testing.TB) map[string]Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	entries, err := s.ReadEntries(ctx)
	if err != nil {
		t.Fatalf("weed: reading the filer's entries: %v", err)
	}
	return entries
}

// ReadEntries reads what Entries returns from the filer's HTTP API (never
// through S3). Each directory, starting at BucketsDir, is listed with
//
//	GET {FilerURL}{dir path, escaped}/?limit=1000&lastFileName={name}
//	Accept: application/json
//
// whose answer is {"Path", "Entries": [entry JSON...], "LastFileName",
// "ShouldDisplayLoadMore", ...}; the listing is sorted by name and paged:
// while ShouldDisplayLoadMore is true the next page starts after
// LastFileName. A file whose MD5 needs its content is read with a plain GET
// of its path. The walk is not atomic: take it while no request is in
// flight. A directory or file gone before it was read keeps the entry from
// its parent's listing (without children, or without MD5). An error is a
// failed request or an answer other than 200 or 404, or JSON that does not
// decode.
func (s *Seaweed) ReadEntries(ctx context.Context) (map[string]Entry, error) {
	c := &http.Client{Transport: s.transport}
	entries := map[string]Entry{}
	dirs := []string{BucketsDir}
	for len(dirs) > 0 {
		dir := dirs[len(dirs)-1]
		dirs = dirs[:len(dirs)-1]
		after := ""
		for {
			page, err := s.list(ctx, c, dir, after)
			if err != nil {
				return nil, err
			}
			if page == nil {
				break // gone meanwhile
			}
			for _, raw := range page.Entries {
				e, err := s.entry(ctx, c, raw)
				if err != nil {
					return nil, fmt.Errorf("listing %s: %w", dir, err)
				}
				entries[e.Path] = e
				if e.Dir {
					dirs = append(dirs, BucketsDir+"/"+e.Path)
				}
			}
			if !page.ShouldDisplayLoadMore || len(page.Entries) == 0 {
				break
			}
			after = page.LastFileName
		}
	}
	return entries, nil
}

// list is one page of dir's listing, nil when dir does not exist.
func (s *Seaweed) list(ctx context.Context, c *http.Client, dir, after string) (*filerListing, error) {
	q := url.Values{"limit": {strconv.Itoa(s.pageSize)}}
	if after != "" {
		q.Set("lastFileName", after)
	}
	body, found, err := s.filerGet(ctx, c, dir+"/", q, "application/json")
	if err != nil || !found {
		return nil, err
	}
	var page filerListing
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	return &page, nil
}

// entry decodes one entry of a listing and completes its MD5.
func (s *Seaweed) entry(ctx context.Context, c *http.Client, raw json.RawMessage) (Entry, error) {
	var fe filerEntry
	if err := json.Unmarshal(raw, &fe); err != nil {
		return Entry{}, err
	}
	rel, ok := strings.CutPrefix(fe.FullPath, BucketsDir+"/")
	if !ok {
		return Entry{}, fmt.Errorf("entry %q is not below %s", fe.FullPath, BucketsDir)
	}
	// Re-encoding a map sorts its keys: the same entry gives the same Raw.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return Entry{}, err
	}
	canonical, err := json.Marshal(fields)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{
		Path:  rel,
		Dir:   fe.Mode&os.ModeDir != 0,
		Size:  int64(fe.FileSize),
		Mtime: fe.Mtime,
		Mime:  fe.Mime,
		Raw:   string(canonical),
	}
	for _, ch := range fe.Chunks {
		e.Size = max(e.Size, ch.Offset+int64(ch.Size))
	}
	e.Size = max(e.Size, int64(len(fe.Content)))
	if len(fe.Extended) > 0 {
		e.Extended = make(map[string]string, len(fe.Extended))
		for k, v := range fe.Extended {
			e.Extended[k] = string(v)
		}
	}
	switch {
	case len(fe.Md5) > 0:
		e.MD5 = hex.EncodeToString(fe.Md5)
	case fe.Content != nil:
		e.MD5 = md5Hex(fe.Content)
	case !e.Dir && e.Size <= maxHashedContent:
		content, found, err := s.filerGet(ctx, c, fe.FullPath, nil, "")
		if err != nil {
			return Entry{}, err
		}
		if found {
			e.MD5 = md5Hex(content)
		}
	}
	return e, nil
}

// Read returns the data of the filer entry at path (below BucketsDir, as
// Entry.Path), read from the filer itself (never through S3); nil when it is
// gone. It fails the test on another error.
func (s *Seaweed) Read(t testing.TB, path string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body, _, err := s.filerGet(ctx, &http.Client{Transport: s.transport}, BucketsDir+"/"+path, nil, "")
	if err != nil {
		t.Fatalf("weed: reading %s from the filer: %v", path, err)
	}
	return body
}

// filerGet GETs the filer path p (escaped here) with query q; found is false
// on a 404.
func (s *Seaweed) filerGet(ctx context.Context, c *http.Client, p string, q url.Values, accept string) (body []byte, found bool, err error) {
	u := s.FilerURL + (&url.URL{Path: p}).EscapedPath()
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, false, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("GET %s: %w", u, err)
	case resp.StatusCode == http.StatusNotFound:
		return nil, false, nil
	case resp.StatusCode != http.StatusOK:
		return nil, false, fmt.Errorf("GET %s: %s %s", u, resp.Status, bytes.TrimSpace(body))
	}
	return body, true, nil
}

func md5Hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

var (
	seaweedOnce sync.Once
	seaweedErr  error
)

// lookSeaweed finds weed and checks its build once per test binary.
func lookSeaweed(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath(SeaweedBinary)
	if err != nil {
		msg := fmt.Sprintf("%s is not on PATH (built from %s/weed@%s as .ci/run does): %v", SeaweedBinary, SeaweedModule, SeaweedVersion, err)
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set, so SeaweedFS is required: %s", msg)
		}
		t.Skip(msg)
	}
	seaweedOnce.Do(func() { seaweedErr = checkVersion(bin, SeaweedModule, SeaweedVersion) })
	if seaweedErr != nil {
		t.Fatalf("%v (build %s/weed@%s as .ci/run does)", seaweedErr, SeaweedModule, SeaweedVersion)
	}
	return bin
}

// freePorts returns n distinct loopback ports that were free a moment ago:
// all are held open together, so none is handed out twice.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
