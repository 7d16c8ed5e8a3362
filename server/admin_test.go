package server_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
	"github.com/fenceproxy/fenceproxy/store/badger"
)

// The admin API on the control listener, behind FENCEPROXY_ADMIN_TOKEN.

const admToken = "adm1n-s3cret"

// admStart runs fenceproxy with env added and raises fences by writing through
// the proxy: bkt/a=5, bkt/b=7, bkt/c=3, other/x=9.
func admStart(t *testing.T, env map[string]string) (*servertest.Instance, *servertest.RecordingBackend) {
	t.Helper()
	backend := servertest.NewRecordingBackend(t)
	full := map[string]string{"FENCEPROXY_UPSTREAM": backend.URL(), "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_LEASE_MIN_TTL": "50ms"}
	for k, v := range env {
		full[k] = v
	}
	in := servertest.Start(t, full)
	client := servertest.NewClient(t)
	for _, f := range []struct{ path, tok string }{{"/bkt/a", "5"}, {"/bkt/b", "7"}, {"/bkt/c", "3"}, {"/other/x", "9"}} {
		if st, _ := servertest.PutToken(t, client, in.ProxyURL(), f.path, f.tok, "seed"+f.path); st != http.StatusOK {
			t.Fatalf("seed PUT %s token %s: %d", f.path, f.tok, st)
		}
	}
	return in, backend
}

// admFence is GET /v1/fences/<key>: the token, "" on 404.
func admFence(t *testing.T, in *servertest.Instance, key string) string {
	t.Helper()
	status, body := servertest.Call(t, "GET", in.ControlURL()+"/v1/fences/"+key, "", "")
	switch status {
	case http.StatusNotFound:
		return ""
	case http.StatusOK:
		tok, _ := body["token"].(string)
		return tok
	}
	t.Fatalf("GET /v1/fences/%s: %d %v", key, status, body)
	return ""
}

// admList is GET /v1/fences?query: "resource=token" items and next.
func admList(t *testing.T, in *servertest.Instance, query string) (int, []string, string) {
	t.Helper()
	status, body := servertest.Call(t, "GET", in.ControlURL()+"/v1/fences?"+query, "", admToken)
	if status != http.StatusOK {
		return status, nil, ""
	}
	fences, ok := body["fences"].([]any)
	if !ok {
		t.Fatalf("list %s: no fences array: %v", query, body)
	}
	var items []string
	for _, f := range fences {
		m := f.(map[string]any)
		tok, ok := m["token"].(string)
		if !ok {
			t.Errorf("list %s: token %v is not a decimal string", query, m["token"])
		}
		items = append(items, m["resource"].(string)+"="+tok)
	}
	next, _ := body["next"].(string)
	return status, items, next
}

// admPages follows next from GET /v1/fences?query to the last page and
// returns every item; it fails the test after 10 pages or on a status other
// than 200.
func admPages(t *testing.T, in *servertest.Instance, query string) []string {
	t.Helper()
	var all []string
	after := ""
	for range 10 {
		status, items, next := admList(t, in, query+"&after="+url.QueryEscape(after))
		if status != http.StatusOK {
			t.Fatalf("GET /v1/fences?%s after %q: %d", query, after, status)
		}
		all = append(all, items...)
		if next == "" {
			return all
		}
		after = next
	}
	t.Fatalf("paging GET /v1/fences?%s did not end after 10 pages: %q", query, all)
	return nil
}

func TestAdminListFences(t *testing.T) {
	in, _ := admStart(t, map[string]string{"FENCEPROXY_ADMIN_TOKEN": admToken})
	for _, tc := range []struct {
		query, want, next string
	}{
		{"prefix=bkt/", "bkt/a=5,bkt/b=7,bkt/c=3", ""},
		{"prefix=", "bkt/a=5,bkt/b=7,bkt/c=3,other/x=9", ""},
		{"", "bkt/a=5,bkt/b=7,bkt/c=3,other/x=9", ""},
		{"prefix=other/", "other/x=9", ""},
		{"prefix=nothing/", "", ""},
		{"prefix=bkt/&limit=2", "bkt/a=5,bkt/b=7", "bkt/b"},
		{"prefix=bkt/&limit=2&after=bkt/b", "bkt/c=3", ""},
		{"prefix=bkt/&limit=3", "bkt/a=5,bkt/b=7,bkt/c=3", "bkt/c"}, // a full page may have more
		{"prefix=bkt/&limit=3&after=bkt/c", "", ""},
		{"prefix=bkt/&limit=1&after=bkt/a", "bkt/b=7", "bkt/b"},
	} {
		status, items, next := admList(t, in, tc.query)
		if status != http.StatusOK || strings.Join(items, ",") != tc.want || next != tc.next {
			t.Errorf("GET /v1/fences?%s: %d %q next %q, want 200 %q next %q", tc.query, status, items, next, tc.want, tc.next)
		}
	}
	// Following next page by page visits every fence once.
	if got := strings.Join(admPages(t, in, "limit=1"), ","); got != "bkt/a=5,bkt/b=7,bkt/c=3,other/x=9" {
		t.Errorf("paging with limit=1: %s", got)
	}
	for _, bad := range []string{"limit=0", "limit=10001", "limit=x", "limit=-1"} {
		if status, _, _ := admList(t, in, bad); status != http.StatusBadRequest {
			t.Errorf("GET /v1/fences?%s: %d, want 400", bad, status)
		}
	}
}

func TestAdminRaiseFence(t *testing.T) {
	in, backend := admStart(t, map[string]string{"FENCEPROXY_ADMIN_TOKEN": admToken})
	client := servertest.NewClient(t)
	url := in.ControlURL() + "/v1/fences/bkt/a"
	for _, tc := range []struct{ body, want string }{
		{`{"token":"50"}`, "50"}, // string
		{`{"token":60}`, "60"},   // number
		{`{"token":"10"}`, "60"}, // lower: max(stored, requested), never down
		{`{"token":60}`, "60"},
	} {
		status, body := servertest.Call(t, "PUT", url, tc.body, admToken)
		if status != http.StatusOK || body["token"] != tc.want || body["resource"] != "bkt/a" {
			t.Errorf("PUT %s: %d %v, want 200 token %q", tc.body, status, body, tc.want)
		}
	}
	if got := admFence(t, in, "bkt/a"); got != "60" {
		t.Fatalf("fence after raises: %q, want 60", got)
	}
	// The proxy refuses lower tokens at once, admits the raised one.
	servertest.AssertStale(t, client, backend, in.ProxyURL(), "/bkt/a", 59, 60, "a-59")
	servertest.AssertStale(t, client, backend, in.ProxyURL(), "/bkt/a", 5, 60, "a-5")
	if st, _ := servertest.PutToken(t, client, in.ProxyURL(), "/bkt/a", "60", "a-60"); st != http.StatusOK {
		t.Errorf("PUT with the raised token 60: %d, want 200", st)
	}
	// A resource never seen is raised too (fence-ahead by an external coordinator).
	if status, body := servertest.Call(t, "PUT", in.ControlURL()+"/v1/fences/new/r", `{"token":4}`, admToken); status != http.StatusOK || body["token"] != "4" {
		t.Errorf("raise new/r: %d %v", status, body)
	}
	servertest.AssertStale(t, client, backend, in.ProxyURL(), "/new/r", 3, 4, "new-3")
	// Bad bodies: 400, nothing changes.
	for _, bad := range []string{`{"token":"007"}`, `{}`, `{"token":-1}`, `{"token":"9223372036854775808"}`, `{"token":"70","extra":1}`, `not json`, `{"token":"1.5"}`} {
		if status, body := servertest.Call(t, "PUT", url, bad, admToken); status != http.StatusBadRequest {
			t.Errorf("PUT %s: %d %v, want 400", bad, status, body)
		}
	}
	if got := admFence(t, in, "bkt/a"); got != "60" {
		t.Errorf("fence after bad raises: %q, want 60", got)
	}
	backend.CheckOrder(t)
}

func TestAdminResetFence(t *testing.T) {
	in, backend := admStart(t, map[string]string{"FENCEPROXY_ADMIN_TOKEN": admToken})
	client := servertest.NewClient(t)
	url := in.ControlURL() + "/v1/fences/bkt/b"
	for _, q := range []string{"", "?confirm=", "?confirm=bkt/a", "?confirm=bkt", "?confirm=bkt/b/", "?confirm=BKT/B", "?force=true"} {
		if status, body := servertest.Call(t, "DELETE", url+q, "", admToken); status != http.StatusBadRequest {
			t.Errorf("DELETE /v1/fences/bkt/b%s: %d %v, want 400", q, status, body)
		}
	}
	if got := admFence(t, in, "bkt/b"); got != "7" {
		t.Fatalf("fence after unconfirmed resets: %q, want 7", got)
	}
	servertest.AssertStale(t, client, backend, in.ProxyURL(), "/bkt/b", 1, 7, "b-1-before")

	status, body := servertest.Call(t, "DELETE", url+"?confirm=bkt/b", "", admToken)
	if status != http.StatusOK || body["token"] != "7" || body["resource"] != "bkt/b" {
		t.Fatalf("confirmed reset: %d %v, want 200 with the removed token 7", status, body)
	}
	if got := admFence(t, in, "bkt/b"); got != "" {
		t.Fatalf("GET /v1/fences/bkt/b after reset: token %q, want 404", got)
	}
	if st, _ := servertest.PutToken(t, client, in.ProxyURL(), "/bkt/b", "1", "b-1-after"); st != http.StatusOK {
		t.Fatalf("PUT token 1 after reset: %d, want 200", st)
	}
	if got := admFence(t, in, "bkt/b"); got != "1" {
		t.Errorf("fence after the first write since reset: %q, want 1", got)
	}
	// Others are untouched.
	if got := admFence(t, in, "bkt/a"); got != "5" {
		t.Errorf("fence bkt/a: %q, want 5", got)
	}

	// Reset removes the lease record too: the next acquire starts at 1 again.
	leases := in.ControlURL() + "/v1/leases/bkt/c"
	if status, body := servertest.Call(t, "POST", leases, `{"holder":"A","ttl":"10s"}`, ""); status != 201 || body["token"] != "4" {
		t.Fatalf("acquire bkt/c (fence 3): %d %v, want token 4", status, body)
	}
	if status, body := servertest.Call(t, "DELETE", in.ControlURL()+"/v1/fences/bkt/c?confirm=bkt/c", "", admToken); status != 200 || body["token"] != "4" {
		t.Fatalf("reset bkt/c: %d %v", status, body)
	}
	if status, body := servertest.Call(t, "GET", leases, "", ""); status != http.StatusNotFound {
		t.Errorf("lease bkt/c after reset: %d %v, want 404", status, body)
	}
	if status, body := servertest.Call(t, "POST", leases, `{"holder":"B","ttl":"10s"}`, ""); status != 201 || body["token"] != "1" {
		t.Errorf("acquire bkt/c after reset: %d %v, want 201 token 1", status, body)
	}
	if status, _ := servertest.Call(t, "DELETE", in.ControlURL()+"/v1/fences/never/seen?confirm=never/seen", "", admToken); status != http.StatusNotFound {
		t.Errorf("reset of a resource never seen: %d, want 404", status)
	}
	// (No backend.checkOrder here: a reset is the one sanctioned way for tokens to go down.)
}

func TestAdminForceReleaseLease(t *testing.T) {
	in, _ := admStart(t, map[string]string{"FENCEPROXY_ADMIN_TOKEN": admToken})
	leases := in.ControlURL() + "/v1/leases/bkt/l"
	status, a := servertest.Call(t, "POST", leases, `{"holder":"A","ttl":"10s"}`, "")
	if status != 201 {
		t.Fatalf("A acquire: %d %v", status, a)
	}
	aTok := a["token"].(string)
	// A plain DELETE without holder and token is the holder's release: 400, not a force release.
	if status, _ := servertest.Call(t, "DELETE", leases, "", admToken); status != http.StatusBadRequest {
		t.Errorf("DELETE without ?force and without a body: %d, want 400", status)
	}
	status, body := servertest.Call(t, "DELETE", leases+"?force=true", "", admToken)
	if status != 200 || body["state"] != "released" || body["holder"] != "A" || body["token"] != aTok {
		t.Fatalf("force release: %d %v", status, body)
	}
	if status, l := servertest.Call(t, "GET", leases, "", ""); status != 200 || l["state"] != "released" {
		t.Errorf("lease after force release: %d %v", status, l)
	}
	// The token stays spent and the fence stays: A is lost, B gets a larger token at once.
	if got := admFence(t, in, "bkt/l"); got != aTok {
		t.Errorf("fence after force release: %q, want %s", got, aTok)
	}
	if status, _ := servertest.Call(t, "PUT", leases, `{"holder":"A","token":"`+aTok+`"}`, ""); status != http.StatusConflict {
		t.Errorf("A's renew after force release: %d, want 409", status)
	}
	status, b := servertest.Call(t, "POST", leases, `{"holder":"B","ttl":"10s"}`, "")
	if status != 201 || servertest.MustUint(t, b["token"].(string)) <= servertest.MustUint(t, aTok) {
		t.Fatalf("B acquire after force release: %d %v, want a token above %s", status, b, aTok)
	}
	if status, _ := servertest.Call(t, "DELETE", in.ControlURL()+"/v1/leases/never/acquired?force=true", "", admToken); status != http.StatusNotFound {
		t.Errorf("force release of a lease never acquired: %d, want 404", status)
	}
}

// admChecks gives holder A lease bkt/l, sends every admin call (list, raise,
// reset, force release) with each Authorization value in bearers, wants
// wantStatus for all, and checks that no fence or lease changed.
func admChecks(t *testing.T, in *servertest.Instance, wantStatus int, bearers []string) {
	t.Helper()
	leases := in.ControlURL() + "/v1/leases/bkt/l"
	status, a := servertest.Call(t, "POST", leases, `{"holder":"A","ttl":"10s"}`, "")
	if status != 201 {
		t.Fatalf("A acquire: %d %v", status, a)
	}
	aTok := a["token"].(string)
	fences := in.ControlURL() + "/v1/fences"
	calls := []struct{ method, url, body string }{
		{"GET", fences + "?prefix=bkt/", ""},
		{"PUT", fences + "/bkt/a", `{"token":"50"}`},
		{"PUT", fences + "/bkt/new", `{"token":"50"}`},
		{"DELETE", fences + "/bkt/b?confirm=bkt/b", ""},
		{"DELETE", leases + "?force=true", ""},
	}
	for _, bearer := range bearers {
		for _, c := range calls {
			req, _ := http.NewRequest(c.method, c.url, strings.NewReader(c.body))
			if bearer != "" {
				req.Header.Set("Authorization", bearer)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != wantStatus {
				t.Errorf("%s %s with Authorization %q: %d, want %d", c.method, c.url, bearer, resp.StatusCode, wantStatus)
			}
			if wantStatus == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s: 401 without WWW-Authenticate: Bearer", c.method, c.url)
			}
		}
	}
	// Nothing changed.
	for key, want := range map[string]string{"bkt/a": "5", "bkt/b": "7", "bkt/new": "", "bkt/l": aTok} {
		if got := admFence(t, in, key); got != want {
			t.Errorf("fence %s after refused admin calls: %q, want %q", key, got, want)
		}
	}
	if status, l := servertest.Call(t, "GET", leases, "", ""); status != 200 || l["holder"] != "A" || l["state"] != "held" || l["token"] != aTok {
		t.Errorf("lease after refused force release: %d %v, want held by A", status, l)
	}
	if status, _ := servertest.Call(t, "PUT", leases, `{"holder":"A","token":"`+aTok+`"}`, ""); status != http.StatusOK {
		t.Errorf("A's renew after refused force release: %d, want 200", status)
	}
}

func TestAdminUnauthorized(t *testing.T) {
	in, _ := admStart(t, map[string]string{"FENCEPROXY_ADMIN_TOKEN": admToken})
	admChecks(t, in, http.StatusUnauthorized, []string{
		"", "Bearer wrong", "Bearer " + admToken + "x", "Bearer " + admToken[:len(admToken)-1],
		"bearer " + admToken, "Basic " + admToken, admToken, "Bearer  " + admToken, "Bearer ",
	})
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	in, _ := admStart(t, nil)
	admChecks(t, in, http.StatusForbidden, []string{"", "Bearer " + admToken, "Bearer "})
	// Reads stay open: GET of one fence is not an admin call.
	if got := admFence(t, in, "bkt/a"); got != "5" {
		t.Errorf("GET /v1/fences/bkt/a: %q", got)
	}
}

// With FENCEPROXY_LEASE_TOKEN and FENCEPROXY_ADMIN_TOKEN both set (and
// different), DELETE /v1/leases/{name}?force=true needs the admin bearer,
// not the lease bearer, in the one Authorization header.
func TestAdminForceReleaseWithLeaseToken(t *testing.T) {
	in, _ := admStart(t, map[string]string{"FENCEPROXY_ADMIN_TOKEN": admToken, "FENCEPROXY_LEASE_TOKEN": "lease-s3cret"})
	leases := in.ControlURL() + "/v1/leases/bkt/l"
	if status, body := servertest.Call(t, "POST", leases, `{"holder":"A","ttl":"10s"}`, "lease-s3cret"); status != 201 {
		t.Fatalf("A acquire: %d %v", status, body)
	}
	// The lease bearer is not an admin bearer.
	if status, _ := servertest.Call(t, "DELETE", leases+"?force=true", "", "lease-s3cret"); status != http.StatusUnauthorized {
		t.Errorf("force release with the lease bearer: %d, want 401", status)
	}
	if status, l := servertest.Call(t, "GET", leases, "", "lease-s3cret"); status != 200 || l["state"] != "held" {
		t.Fatalf("lease after a refused force release: %d %v, want held", status, l)
	}
	if status, body := servertest.Call(t, "DELETE", leases+"?force=true", "", admToken); status != http.StatusOK || body["state"] != "released" {
		t.Errorf("force release with the admin bearer while FENCEPROXY_LEASE_TOKEN is set: %d %v, want 200 released", status, body)
	}
}

// GET /v1/fences?prefix=P&after=A with A sorting after every key under P but
// not starting with P (after=c, after=bkt0 for prefix=bkt/) is an empty
// page, not the first page again.
func TestAdminListAfterOutsidePrefix(t *testing.T) {
	in, _ := admStart(t, map[string]string{"FENCEPROXY_ADMIN_TOKEN": admToken})
	for _, tc := range []struct{ query, want string }{
		{"prefix=bkt/&after=a", "bkt/a=5,bkt/b=7,bkt/c=3"}, // after sorts before the prefix: everything
		{"prefix=bkt/&after=bkt", "bkt/a=5,bkt/b=7,bkt/c=3"},
		{"prefix=bkt/&after=bkt0", ""}, // after sorts after every bkt/ key: nothing
		{"prefix=bkt/&after=c", ""},
	} {
		status, items, next := admList(t, in, tc.query)
		if status != http.StatusOK || strings.Join(items, ",") != tc.want || next != "" {
			t.Errorf("GET /v1/fences?%s: %d %q next %q, want %q", tc.query, status, items, next, tc.want)
		}
	}
}

// Go's profiler is on the control listener behind the admin bearer.
func TestAdminProfiler(t *testing.T) {
	in, _ := admStart(t, map[string]string{"FENCEPROXY_ADMIN_TOKEN": admToken})
	for _, tc := range []struct {
		path, bearer string
		want         int
	}{
		{"/debug/pprof/", "", http.StatusUnauthorized},
		{"/debug/pprof/", "wrong", http.StatusUnauthorized},
		{"/debug/pprof/heap?debug=1", "", http.StatusUnauthorized},
		{"/debug/pprof/", admToken, http.StatusOK},
		{"/debug/pprof/goroutine?debug=1", admToken, http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, in.ControlURL()+tc.path, nil)
		if tc.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+tc.bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("GET %s (bearer %q): %d, want %d", tc.path, tc.bearer, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusOK && !strings.Contains(string(body), "goroutine") {
			t.Fatalf("GET %s: no profile in %.200q", tc.path, body)
		}
	}
	// With no admin token set, the profiler is off like every admin call.
	off, _ := admStart(t, nil)
	if status, _ := servertest.Call(t, "GET", off.ControlURL()+"/debug/pprof/", "", ""); status != http.StatusForbidden {
		t.Fatalf("profiler without FENCEPROXY_ADMIN_TOKEN: %d, want 403", status)
	}
}

// With FENCEPROXY_RESOURCE_DEPTH set, an admin raise on a name with more
// segments than the depth would fence a key no write has: the old holder
// would pass. It is refused (400) and changes nothing.
func TestAdminRaiseNameDeeperThanDepth(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL(), "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_ADMIN_TOKEN": admToken, "FENCEPROXY_RESOURCE_DEPTH": "1"})
	client := servertest.NewClient(t)
	if st, _ := servertest.PutToken(t, client, in.ProxyURL(), "/bkt/obj", "7", "holder"); st != http.StatusOK {
		t.Fatalf("the holder's write: %d", st)
	}
	if status, body := servertest.Call(t, "PUT", in.ControlURL()+"/v1/fences/bkt/obj", `{"token":9}`, admToken); status != http.StatusBadRequest || body["reason"] != "bad_resource" {
		t.Fatalf("raise of bkt/obj at depth 1: %d %v, want 400 bad_resource", status, body)
	}
	if got := admFence(t, in, "bkt"); got != "7" {
		t.Fatalf("fence of bkt after the refused raise: %q, want 7", got)
	}
	if status, body := servertest.Call(t, "PUT", in.ControlURL()+"/v1/fences/bkt", `{"token":9}`, admToken); status != http.StatusOK || body["token"] != "9" {
		t.Fatalf("raise of bkt at depth 1: %d %v", status, body)
	}
	if st, _ := servertest.PutToken(t, client, in.ProxyURL(), "/bkt/obj", "7", "old holder"); st != http.StatusConflict {
		t.Fatalf("the old holder's write after the raise of its resource: %d, want 409", st)
	}
}

// TestAdminListSkipsKeysNotUTF8: records under keys that are not UTF-8 (an
// older version fenced /u/%FF1 as such) neither stall the listing's paging
// nor appear in it, and the proxy and the API refuse such names now; nor
// does a record of token 0.
func TestAdminListSkipsKeysNotUTF8(t *testing.T) {
	dir := t.TempDir()
	st, err := badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"u/\xff1", "u/\xff2", "u/\xff3", "u/a", "u/\xc3", "u/z"} {
		if _, err := st.Raise(k, 5); err != nil {
			t.Fatal(err)
		}
	}
	// A write with token 0 leaves a record of 0, which fences nothing and
	// which GET /v1/fences/u/m0 answers with 404: not listed either.
	if err := st.MarkWritten("u/m0"); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	backend := servertest.NewRecordingBackend(t)
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL(), "FENCEPROXY_DATA_DIR": dir, "FENCEPROXY_ADMIN_TOKEN": admToken})
	if got := admFence(t, in, "u/m0"); got != "" {
		t.Errorf("GET /v1/fences/u/m0: %q, want 404", got)
	}

	if got := strings.Join(admPages(t, in, "prefix=u/&limit=1"), ","); got != "u/a=5,u/z=5" {
		t.Errorf("paging with limit=1: %s, want u/a=5,u/z=5", got)
	}
	if _, items, next := admList(t, in, "prefix=u/&limit=2"); strings.Join(items, ",") != "u/a=5,u/z=5" || next != "u/z" {
		t.Errorf("one page of 2: %q next %q", items, next)
	}

	client := servertest.NewClient(t)
	if st, _ := servertest.PutToken(t, client, in.ProxyURL(), "/u/%FF1", "9", "x"); st != http.StatusBadRequest {
		t.Errorf("PUT /u/%%FF1: %d, want 400", st)
	}
	if status, _ := servertest.Call(t, "PUT", in.ControlURL()+"/v1/fences/u/%FF1", `{"token":"9"}`, admToken); status != http.StatusBadRequest {
		t.Errorf("admin raise of u/%%FF1: %d, want 400", status)
	}
	if n := len(backend.Requests()); n != 0 {
		t.Errorf("the backend got %d requests, want 0", n)
	}
}

// A reset's ?confirm= that is missing, empty, wrong or given more than once is
// refused (400, nothing changes), and the detail says which it was.
func TestAdminResetConfirmSaysWhatIsWrong(t *testing.T) {
	in, _ := admStart(t, map[string]string{"FENCEPROXY_ADMIN_TOKEN": admToken})
	url := in.ControlURL() + "/v1/fences/bkt/b"
	for _, tc := range []struct{ query, detail string }{
		{"", "?confirm= is missing"},
		{"?confirm=", "?confirm= is empty"},
		{"?confirm=bkt/a", `?confirm="bkt/a" does not match the resource "bkt/b"`},
		{"?confirm=bkt/b&confirm=x", "?confirm= is given 2 times"},
		{"?confirm=x&confirm=bkt/b", "?confirm= is given 2 times"},
		{"?confirm=bkt/b&confirm=bkt/b", "?confirm= is given 2 times"},
	} {
		status, body := servertest.Call(t, "DELETE", url+tc.query, "", admToken)
		detail, _ := body["detail"].(string)
		if status != http.StatusBadRequest || body["reason"] != "bad_request" || !strings.Contains(detail, tc.detail) {
			t.Errorf("DELETE /v1/fences/bkt/b%s: %d %v, want 400 bad_request with a detail containing %q", tc.query, status, body, tc.detail)
		}
	}
	if got := admFence(t, in, "bkt/b"); got != "7" {
		t.Fatalf("fence after refused resets: %q, want 7", got)
	}
}

// Every query parameter of the control API is given at most once: a repeat
// is refused (400) instead of the first value silently winning.
func TestControlQueryRepeatsRefused(t *testing.T) {
	in, _ := admStart(t, map[string]string{"FENCEPROXY_ADMIN_TOKEN": admToken})
	if status, body := servertest.Call(t, "POST", in.ControlURL()+"/v1/leases/bkt/l", `{"holder":"A","ttl":"10s"}`, ""); status != 201 {
		t.Fatalf("acquire: %d %v", status, body)
	}
	for _, target := range []string{
		"/v1/fences?limit=1&limit=1000",
		"/v1/fences?prefix=bkt/&prefix=other/",
		"/v1/fences?after=bkt/a&after=",
	} {
		status, body := servertest.Call(t, "GET", in.ControlURL()+target, "", admToken)
		if detail, _ := body["detail"].(string); status != http.StatusBadRequest || !strings.Contains(detail, "given 2 times") {
			t.Errorf("GET %s: %d %v, want 400 saying the parameter is given 2 times", target, status, body)
		}
	}
	status, body := servertest.Call(t, "DELETE", in.ControlURL()+"/v1/leases/bkt/l?force=true&force=false", "", admToken)
	if detail, _ := body["detail"].(string); status != http.StatusBadRequest || !strings.Contains(detail, "given 2 times") {
		t.Errorf("force-release with force given twice: %d %v, want 400", status, body)
	}
	if status, body := servertest.Call(t, "GET", in.ControlURL()+"/v1/leases/bkt/l", "", ""); status != 200 || body["state"] != "held" {
		t.Errorf("lease after the refused force-release: %d %v, want held", status, body)
	}
}

// An admin raise to token 0 would change nothing (0 is below every token) and
// leave no fence to read or list: refused with 400.
func TestAdminRaiseToZeroRefused(t *testing.T) {
	in, _ := admStart(t, map[string]string{"FENCEPROXY_ADMIN_TOKEN": admToken})
	for _, tc := range []struct{ resource, body string }{
		{"new/zero", `{"token":0}`}, {"new/zero", `{"token":"0"}`}, {"bkt/a", `{"token":0}`},
	} {
		status, body := servertest.Call(t, "PUT", in.ControlURL()+"/v1/fences/"+tc.resource, tc.body, admToken)
		detail, _ := body["detail"].(string)
		if status != http.StatusBadRequest || body["reason"] != "bad_request" || !strings.Contains(detail, "token 0") {
			t.Errorf("PUT /v1/fences/%s %s: %d %v, want 400 bad_request naming token 0", tc.resource, tc.body, status, body)
		}
	}
	if got := admFence(t, in, "new/zero"); got != "" {
		t.Errorf("fence new/zero after the refused raise: %q, want none", got)
	}
	if got := admFence(t, in, "bkt/a"); got != "5" {
		t.Errorf("fence bkt/a after the refused raise: %q, want 5", got)
	}
}
