package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// lenientStore is a backend as lenient as real stores: it applies every
// PUT and DELETE it reads, and a body that ended early with an orderly
// close (a FIN: io.ErrUnexpectedEOF) is stored as far as it got, as
// versitygw stores it; a reset fails the read, and nothing is stored.
type lenientStore struct {
	mu      sync.Mutex
	objects map[string]string // path -> "<token>:<body>"
	active  int               // requests being read or applied
	idle    chan struct{}     // closed when active drops to 0; nil without waiters
}

func (b *lenientStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.active++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		if b.active--; b.active == 0 && b.idle != nil {
			close(b.idle)
			b.idle = nil
		}
		b.mu.Unlock()
	}()
	body, err := io.ReadAll(r.Body)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return // a reset: the store's read fails
	}
	tok := r.Header.Get("X-Fencing-Token")
	b.mu.Lock()
	switch r.Method {
	case http.MethodPut:
		b.objects[r.URL.Path] = tok + ":" + string(body)
	case http.MethodDelete:
		delete(b.objects, r.URL.Path)
	}
	b.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// settled waits until no request is being read or applied.
func (b *lenientStore) settled(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	if b.active == 0 {
		b.mu.Unlock()
		return
	}
	if b.idle == nil {
		b.idle = make(chan struct{})
	}
	idle := b.idle
	b.mu.Unlock()
	select {
	case <-idle:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend was still reading a request 10s later")
	}
}

func (b *lenientStore) object(path string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.objects[path]
	return o, ok
}

// send is a fenced request through the proxy with extra headers ("Name:
// value"); it returns the status and the Fencing-Current-Token and the
// problem's resource of a refusal.
func send(t *testing.T, in *servertest.Instance, method, path, token, body string, headers ...string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(method, in.ProxyURL()+path, strings.NewReader(body))
	req.Header.Set("X-Fencing-Token", token)
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ": ")
		req.Header.Set(name, value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	resource := ""
	if i := strings.Index(string(answer), `"resource":"`); i >= 0 {
		resource, _, _ = strings.Cut(string(answer)[i+len(`"resource":"`):], `"`)
	}
	return resp.StatusCode, resp.Header.Get("Fencing-Current-Token"), resource
}

// The reproduction with the lease on the prefix out/part-7/: after
// B's acquire every write of A below the prefix is refused (409 naming the
// prefix fence), new keys and deletes included, and B's pass. Before prefix
// fences, A's writes to f2 and f3 were applied.
func TestPrefixLeaseReproduction(t *testing.T) {
	backend := &lenientStore{objects: map[string]string{}}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_LEASE_MIN_TTL": "100ms", "FENCEPROXY_LEASE_GRACE": "100ms",
	})
	lease := in.ControlURL() + "/v1/leases/out/part-7/"
	status, out := servertest.Call(t, http.MethodPost, lease, `{"holder":"A","ttl":"200ms"}`, "")
	if status != http.StatusCreated {
		t.Fatalf("A's acquire of out/part-7/: %d %v", status, out)
	}
	a := out["token"].(string)
	if s, _, _ := send(t, in, http.MethodPut, "/out/part-7/f1", a, "A1"); s != http.StatusOK {
		t.Fatalf("A's write of f1: %d", s)
	}
	// A stalls; its lease and grace run out on the server's clock, which
	// signals no event: retry.
	var b string
	servertest.Eventually(t, 10*time.Second, "B acquires out/part-7/", func() bool {
		status, out := servertest.Call(t, http.MethodPost, lease, `{"holder":"B","ttl":"10s"}`, "")
		if status == http.StatusCreated {
			b = out["token"].(string)
		}
		return status == http.StatusCreated
	})
	if s, _, _ := send(t, in, http.MethodPut, "/out/part-7/f1", b, "B1"); s != http.StatusOK {
		t.Fatalf("B's write of f1: %d", s)
	}
	if fenceUnprotected("prefix-admission") {
		// Teeth: without the prefix check, A's writes to new keys land.
		s, _, _ := send(t, in, http.MethodPut, "/out/part-7/f2", a, "A-stale")
		if got, _ := backend.object("/out/part-7/f2"); s != http.StatusOK || got != a+":A-stale" {
			t.Fatalf("teeth: with the prefix check off, A's write of a new key got %d and the backend holds %q; want it applied", s, got)
		}
		t.Logf("teeth: with the prefix check off, A's stale write of the new key out/part-7/f2 was applied (%d)", s)
		return
	}
	for _, w := range []struct{ method, path, fence string }{
		{http.MethodPut, "/out/part-7/f1", "out/part-7/f1"}, // B wrote it: its own maximum refuses first
		{http.MethodPut, "/out/part-7/f2", "out/part-7/"},   // a new key
		{http.MethodDelete, "/out/part-7/f3", "out/part-7/"},
		{http.MethodPut, "/out/part-7/deeper/f4", "out/part-7/"},
		{http.MethodPut, "/out/part-7/", "out/part-7/"}, // the prefix's own name
	} {
		s, current, resource := send(t, in, w.method, w.path, a, "A-stale")
		if s != http.StatusConflict || current != b || resource != w.fence {
			t.Errorf("A's %s %s after B's acquire: %d, current %q, resource %q; want 409 naming %s at %s", w.method, w.path, s, current, resource, w.fence, b)
		}
	}
	if s, _, _ := send(t, in, http.MethodPut, "/out/part-7/f2", b, "B2"); s != http.StatusOK {
		t.Fatalf("B's write of f2: %d", s)
	}
	// Beside the prefix: not fenced by it.
	if s, _, _ := send(t, in, http.MethodPut, "/out/part-70/f1", a, "A"); s != http.StatusOK {
		t.Errorf("A's write beside the prefix (out/part-70/f1): %d, want 200", s)
	}
	for path, want := range map[string]string{"/out/part-7/f1": b + ":B1", "/out/part-7/f2": b + ":B2"} {
		if got, _ := backend.object(path); got != want {
			t.Errorf("the backend holds %q at %s, want %q", got, path, want)
		}
	}
	for _, path := range []string{"/out/part-7/deeper/f4", "/out/part-7/"} {
		if got, ok := backend.object(path); ok {
			t.Errorf("the backend holds %q at %s: a stale write was applied", got, path)
		}
	}
	// The prefix fence shows in the admin view like any fence.
	status, out = servertest.Call(t, http.MethodGet, in.ControlURL()+"/v1/fences/out/part-7/", "", "")
	if status != http.StatusOK || out["token"] != b {
		t.Errorf("GET /v1/fences/out/part-7/: %d %v, want token %s", status, out, b)
	}
}

// An upload of A to a new key below out/part-7/, still sending when B's
// acquire of the prefix returns, is cut and never applied: a body the fast
// path reads ahead, a streamed one and a chunked one, into a store that
// keeps what arrives before an orderly close.
func TestPrefixLeaseCutsUploads(t *testing.T) {
	for _, body := range []struct {
		name    string
		header  string // framing header
		first   string // what A sends before it stalls
		chunked bool
	}{
		{"fast-path", "Content-Length: 40960", strings.Repeat("A", 8<<10), false},
		{"streamed", "Content-Length: 327680", strings.Repeat("A", 160<<10), false},
		{"chunked", "Transfer-Encoding: chunked", fmt.Sprintf("%x\r\n%s\r\n", 100<<10, strings.Repeat("A", 100<<10)), true},
	} {
		t.Run(body.name, func(t *testing.T) {
			backend := &lenientStore{objects: map[string]string{}}
			srv := httptest.NewServer(backend)
			t.Cleanup(srv.Close)
			in := servertest.Start(t, map[string]string{
				"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
				"FENCEPROXY_LEASE_MIN_TTL": "100ms", "FENCEPROXY_LEASE_GRACE": "100ms",
			})
			lease := in.ControlURL() + "/v1/leases/out/part-7/"
			status, out := servertest.Call(t, http.MethodPost, lease, `{"holder":"A","ttl":"100ms"}`, "")
			if status != http.StatusCreated {
				t.Fatalf("A's acquire: %d %v", status, out)
			}
			a := out["token"].(string)
			conn, err := net.Dial("tcp", in.Proxy)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "PUT /out/part-7/new-%s HTTP/1.1\r\nHost: store.example\r\nX-Fencing-Token: %s\r\n%s\r\n\r\n%s",
				body.name, a, body.header, body.first)
			// The admission shows only in the in-flight gauge.
			servertest.Eventually(t, 10*time.Second, "A's upload is admitted", func() bool {
				return scrape(t, in, "fenceproxy_inflight_requests") == 1
			})
			var b string
			servertest.Eventually(t, 10*time.Second, "B acquires out/part-7/", func() bool {
				status, out := servertest.Call(t, http.MethodPost, lease, `{"holder":"B","ttl":"10s"}`, "")
				if status == http.StatusCreated {
					b = out["token"].(string)
				}
				return status == http.StatusCreated
			})
			// B's acquire returned: A's upload is answered, and A may finish
			// sending (or hang up): nothing of it may be applied.
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("A got no answer after B's acquire: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusConflict || resp.Header.Get("Fencing-Current-Token") != b {
				t.Errorf("A's upload below the prefix: %d, current %q; want 409 at %s", resp.StatusCode, resp.Header.Get("Fencing-Current-Token"), b)
			}
			conn.Close()
			backend.settled(t)
			if got, ok := backend.object("/out/part-7/new-" + body.name); ok {
				t.Errorf("the backend applied %d bytes of A's cut upload below the prefix", len(got))
			}
			if s, _, _ := send(t, in, http.MethodPut, "/out/part-7/new-"+body.name, b, "B"); s != http.StatusOK {
				t.Errorf("B's write of the key: %d", s)
			}
		})
	}
}

// A prefix fence raised by an operator survives a restart on Badger: the
// new process loads it and refuses below it before anything touches the
// key; the admin API shows, lists and resets it.
func TestPrefixFenceAdminAndRestart(t *testing.T) {
	backend := &lenientStore{objects: map[string]string{}}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	env := map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_ADMIN_TOKEN": "adm"}
	in := servertest.Start(t, env)
	status, out := servertest.Call(t, http.MethodPut, in.ControlURL()+"/v1/fences/reports/daily/", `{"token":"7"}`, "adm")
	if status != http.StatusOK || out["token"] != "7" {
		t.Fatalf("admin raise of reports/daily/: %d %v", status, out)
	}
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}
	in = servertest.Start(t, env)
	if s, current, resource := send(t, in, http.MethodPut, "/reports/daily/2026-12-04.csv", "6", "stale"); s != http.StatusConflict || current != "7" || resource != "reports/daily/" {
		t.Fatalf("token 6 below reports/daily/ after a restart: %d, current %q, resource %q; want 409 naming the prefix at 7", s, current, resource)
	}
	if s, _, _ := send(t, in, http.MethodPut, "/reports/daily/2026-12-04.csv", "7", "ok"); s != http.StatusOK {
		t.Fatalf("token 7 below reports/daily/: %d", s)
	}
	status, out = servertest.Call(t, http.MethodGet, in.ControlURL()+"/v1/fences?prefix=reports/", "", "adm")
	if status != http.StatusOK || !strings.Contains(fmt.Sprint(out["fences"]), "reports/daily/") {
		t.Fatalf("GET /v1/fences?prefix=reports/: %d %v, want reports/daily/ listed", status, out)
	}
	status, out = servertest.Call(t, http.MethodDelete, in.ControlURL()+"/v1/fences/reports/daily/?confirm=reports/daily/", "", "adm")
	if status != http.StatusOK {
		t.Fatalf("admin reset of reports/daily/: %d %v", status, out)
	}
	if s, _, _ := send(t, in, http.MethodPut, "/reports/daily/other.csv", "1", "after reset"); s != http.StatusOK {
		t.Fatalf("token 1 below reports/daily/ after its reset: %d, want 200", s)
	}
}

// sendPrefix is send with X-Fencing-Prefix values (none: absent) and an
// optional signature.
func sendPrefix(t *testing.T, in *servertest.Instance, path, token string, prefixes []string, sig string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, in.ProxyURL()+path, strings.NewReader("from "+token))
	req.Header.Set("X-Fencing-Token", token)
	if prefixes != nil {
		req.Header["X-Fencing-Prefix"] = prefixes
	}
	if sig != "" {
		req.Header.Set("X-Fencing-Token-Signature", sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Fencing-Current-Token"), string(answer)
}

// Tokens from an outside coordinator for a partition: X-Fencing-Prefix
// raises the prefix fence with the write, so a stale holder's writes to new
// keys below it are refused from the new holder's first write on; a bad
// header changes nothing.
func TestPrefixHeaderFromCoordinator(t *testing.T) {
	backend := &lenientStore{objects: map[string]string{}}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir()})
	p := []string{"out/part-7/"}
	if s, _, a := sendPrefix(t, in, "/out/part-7/f1", "5", p, ""); s != http.StatusOK {
		t.Fatalf("A (token 5) with the prefix header: %d %s", s, a)
	}
	if s, _, a := sendPrefix(t, in, "/out/part-7/f2", "6", p, ""); s != http.StatusOK {
		t.Fatalf("B (token 6) with the prefix header: %d %s", s, a)
	}
	for _, prefixes := range [][]string{p, nil} {
		if s, current, a := sendPrefix(t, in, "/out/part-7/f3", "5", prefixes, ""); s != http.StatusConflict || current != "6" {
			t.Errorf("A's write of a new key after B's (header %v): %d, current %q %s; want 409 at 6", prefixes, s, current, a)
		}
	}
	if _, ok := backend.object("/out/part-7/f3"); ok {
		t.Error("A's stale write of a new key was applied")
	}
	// Bad headers: 400 bad_resource, nothing forwarded, no maximum changed.
	for _, bad := range []struct {
		path     string
		prefixes []string
	}{
		{"/out/part-7/g1", []string{"out/part-7"}},                 // no trailing "/"
		{"/out/part-8/g1", []string{"out/part-7/"}},                // not below it
		{"/out/part-7/g1", []string{"out/part-7/", "out/part-7/"}}, // given twice
		{"/out/part-7/", []string{"out/part-7/"}},                  // the prefix itself is not below it
		{"/out/part-7/g1", []string{"out/../part-7/"}},             // dot segment
	} {
		s, _, a := sendPrefix(t, in, bad.path, "9", bad.prefixes, "")
		if s != http.StatusBadRequest || !strings.Contains(a, "bad_resource") {
			t.Errorf("PUT %s with %s %q: %d %s, want 400 bad_resource", bad.path, "X-Fencing-Prefix", bad.prefixes, s, a)
		}
		if _, ok := backend.object(bad.path); ok {
			t.Errorf("PUT %s with a bad prefix header was forwarded", bad.path)
		}
	}
	status, out := servertest.Call(t, http.MethodGet, in.ControlURL()+"/v1/fences/out/part-7/", "", "")
	if status != http.StatusOK || out["token"] != "6" {
		t.Errorf("the prefix fence after the bad headers: %d %v, want 6", status, out)
	}
}

// A write with X-Fencing-Prefix whose token is above the prefix fence cuts
// a smaller-token upload still sending to another key below it.
func TestPrefixHeaderCutsUpload(t *testing.T) {
	backend := &lenientStore{objects: map[string]string{}}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir()})
	conn, err := net.Dial("tcp", in.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /jobs/7/a HTTP/1.1\r\nHost: store.example\r\nX-Fencing-Token: 5\r\nX-Fencing-Prefix: jobs/7/\r\nContent-Length: 327680\r\n\r\n%s",
		strings.Repeat("A", 160<<10))
	servertest.Eventually(t, 10*time.Second, "A's upload is admitted", func() bool {
		return scrape(t, in, "fenceproxy_inflight_requests") == 1
	})
	if s, _, a := sendPrefix(t, in, "/jobs/7/b", "6", []string{"jobs/7/"}, ""); s != http.StatusOK {
		t.Fatalf("B's write with token 6: %d %s", s, a)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("A got no answer after B's write: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Fencing-Current-Token") != "6" {
		t.Errorf("A's upload: %d, current %q; want 409 at 6", resp.StatusCode, resp.Header.Get("Fencing-Current-Token"))
	}
	conn.Close()
	backend.settled(t)
	if got, ok := backend.object("/jobs/7/a"); ok {
		t.Errorf("A's cut upload was applied (%d bytes)", len(got))
	}
}

// Signed-token mode: the signature a lease on a prefix gets signs every key
// below it; a signature for one key does not let X-Fencing-Prefix raise the
// prefix.
func TestPrefixSignedTokens(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	keyText, _ := sgKey(t)
	in := sgStart(t, backend, t.TempDir(), map[string]string{"FENCEPROXY_TOKEN_KEY": keyText})
	l := sgAcquire(t, in, "out/part-7/", "A")
	if a := sgPut(t, in, "/out/part-7/f1", one(l.token), one(l.sig), "below"); a.status != http.StatusOK {
		t.Fatalf("a write below the prefix with its lease's signature: %+v", a)
	}
	if a := sgPut(t, in, "/out/part-70/f1", one(l.token), one(l.sig), "beside"); a.status != http.StatusForbidden {
		t.Fatalf("a write beside the prefix with its signature: %+v, want 403", a)
	}
	k := sgAcquire(t, in, "solo/key", "A")
	if s, _, a := sendPrefix(t, in, "/solo/key", k.token, []string{"solo/"}, k.sig); s != http.StatusForbidden {
		t.Fatalf("a key's signature raising the prefix solo/: %d %s, want 403", s, a)
	}
	if s, _, a := sendPrefix(t, in, "/out/part-7/f2", l.token, []string{"out/part-7/"}, l.sig); s != http.StatusOK {
		t.Fatalf("the prefix's signature with the header: %d %s", s, a)
	}
}

// The Go client's WithPrefix sends X-Fencing-Prefix with the token.
func TestPrefixClientTransport(t *testing.T) {
	backend := &lenientStore{objects: map[string]string{}}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir()})
	hc := &http.Client{Transport: &client.Transport{}}
	ctx := client.WithPrefix(client.WithToken(context.Background(), 6), "out/part-7/")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, in.ProxyURL()+"/out/part-7/x", strings.NewReader("x"))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT through client.Transport with WithPrefix: %d", resp.StatusCode)
	}
	if status, out := servertest.Call(t, http.MethodGet, in.ControlURL()+"/v1/fences/out/part-7/", "", ""); status != http.StatusOK || out["token"] != "6" {
		t.Fatalf("the prefix fence after the write: %d %v, want 6", status, out)
	}
}

// Overlapping leases: the newest acquire's token passes every fence that
// covers a key its lease covers, so at most one holder can write each key:
// a key lease below a held prefix lease, a prefix lease over a key written
// with a larger token, and a lease above both.
func TestPrefixLeasesOverlap(t *testing.T) {
	backend := &lenientStore{objects: map[string]string{}}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir()})
	acquire := func(name, holder string) string {
		t.Helper()
		status, out := servertest.Call(t, http.MethodPost, in.ControlURL()+"/v1/leases/"+name, `{"holder":"`+holder+`","ttl":"1h"}`, "")
		if status != http.StatusCreated {
			t.Fatalf("acquire %s by %s: %d %v", name, holder, status, out)
		}
		return out["token"].(string)
	}
	a := acquire("n/p/", "A")  // A holds a partition
	c := acquire("n/p/q", "C") // C takes one key of it
	b := acquire("n/", "B")    // B takes the whole tree
	// A key written with a large token, then a prefix lease over it.
	if s, _, _ := send(t, in, http.MethodPut, "/m/p/k", "9", "nine"); s != http.StatusOK {
		t.Fatalf("token 9 on m/p/k: %d", s)
	}
	d := acquire("m/p/", "D")
	stale := map[string]bool{}
	for _, w := range []struct{ who, token, path string }{{"A", a, "/n/p/q"}, {"C", c, "/n/p/q"}, {"A", a, "/n/p/other"}, {"key 9", "9", "/m/p/k"}} {
		if s, _, _ := send(t, in, http.MethodPut, w.path, w.token, w.who); s == http.StatusOK {
			stale[w.who+" "+w.path] = true
		}
	}
	if fenceUnprotected("prefix-floor") {
		// Teeth: every lease started at token 1, and the older holders still write.
		if len(stale) == 0 {
			t.Fatalf("teeth: with the floor off, tokens %s %s %s %s and no older holder's write went through", a, c, b, d)
		}
		t.Logf("teeth: with the floor off (tokens A %s, C %s, B %s, D %s), these stale writes went through: %v", a, c, b, d, stale)
		return
	}
	if len(stale) > 0 {
		t.Fatalf("older holders' writes went through after an overlapping acquire (tokens A %s, C %s, B %s, D %s): %v", a, c, b, d, stale)
	}
	for _, w := range []struct{ token, path string }{{b, "/n/p/q"}, {b, "/n/p/other"}, {d, "/m/p/k"}} {
		if s, _, a := send(t, in, http.MethodPut, w.path, w.token, "newest"); s != http.StatusOK {
			t.Errorf("the newest holder's write of %s with %s: %d %s", w.path, w.token, s, a)
		}
	}
}

// A write refused as stale raises nothing: not the prefix its
// X-Fencing-Prefix names, so a stale holder cannot fence a partition off.
func TestPrefixHeaderStaleRaisesNothing(t *testing.T) {
	backend := &lenientStore{objects: map[string]string{}}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir()})
	if s, _, a := sendPrefix(t, in, "/out/p7/x", "5", []string{"out/p7/"}, ""); s != http.StatusOK {
		t.Fatalf("token 5 raising out/p7/: %d %s", s, a)
	}
	if s, _, _ := sendPrefix(t, in, "/out/p7/y", "4", []string{"out/"}, ""); s != http.StatusConflict {
		t.Fatalf("token 4 below out/p7/ (5) naming out/: %d, want 409", s)
	}
	if status, out := servertest.Call(t, http.MethodGet, in.ControlURL()+"/v1/fences/out/", "", ""); status != http.StatusNotFound && out["token"] != "0" {
		t.Fatalf("out/ after a stale write named it: %d %v, want no maximum", status, out)
	}
	if s, _, a := sendPrefix(t, in, "/out/p8/z", "2", nil, ""); s != http.StatusOK {
		t.Fatalf("another partition's write with token 2: %d %s", s, a)
	}
}
