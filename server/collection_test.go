package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/webdav"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// davBackend is a real WebDAV server (golang.org/x/net/webdav over its
// in-memory file system), which applies DELETE, MOVE and COPY of a
// collection to everything below it. A request with X-Hold waits until
// release is called before it is served; held counts those waiting.
type davBackend struct {
	dav     *webdav.Handler
	mu      sync.Mutex
	hold    chan struct{}
	held    int
	applied []string // "METHOD path" of held requests, once served
}

func newDAVBackend(t *testing.T) (*davBackend, *httptest.Server) {
	b := &davBackend{dav: &webdav.Handler{FileSystem: webdav.NewMemFS(), LockSystem: webdav.NewMemLS()}, hold: make(chan struct{})}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	return b, srv
}

func (b *davBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Hold") == "" {
		b.dav.ServeHTTP(w, r)
		return
	}
	b.mu.Lock()
	b.held++
	hold := b.hold
	b.mu.Unlock()
	<-hold
	b.dav.ServeHTTP(w, r)
	b.mu.Lock()
	b.applied = append(b.applied, r.Method+" "+r.URL.Path)
	b.mu.Unlock()
}

func (b *davBackend) heldNow() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

func (b *davBackend) appliedNow() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.applied...)
}

func (b *davBackend) release() { close(b.hold) }

// davGet reads path from the WebDAV server directly: status and body.
func davGet(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// davTree makes /dir/sub/x, /dir/y and /other/z on the WebDAV server
// through the proxy with token 0 (which raises nothing), and raises the
// prefix fence dir/sub/ to 5 as an operator.
func davTree(t *testing.T, in *servertest.Instance) {
	t.Helper()
	for _, w := range []struct{ method, path, body string }{
		{"MKCOL", "/dir/", ""}, {"MKCOL", "/dir/sub/", ""}, {"MKCOL", "/other/", ""},
		{http.MethodPut, "/dir/sub/x", "x-old"}, {http.MethodPut, "/dir/y", "y-old"}, {http.MethodPut, "/other/z", "z"},
	} {
		if s, _, _ := send(t, in, w.method, w.path, "0", w.body); s >= 300 {
			t.Fatalf("setting up: %s %s: %d", w.method, w.path, s)
		}
	}
	if status, out := servertest.Call(t, http.MethodPut, in.ControlURL()+"/v1/fences/dir/sub/", `{"token":"5"}`, "adm"); status != http.StatusOK {
		t.Fatalf("admin raise of dir/sub/: %d %v", status, out)
	}
}

const proppatch = `<?xml version="1.0" encoding="utf-8"?><D:propertyupdate xmlns:D="DAV:"><D:set><D:prop>` +
	`<Z:owner xmlns:Z="urn:x-test">stale</Z:owner></D:prop></D:set></D:propertyupdate>`

// The attack review's finding: a WebDAV server applies DELETE, MOVE and
// COPY of a collection to everything below it, and a MOVE or COPY onto a
// collection replaces it. With the prefix fence dir/sub/ at 5, a stale
// holder's (token 3) collection writes above or onto it are refused (409
// naming dir/sub/ at 5) and the objects below it stay; writes beside it
// pass, and the holder of token 5 may delete the tree.
func TestPrefixCollectionWrites(t *testing.T) {
	_, srv := newDAVBackend(t)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_ADMIN_TOKEN": "adm"})
	davTree(t, in)
	teeth := fenceUnprotected("collection-admission")
	var applied []string
	for _, w := range []struct {
		method, path, body string
		headers            []string
	}{
		{http.MethodDelete, "/dir/", "", nil},
		{http.MethodDelete, "/dir", "", nil},
		{"MOVE", "/dir/", "", []string{"Destination: /moved/"}},
		{"MOVE", "/dir", "", []string{"Destination: /moved"}},
		{"COPY", "/other/", "", []string{"Destination: /dir/"}},                     // replaces dir/ whole
		{"MOVE", "/other/z", "", []string{"Destination: /dir/sub", "Overwrite: T"}}, // replaces the collection dir/sub with a file
		{"COPY", "/other/", "", []string{"Destination: http://" + in.Proxy + "/dir/sub/"}},
		{"PROPPATCH", "/dir/sub", proppatch, []string{"Content-Type: application/xml"}},
	} {
		s, current, resource := send(t, in, w.method, w.path, "3", w.body, w.headers...)
		if s == http.StatusConflict && current == "5" && resource == "dir/sub/" {
			continue
		}
		if !teeth {
			t.Errorf("stale %s %s %v: %d, current %q, resource %q; want 409 naming dir/sub/ at 5", w.method, w.path, w.headers, s, current, resource)
		}
		if s < 300 {
			applied = append(applied, fmt.Sprint(w.method, " ", w.path, w.headers, " ", s))
		}
		// Put the tree back on the server itself for the next write.
		for _, w := range []struct{ method, path, body string }{
			{http.MethodDelete, "/moved", ""}, {http.MethodDelete, "/dir/sub", ""},
			{"MKCOL", "/dir/", ""}, {"MKCOL", "/dir/sub/", ""}, {http.MethodPut, "/dir/sub/x", "x-old"}, {http.MethodPut, "/other/z", "z"},
		} {
			req, _ := http.NewRequest(w.method, srv.URL+w.path, strings.NewReader(w.body))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
	if teeth {
		// Teeth: without the check below a collection, they are applied.
		if len(applied) == 0 {
			t.Fatal("teeth: with the collection check off, no stale collection write was applied")
		}
		t.Logf("teeth: with the collection check off, %d stale collection writes over dir/sub/ (5) were applied with token 3: %v", len(applied), applied)
		return
	}
	if s, body := davGet(t, srv, "/dir/sub/x"); s != http.StatusOK || body != "x-old" {
		t.Errorf("after the stale writes the WebDAV server holds /dir/sub/x as %d %q, want 200 x-old", s, body)
	}
	if len(applied) > 0 {
		t.Errorf("stale collection writes applied over the fence dir/sub/: %v", applied)
	}
	// Beside the fence: not fenced by it.
	if s, _, _ := send(t, in, http.MethodDelete, "/other/", "3", ""); s >= 300 {
		t.Errorf("DELETE /other/ with token 3, beside dir/sub/: %d, want it applied", s)
	}
	// The holder of the fence's token deletes the tree.
	if s, _, _ := send(t, in, http.MethodDelete, "/dir", "5", ""); s >= 300 {
		t.Errorf("DELETE /dir with token 5: %d, want it applied", s)
	}
	if s, _ := davGet(t, srv, "/dir/sub/x"); s != http.StatusNotFound {
		t.Errorf("after DELETE /dir with token 5, /dir/sub/x answers %d, want 404", s)
	}
}

// A raise of a prefix fence waits for the collection writes above it that
// are in flight with smaller tokens: an operator's raise of dir/sub/ to 5
// returns only once a DELETE /dir with token 3, held at the WebDAV server,
// has been applied, so that nothing below 5 changes dir/sub/ after it.
func TestPrefixCollectionDrain(t *testing.T) {
	for _, path := range []string{"/dir", "/dir/"} {
		t.Run(strings.Trim(path, "/")+map[bool]string{true: "-slash"}[strings.HasSuffix(path, "/")], func(t *testing.T) {
			backend, srv := newDAVBackend(t)
			in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_ADMIN_TOKEN": "adm"})
			for _, w := range []struct{ method, path, body string }{{"MKCOL", "/dir/", ""}, {"MKCOL", "/dir/sub/", ""}, {http.MethodPut, "/dir/sub/x", "x"}} {
				if s, _, _ := send(t, in, w.method, w.path, "0", w.body); s >= 300 {
					t.Fatalf("setting up: %s %s: %d", w.method, w.path, s)
				}
			}
			deleted := make(chan int, 1)
			go func() {
				s, _, _ := send(t, in, http.MethodDelete, path, "3", "", "X-Hold: 1")
				deleted <- s
			}()
			servertest.Eventually(t, 10*time.Second, "the DELETE reaches the WebDAV server", func() bool { return backend.heldNow() == 1 })
			raised := make(chan string, 1)
			go func() {
				status, out := servertest.Call(t, http.MethodPut, in.ControlURL()+"/v1/fences/dir/sub/", `{"token":"5"}`, "adm")
				raised <- fmt.Sprint(status, out)
			}()
			select {
			case r := <-raised:
				// The raise returned while the stale DELETE was still on
				// its way: it lands after it.
				backend.release()
				<-deleted
				if fenceUnprotected("collection-drain") {
					t.Logf("teeth: with the collection drain off, the raise of dir/sub/ to 5 returned (%s) while DELETE %s with token 3 was in flight; applied after it: %v",
						r, path, backend.appliedNow())
					return
				}
				t.Fatalf("the raise of dir/sub/ to 5 returned (%s) while DELETE %s with token 3 was in flight; it was applied after: %v", r, path, backend.appliedNow())
			case <-time.After(500 * time.Millisecond):
			}
			if fenceUnprotected("collection-drain") {
				backend.release()
				t.Fatalf("teeth: with the collection drain off, the raise of dir/sub/ still waited for DELETE %s", path)
			}
			backend.release()
			if s := <-deleted; s >= 300 {
				t.Errorf("DELETE %s with token 3, admitted before the raise: %d", path, s)
			}
			if r := <-raised; !strings.HasPrefix(r, "200") {
				t.Errorf("the raise of dir/sub/: %s", r)
			}
			if s, _, _ := send(t, in, http.MethodDelete, path, "3", ""); s != http.StatusConflict {
				t.Errorf("DELETE %s with token 3 after the raise: %d, want 409", path, s)
			}
		})
	}
}

// A collection write still sending its body when a prefix fence below it
// is raised is cut, told which fence cut it, and never applied: PUT /dir/
// with token 3 against a raise of dir/sub/ to 7, into a store that keeps
// what arrives before an orderly close.
func TestPrefixCollectionCut(t *testing.T) {
	backend := &lenientStore{objects: map[string]string{}}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_ADMIN_TOKEN": "adm"})
	conn, err := net.Dial("tcp", in.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /dir/ HTTP/1.1\r\nHost: store.example\r\nX-Fencing-Token: 3\r\nContent-Length: 327680\r\n\r\n%s", strings.Repeat("A", 160<<10))
	servertest.Eventually(t, 10*time.Second, "the PUT is admitted", func() bool {
		return scrape(t, in, "fenceproxy_inflight_requests") == 1
	})
	if status, out := servertest.Call(t, http.MethodPut, in.ControlURL()+"/v1/fences/dir/sub/", `{"token":"7"}`, "adm"); status != http.StatusOK {
		t.Fatalf("admin raise of dir/sub/ to 7: %d %v", status, out)
	}
	teeth := fenceUnprotected("collection-drain")
	conn.SetReadDeadline(time.Now().Add(map[bool]time.Duration{false: 10 * time.Second, true: time.Second}[teeth]))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if teeth {
		// Teeth: the raise returned with the upload still sending, uncut.
		if err == nil {
			resp.Body.Close()
			t.Fatalf("teeth: with the collection drain off, the PUT /dir/ still got %d", resp.StatusCode)
		}
		t.Logf("teeth: with the collection drain off, the raise of dir/sub/ to 7 returned with PUT /dir/ (token 3) still sending, not cut")
		return
	}
	if err != nil {
		t.Fatalf("the PUT got no answer after the raise: %v", err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Fencing-Current-Token") != "7" || !strings.Contains(string(answer), `"resource":"dir/sub/"`) {
		t.Errorf("the cut PUT /dir/: %d, current %q, %s; want 409 naming dir/sub/ at 7", resp.StatusCode, resp.Header.Get("Fencing-Current-Token"), answer)
	}
	conn.Close()
	backend.settled(t)
	if got, ok := backend.object("/dir/"); ok {
		t.Errorf("the backend applied %d bytes of the cut PUT /dir/", len(got))
	}
}

// A write on several resources that a prefix fence refuses or cuts is told
// which fence did, with its maximum: a MOVE whose Destination lies below
// dir/sub/ (5), refused with token 4; and one with a body still sending when
// dir/sub/ is raised, cut.
func TestPrefixRefusalNamesFence(t *testing.T) {
	backend := &lenientStore{objects: map[string]string{}}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_ADMIN_TOKEN": "adm"})
	if status, out := servertest.Call(t, http.MethodPut, in.ControlURL()+"/v1/fences/dir/sub/", `{"token":"5"}`, "adm"); status != http.StatusOK {
		t.Fatalf("admin raise of dir/sub/: %d %v", status, out)
	}
	if s, _, _ := send(t, in, http.MethodPut, "/a/x", "4", "a"); s != http.StatusOK {
		t.Fatalf("token 4 on a/x: %d", s)
	}
	for _, dest := range []string{"/dir/sub/y", "/dir/sub"} {
		if s, current, resource := send(t, in, "MOVE", "/a/x", "4", "", "Destination: "+dest); s != http.StatusConflict || current != "5" || resource != "dir/sub/" {
			t.Errorf("MOVE /a/x onto %s with token 4: %d, current %q, resource %q; want 409 naming dir/sub/ at 5", dest, s, current, resource)
		}
	}

	// The cut: a MOVE with a body, still sending when dir/sub/ goes to 6.
	conn, err := net.Dial("tcp", in.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "MOVE /a/x HTTP/1.1\r\nHost: store.example\r\nX-Fencing-Token: 5\r\nDestination: /dir/sub/y\r\nContent-Length: 327680\r\n\r\n%s",
		strings.Repeat("A", 160<<10))
	servertest.Eventually(t, 10*time.Second, "the MOVE is admitted", func() bool {
		return scrape(t, in, "fenceproxy_inflight_requests") == 1
	})
	if status, out := servertest.Call(t, http.MethodPut, in.ControlURL()+"/v1/fences/dir/sub/", `{"token":"6"}`, "adm"); status != http.StatusOK {
		t.Fatalf("admin raise of dir/sub/ to 6: %d %v", status, out)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the MOVE got no answer after the raise: %v", err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Fencing-Current-Token") != "6" || !strings.Contains(string(answer), `"resource":"dir/sub/"`) {
		t.Errorf("the cut MOVE: %d, current %q, %s; want 409 naming dir/sub/ at 6", resp.StatusCode, resp.Header.Get("Fencing-Current-Token"), answer)
	}
}

// The attack review's finding on spellings: golang.org/x/net/webdav (like
// nginx and file-system stores) merges runs of slashes, so //dir/sub is
// dir/sub to it. Plain mode reads paths, Destinations and names so too:
// with dir/sub/ at 5, a stale holder's (token 3) writes through doubled
// slashes are refused, and the objects below stay. With RESOURCE_DEPTH 2,
// /rd//part-0/obj is the resource rd/part-0.
func TestPlainMergesSlashes(t *testing.T) {
	_, srv := newDAVBackend(t)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_ADMIN_TOKEN": "adm"})
	davTree(t, in)
	for _, w := range []struct {
		method, path string
		headers      []string
	}{
		{http.MethodPut, "/dir//sub/x", nil},
		{http.MethodPut, "//dir/sub/new", nil},
		{http.MethodDelete, "//dir/sub", nil},
		{http.MethodDelete, "/dir//sub/", nil},
		{"MOVE", "//dir", []string{"Destination: /stolen"}},
		{"MOVE", "/other/z", []string{"Destination: /dir//sub/x"}},
	} {
		if s, cur, res := send(t, in, w.method, w.path, "3", "stale", w.headers...); s != http.StatusConflict || cur != "5" || res != "dir/sub/" {
			t.Errorf("%s %s %v with token 3: %d, current %q, fence %q; want 409 naming dir/sub/ at 5", w.method, w.path, w.headers, s, cur, res)
		}
	}
	if s, body := davGet(t, srv, "/dir/sub/x"); s != http.StatusOK || body != "x-old" {
		t.Errorf("/dir/sub/x after the stale writes: %d %q, want x-old", s, body)
	}
	// A name is read so too: a lease on dir//sub/ is the lease on dir/sub/.
	status, out := servertest.Call(t, http.MethodGet, in.ControlURL()+"/v1/fences/dir//sub/", "", "adm")
	if status != http.StatusOK || out["resource"] != "dir/sub/" {
		t.Errorf("GET /v1/fences/dir//sub/: %d %v, want the fence dir/sub/", status, out)
	}

	_, srv2 := newDAVBackend(t)
	in2 := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv2.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_RESOURCE_DEPTH": "2"})
	for _, w := range []struct{ method, path, token, body string }{{"MKCOL", "/rd/", "0", ""}, {"MKCOL", "/rd/part-0/", "5", ""}, {http.MethodPut, "/rd/part-0/obj", "5", "new"}} {
		if s, _, _ := send(t, in2, w.method, w.path, w.token, w.body); s >= 300 {
			t.Fatalf("setting up: %s %s: %d", w.method, w.path, s)
		}
	}
	if s, cur, res := send(t, in2, http.MethodPut, "/rd//part-0/obj", "3", "stale"); s != http.StatusConflict || cur != "5" || res != "rd/part-0" {
		t.Errorf("PUT /rd//part-0/obj with token 3 under RESOURCE_DEPTH 2: %d, current %q, resource %q; want 409 naming rd/part-0 at 5", s, cur, res)
	}
	if s, body := davGet(t, srv2, "/rd/part-0/obj"); s != http.StatusOK || body != "new" {
		t.Errorf("/rd/part-0/obj after the stale write: %d %q, want new", s, body)
	}
}

// The attack review's finding: in plain mode a trailing "/" made another
// key, and golang.org/x/net/webdav (as nginx and file-system stores) opens
// /w/part-7/ as the file /w/part-7 and /w/ as the collection /w. With w and
// w/part-7 fenced at 5, a stale holder's (token 3) writes to either spelt
// with a trailing "/" (or "%2F", or a run of slashes), as a target or a
// Destination, are refused (409 at 5) and the store keeps the holder's data.
// Teeth (FENCEPROXY_TEST_FENCE_UNPROTECTED=slash-alias): some are applied.
func TestPlainTrailingSlashIsTheObject(t *testing.T) {
	_, srv := newDAVBackend(t)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir()})
	for _, w := range []struct{ method, path, token, body string }{
		{"MKCOL", "/w", "5", ""}, {http.MethodPut, "/w/part-7", "5", "new"}, {http.MethodPut, "/w/keep", "5", "keep"},
		{"MKCOL", "/other", "1", ""}, {http.MethodPut, "/other/z", "1", "stale-z"},
	} {
		if s, _, _ := send(t, in, w.method, w.path, w.token, w.body); s >= 300 {
			t.Fatalf("setting up: %s %s: %d", w.method, w.path, s)
		}
	}
	teeth := fenceUnprotected("slash-alias")
	var applied []string
	for _, w := range []struct {
		method, path, body string
		headers            []string
	}{
		{http.MethodPut, "/w/part-7/", "stale", nil},
		{http.MethodPut, "/w/part-7%2F", "stale", nil},
		{http.MethodPut, "//w//part-7//", "stale", nil},
		{http.MethodDelete, "/w/part-7/", "", nil},
		{"COPY", "/other/z", "", []string{"Destination: /w/part-7/", "Overwrite: T"}},
		{"MOVE", "/other/z", "", []string{"Destination: http://" + in.Proxy + "/w/part-7/", "Overwrite: T"}},
		{"PROPPATCH", "/w/part-7/", proppatch, []string{"Content-Type: application/xml"}},
		{http.MethodDelete, "/w/", "", nil},
		{"MOVE", "/w/", "", []string{"Destination: /stolen/"}},
	} {
		s, current, resource := send(t, in, w.method, w.path, "3", w.body, w.headers...)
		if s == http.StatusConflict && current == "5" {
			continue
		}
		if !teeth {
			t.Errorf("stale %s %s %v: %d, current %q, resource %q; want 409 at 5", w.method, w.path, w.headers, s, current, resource)
		}
		if s < 300 {
			applied = append(applied, fmt.Sprint(w.method, " ", w.path, w.headers, " ", s))
		}
		// Put the tree back on the server itself for the next write.
		for _, w := range []struct{ method, path, body string }{
			{http.MethodDelete, "/stolen", ""}, {"MKCOL", "/w", ""}, {http.MethodDelete, "/w/part-7", ""},
			{http.MethodPut, "/w/part-7", "new"}, {http.MethodPut, "/w/keep", "keep"}, {http.MethodPut, "/other/z", "stale-z"},
		} {
			req, _ := http.NewRequest(w.method, srv.URL+w.path, strings.NewReader(w.body))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
	if teeth {
		if len(applied) == 0 {
			t.Fatal("teeth: with the alias off, no stale write through a trailing slash was applied")
		}
		t.Logf("teeth: with the alias off, %d stale writes over w and w/part-7 (5) were applied with token 3: %v", len(applied), applied)
		return
	}
	if len(applied) > 0 {
		t.Errorf("stale writes applied over the fences at 5: %v", applied)
	}
	for path, want := range map[string]string{"/w/part-7": "new", "/w/keep": "keep"} {
		if s, body := davGet(t, srv, path); s != http.StatusOK || body != want {
			t.Errorf("after the stale writes the WebDAV server holds %s as %d %q, want 200 %q", path, s, body, want)
		}
	}
	// The holder's token passes through either spelling.
	if s, _, _ := send(t, in, http.MethodPut, "/w/part-7/", "5", "newer"); s >= 300 {
		t.Errorf("PUT /w/part-7/ with token 5: %d, want it applied", s)
	}
	if s, body := davGet(t, srv, "/w/part-7"); s != http.StatusOK || body != "newer" {
		t.Errorf("/w/part-7 after the holder's PUT /w/part-7/: %d %q, want newer", s, body)
	}
}
