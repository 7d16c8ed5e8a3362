package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
	"github.com/fenceproxy/fenceproxy/server"
)

const opAdmin = "admin-secret"

// startOpServer starts a fenceproxy in-process with env added to a
// backend, a data directory and the admin token opAdmin (env may unset it
// with "").
func startOpServer(t *testing.T, env map[string]string) *servertest.Instance {
	t.Helper()
	backend := servertest.NewRecordingBackend(t)
	full := map[string]string{
		"FENCEPROXY_UPSTREAM":         backend.URL(),
		"FENCEPROXY_DATA_DIR":         t.TempDir(),
		"FENCEPROXY_ADMIN_TOKEN":      opAdmin,
		"FENCEPROXY_LEASE_MIN_TTL":    "50ms",
		"FENCEPROXY_LOG_LEVEL":        "warn",
		"FENCEPROXY_DRAIN_TIMEOUT":    "2s",
		"FENCEPROXY_ABANDON_GRACE":    "0s",
		"FENCEPROXY_SHUTDOWN_TIMEOUT": "5s",
	}
	return servertest.Start(t, servertest.Env(full, env))
}

// op runs the command line args through Run with env as the whole
// environment, and returns its exit status, its stdout and its error's text
// (what main prints on stderr after "fenceproxy: "). Nothing else may reach
// stderr.
func op(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	code, stdout, stderr, msg := opStderr(t, env, args...)
	if stderr != "" {
		t.Errorf("fenceproxy %q wrote to stderr: %q", args, stderr)
	}
	return code, stdout, msg
}

// opStderr is op that returns what the command wrote to stderr too.
func opStderr(t *testing.T, env map[string]string, args ...string) (int, string, string, string) {
	t.Helper()
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, args, environ, &stdout, &stderr)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	t.Logf("fenceproxy %s -> %d\n%s%s%s", strings.Join(args, " "), exitCode(err), stdout.String(), stderr.String(), msg)
	return exitCode(err), stdout.String(), stderr.String(), msg
}

// opEnv is the environment of an operator on in's control listener.
func opEnv(in *servertest.Instance, admin string) map[string]string {
	env := map[string]string{"FENCEPROXY_CONTROL_URL": in.ControlURL()}
	if admin != "" {
		env["FENCEPROXY_ADMIN_TOKEN"] = admin
	}
	return env
}

// rawGet returns the body of a GET on the control API, as curl shows it.
func rawGet(t *testing.T, in *servertest.Instance, target, bearer string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, in.ControlURL()+target, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// lines returns s's lines with runs of spaces collapsed to one.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		out = append(out, strings.Join(strings.Fields(l), " "))
	}
	return out
}

func wantExit(t *testing.T, what string, code, want int, msg string) {
	t.Helper()
	if code != want {
		t.Fatalf("%s: exit status %d, want %d (%s)", what, code, want, msg)
	}
}

// TestOperateFences: raise, show, list and reset fences with the operator
// commands against a real server, in table and JSON output; a refusal exits
// 1 with the problem's title and detail and changes nothing.
func TestOperateFences(t *testing.T) {
	in := startOpServer(t, nil)
	env := opEnv(in, opAdmin)

	for _, f := range []struct{ resource, token string }{{"bkt/b", "7"}, {"bkt/a", "5"}, {"other/x", "1"}, {"bkt/c", "9"}} {
		code, out, msg := op(t, env, "fences", "raise", f.resource, f.token)
		wantExit(t, "raise "+f.resource, code, 0, msg)
		if got, want := lines(out), []string{"resource " + f.resource, "token " + f.token}; !slices.Equal(got, want) {
			t.Errorf("raise %s printed %q, want %q", f.resource, got, want)
		}
	}
	// A raise never lowers: the answer is the fence after it.
	code, out, msg := op(t, env, "fences", "raise", "bkt/c", "3", "--output", "json")
	wantExit(t, "raise lower", code, 0, msg)
	if out != `{"resource":"bkt/c","token":"9"}`+"\n" {
		t.Errorf("raise below the fence printed %q", out)
	}

	// show: the public read, the same JSON as the API's.
	code, out, msg = op(t, map[string]string{"FENCEPROXY_CONTROL_URL": in.ControlURL()}, "fences", "show", "bkt/a", "-o", "json")
	wantExit(t, "show", code, 0, msg)
	if _, raw := rawGet(t, in, "/v1/fences/bkt/a", ""); out != raw {
		t.Errorf("show -o json printed %q; the API answered %q", out, raw)
	}
	code, out, _ = op(t, env, "fences", "show", "bkt/a")
	if got, want := lines(out), []string{"resource bkt/a", "token 5"}; code != 0 || !slices.Equal(got, want) {
		t.Errorf("show: %d %q, want %q", code, got, want)
	}

	// list: a table in resource-key order, and the API's JSON.
	code, out, msg = op(t, env, "fences", "list")
	wantExit(t, "list", code, 0, msg)
	if got, want := lines(out), []string{"RESOURCE TOKEN", "bkt/a 5", "bkt/b 7", "bkt/c 9", "other/x 1"}; !slices.Equal(got, want) {
		t.Errorf("list printed %q, want %q", got, want)
	}
	code, out, _ = op(t, env, "fences", "list", "--output", "json")
	if _, raw := rawGet(t, in, "/v1/fences", opAdmin); code != 0 || out != raw {
		t.Errorf("list -o json: %d %q; the API answered %q", code, out, raw)
	}
	code, out, _ = op(t, env, "fences", "list", "--prefix", "bkt/", "--limit", "2", "-o", "json")
	if _, raw := rawGet(t, in, "/v1/fences?prefix=bkt/&limit=2", opAdmin); code != 0 || out != raw || !strings.Contains(raw, `"next":"bkt/b"`) {
		t.Errorf("list --limit 2 -o json: %d %q; the API answered %q", code, out, raw)
	}
	code, out, _ = op(t, env, "fences", "list", "--prefix", "bkt/", "--after", "bkt/b")
	if got, want := lines(out), []string{"RESOURCE TOKEN", "bkt/c 9"}; code != 0 || !slices.Equal(got, want) {
		t.Errorf("list --after bkt/b: %d %q, want %q", code, got, want)
	}
	code, out, _ = op(t, env, "fences", "list", "--prefix", "none/")
	if got, want := lines(out), []string{"RESOURCE TOKEN"}; code != 0 || !slices.Equal(got, want) {
		t.Errorf("list of nothing: %d %q, want %q", code, got, want)
	}

	// A refusal: 404 for a fence never raised, exit 1 with the detail.
	code, out, msg = op(t, env, "fences", "show", "bkt/none")
	wantExit(t, "show of a missing fence", code, 1, msg)
	// The detail repeats the title ("unknown resource: ..."): printed once.
	if want := "fences show bkt/none: 404 Unknown resource: no fencing token above 0 is stored for this resource"; out != "" || msg != want {
		t.Errorf("show of a missing fence: stdout %q, error %q; want %q", out, msg, want)
	}
	code, _, msg = op(t, env, "fences", "show", "bkt/none", "-o", "json")
	if code != 1 || !strings.Contains(msg, "404 Unknown resource") {
		t.Errorf("show -o json of a missing fence: %d %q", code, msg)
	}
	// A refusal for a bad name: 400, nothing raised.
	code, _, msg = op(t, env, "fences", "raise", "bkt/../x", "3")
	if code != 1 || !strings.Contains(msg, "400 Bad resource") {
		t.Errorf("raise of a dot-segment key: %d %q, want 1 and the 400", code, msg)
	}

	// reset: refused on the command line without the key repeated; then done.
	for _, args := range [][]string{{"fences", "reset", "bkt/a"}, {"fences", "reset", "bkt/a", "--confirm", "bkt/b"}} {
		code, _, msg := op(t, env, args...)
		wantExit(t, strings.Join(args, " "), code, 2, msg)
		if !strings.Contains(msg, "--confirm") {
			t.Errorf("%q: %q does not say what confirms", args, msg)
		}
	}
	if m := servertest.FenceMax(t, servertest.NewClient(t), in.Control, "bkt/a"); m != 5 {
		t.Fatalf("fence of bkt/a after refused resets = %d, want 5", m)
	}
	code, out, msg = op(t, env, "fences", "reset", "bkt/a", "--confirm", "bkt/a")
	wantExit(t, "reset", code, 0, msg)
	if got, want := lines(out), []string{"resource bkt/a", "removed token 5"}; !slices.Equal(got, want) {
		t.Errorf("reset printed %q, want %q", got, want)
	}
	// A token was admitted before the reset: the detail does not deny it.
	if code, _, msg := op(t, env, "fences", "show", "bkt/a"); code != 1 || !strings.Contains(msg, "404") || strings.Contains(msg, "ever admitted") {
		t.Errorf("show after reset: %d %q, want 404 that does not say no token was ever admitted", code, msg)
	}
	code, out, msg = op(t, env, "fences", "reset", "bkt/b", "--confirm", "bkt/b", "-o", "json")
	if code != 0 || out != `{"resource":"bkt/b","token":"7"}`+"\n" {
		t.Errorf("reset -o json: %d %q %s", code, out, msg)
	}
	if code, _, msg := op(t, env, "fences", "reset", "bkt/b", "--confirm", "bkt/b"); code != 1 || !strings.Contains(msg, "404") {
		t.Errorf("reset of a reset fence: %d %q, want 404", code, msg)
	}
}

// TestOperateFencesPaging: without --limit the listing follows next page by
// page to the end; with it, it stops after that many and the JSON carries
// next. A recording proxy in front of the control listener shows the calls.
func TestOperateFencesPaging(t *testing.T) {
	in := startOpServer(t, nil)
	target, _ := url.Parse(in.ControlURL())
	var mu sync.Mutex
	var calls []string
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") { // not the client's check of the listener
			mu.Lock()
			calls = append(calls, r.URL.RawQuery)
			mu.Unlock()
		}
		httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
	}))
	defer rec.Close()
	taken := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := calls
		calls = nil
		return out
	}
	env := opEnv(in, opAdmin)
	for _, r := range []string{"p/a", "p/b", "p/c", "p/d", "p/e"} {
		if code, _, msg := op(t, env, "fences", "raise", r, "4"); code != 0 {
			t.Fatalf("raise %s: %s", r, msg)
		}
	}
	env["FENCEPROXY_CONTROL_URL"] = rec.URL

	code, out, msg := op(t, env, "fences", "list", "--page-size", "2")
	wantExit(t, "list", code, 0, msg)
	if got, want := lines(out), []string{"RESOURCE TOKEN", "p/a 4", "p/b 4", "p/c 4", "p/d 4", "p/e 4"}; !slices.Equal(got, want) {
		t.Errorf("list --page-size 2 printed %q, want %q", got, want)
	}
	if got, want := taken(), []string{"limit=2", "after=p%2Fb&limit=2", "after=p%2Fd&limit=2"}; !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}

	code, out, _ = op(t, env, "fences", "list", "--page-size", "2", "-o", "json")
	if want := `{"fences":[{"resource":"p/a","token":"4"},{"resource":"p/b","token":"4"},{"resource":"p/c","token":"4"},` +
		`{"resource":"p/d","token":"4"},{"resource":"p/e","token":"4"}]}` + "\n"; code != 0 || out != want {
		t.Errorf("list --page-size 2 -o json: %d %q, want %q", code, out, want)
	}
	taken()

	code, out, _ = op(t, env, "fences", "list", "--page-size", "2", "--limit", "3", "-o", "json")
	if want := `{"fences":[{"resource":"p/a","token":"4"},{"resource":"p/b","token":"4"},{"resource":"p/c","token":"4"}],"next":"p/c"}` + "\n"; code != 0 || out != want {
		t.Errorf("list --limit 3 -o json: %d %q, want %q", code, out, want)
	}
	if got, want := taken(), []string{"limit=2", "after=p%2Fb&limit=1"}; !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	// In a table, a listing stopped by --limit says on stderr how to go on;
	// stdout stays the table.
	code, out, stderr, msg := opStderr(t, env, "fences", "list", "--prefix", "p/", "--page-size", "2", "--limit", "3")
	if got, want := lines(out), []string{"RESOURCE TOKEN", "p/a 4", "p/b 4", "p/c 4"}; code != 0 || !slices.Equal(got, want) {
		t.Errorf("list --limit 3: %d %q, want %q (%s)", code, got, want, msg)
	}
	if want := "more may follow: fenceproxy fences list --after p/c --prefix p/ --limit 3\n"; stderr != want {
		t.Errorf("list --limit 3 wrote %q to stderr, want %q", stderr, want)
	}
	taken()
	// A listing that ends says nothing more, with --limit or without.
	code, out, msg = op(t, env, "fences", "list", "--limit", "10")
	if got := lines(out); code != 0 || len(got) != 6 {
		t.Errorf("list --limit 10: %d %q (%s)", code, got, msg)
	}
	// --after takes the next of a listing stopped by --limit.
	code, out, _ = op(t, env, "fences", "list", "--after", "p/c")
	if got, want := lines(out), []string{"RESOURCE TOKEN", "p/d 4", "p/e 4"}; code != 0 || !slices.Equal(got, want) {
		t.Errorf("list --after p/c: %d %q, want %q", code, got, want)
	}
}

// TestOperateLeases: list, show and force-release leases; JSON as the API
// writes it; a release of a lease never acquired is refused (404, exit 1).
func TestOperateLeases(t *testing.T) {
	in := startOpServer(t, map[string]string{"FENCEPROXY_LEASE_TOKEN": "lease-secret"})
	leases := &client.Leases{BaseURL: in.ControlURL(), Bearer: "lease-secret"}
	ctx := context.Background()
	for _, l := range []struct{ name, holder string }{{"jobs/b", "worker-2"}, {"jobs/a", "worker-1"}, {"other", "worker-3"}} {
		if _, err := leases.Acquire(ctx, l.name, l.holder, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	env := opEnv(in, opAdmin)
	env["FENCEPROXY_LEASE_TOKEN"] = "lease-secret"

	code, out, msg := op(t, env, "leases", "list")
	wantExit(t, "leases list", code, 0, msg)
	got := lines(out)
	if len(got) != 4 || got[0] != "NAME HOLDER TOKEN STATE TTL EXPIRES_AT" ||
		!strings.HasPrefix(got[1], "jobs/a worker-1 1 held 1m0s 20") || !strings.HasPrefix(got[2], "jobs/b worker-2 1 held 1m0s 20") ||
		!strings.HasPrefix(got[3], "other worker-3 1 held 1m0s 20") {
		t.Errorf("leases list printed %q", got)
	}
	code, out, _ = op(t, env, "leases", "list", "-o", "json", "--prefix", "jobs/")
	if _, raw := rawGet(t, in, "/v1/leases?prefix=jobs/", opAdmin); code != 0 || out != raw || !strings.Contains(raw, `"holder":"worker-1"`) {
		t.Errorf("leases list -o json: %d %q; the API answered %q", code, out, raw)
	}

	code, out, msg = op(t, env, "leases", "show", "jobs/a")
	wantExit(t, "leases show", code, 0, msg)
	got = lines(out)
	if len(got) != 8 || got[0] != "name jobs/a" || got[1] != "holder worker-1" || got[2] != "token 1" || got[3] != "state held" || got[4] != "ttl 1m0s" {
		t.Errorf("leases show printed %q", got)
	}
	code, out, _ = op(t, env, "leases", "show", "jobs/a", "-o", "json")
	if _, raw := rawGet(t, in, "/v1/leases/jobs/a", "lease-secret"); code != 0 || out != raw {
		t.Errorf("leases show -o json: %d %q; the API answered %q", code, out, raw)
	}

	code, out, msg = op(t, env, "leases", "release", "jobs/a", "-o", "json")
	wantExit(t, "leases release", code, 0, msg)
	var released struct{ Name, Holder, State, Token string }
	if err := json.Unmarshal([]byte(out), &released); err != nil || released.Name != "jobs/a" || released.State != "released" || released.Holder != "worker-1" {
		t.Errorf("leases release -o json printed %q (%v)", out, err)
	}
	if _, err := leases.Renew(ctx, "jobs/a", "worker-1", 1); err == nil {
		t.Error("the holder renewed a force-released lease")
	}
	code, out, _ = op(t, env, "leases", "release", "jobs/b")
	if got := lines(out); code != 0 || len(got) != 8 || got[3] != "state released" {
		t.Errorf("leases release: %d %q", code, got)
	}
	code, out, stderr, _ := opStderr(t, env, "leases", "list", "--limit", "2")
	if got := lines(out); code != 0 || len(got) != 3 || !strings.Contains(got[1], "released") || !strings.Contains(got[2], "released") {
		t.Errorf("leases list --limit 2 after the releases: %d %q", code, got)
	}
	if want := "more may follow: fenceproxy leases list --after jobs/b --limit 2\n"; stderr != want {
		t.Errorf("leases list --limit 2 wrote %q to stderr, want %q", stderr, want)
	}

	code, out, msg = op(t, env, "leases", "release", "jobs/none")
	if code != 1 || out != "" || !strings.Contains(msg, "404 Unknown lease") {
		t.Errorf("release of a lease never acquired: %d %q %q, want exit 1 with the 404", code, out, msg)
	}
	code, _, msg = op(t, env, "leases", "show", "jobs/none")
	if code != 1 || !strings.Contains(msg, "404 Unknown lease") {
		t.Errorf("show of a lease never acquired: %d %q", code, msg)
	}

	// The lease read needs FENCEPROXY_LEASE_TOKEN on this server.
	delete(env, "FENCEPROXY_LEASE_TOKEN")
	code, _, msg = op(t, env, "leases", "show", "jobs/a")
	if code != 1 || !strings.Contains(msg, "401 Unauthorized") || !strings.Contains(msg, "FENCEPROXY_LEASE_TOKEN is not set in this environment") {
		t.Errorf("show without the lease token: %d %q", code, msg)
	}
}

// TestOperateAuth: admin calls with a wrong, a missing or a disabled admin
// token are refused with the problem's status, title and detail, exit 1,
// and change nothing.
func TestOperateAuth(t *testing.T) {
	in := startOpServer(t, nil)
	if code, _, msg := op(t, opEnv(in, opAdmin), "fences", "raise", "bkt/a", "5"); code != 0 {
		t.Fatal(msg)
	}
	for _, tc := range []struct {
		name  string
		admin string
		args  []string
		want  []string
	}{
		{"wrong token", "wrong", []string{"fences", "raise", "bkt/a", "9"}, []string{"401 Unauthorized", "Bearer <FENCEPROXY_ADMIN_TOKEN>",
			"the bearer token sent does not match it"}},
		{"wrong token, reset", "wrong", []string{"fences", "reset", "bkt/a", "--confirm", "bkt/a"}, []string{"401 Unauthorized"}},
		{"wrong token, list", "wrong", []string{"fences", "list"}, []string{"401 Unauthorized"}},
		{"wrong token, leases", "wrong", []string{"leases", "list"}, []string{"401 Unauthorized"}},
		{"no token", "", []string{"fences", "raise", "bkt/a", "9"}, []string{"401 Unauthorized", "the request has no Authorization header",
			"FENCEPROXY_ADMIN_TOKEN is not set in this environment"}},
		{"no token, release", "", []string{"leases", "release", "jobs/a"}, []string{"401 Unauthorized", "FENCEPROXY_ADMIN_TOKEN is not set in this environment"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, msg := op(t, opEnv(in, tc.admin), tc.args...)
			if code != 1 || out != "" {
				t.Errorf("exit %d, stdout %q; want 1 and nothing", code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
	if m := servertest.FenceMax(t, servertest.NewClient(t), in.Control, "bkt/a"); m != 5 {
		t.Errorf("fence of bkt/a = %d after refused calls, want 5", m)
	}

	// A server without an admin token refuses admin calls with 403.
	off := startOpServer(t, map[string]string{"FENCEPROXY_ADMIN_TOKEN": ""})
	code, _, msg := op(t, opEnv(off, "anything"), "fences", "list")
	if code != 1 || !strings.Contains(msg, "403 Admin API disabled") || !strings.Contains(msg, "set FENCEPROXY_ADMIN_TOKEN to enable admin calls") {
		t.Errorf("list on a server without admin: %d %q, want exit 1 with the 403", code, msg)
	}
	// Reads need no admin token.
	if code, _, msg := op(t, opEnv(off, ""), "fences", "show", "bkt/none"); code != 1 || !strings.Contains(msg, "404") {
		t.Errorf("show on a server without admin: %d %q, want the 404", code, msg)
	}
}

// TestOperateUsage: wrong command lines exit 2 with what is wrong and call
// nothing; -h prints each command's help and exits 0; a control listener
// out of reach exits 1.
func TestOperateUsage(t *testing.T) {
	in := startOpServer(t, nil)
	env := opEnv(in, opAdmin)
	if code, _, msg := op(t, env, "fences", "raise", "keep", "5"); code != 0 {
		t.Fatal(msg)
	}
	for _, tc := range []struct {
		args []string
		want string
		not  string // the error must not say this, when not ""
	}{
		{[]string{"fences"}, "fences needs a command (list, show, raise, reset)", ""},
		{[]string{"leases"}, "leases needs a command (list, show, release)", ""},
		{[]string{"fences", "frob"}, `unknown command "frob" for fences`, ""},
		{[]string{"fences", "show"}, "fences show takes RESOURCE, got 0 arguments", ""},
		{[]string{"fences", "show", "a", "b"}, "fences show takes RESOURCE, got 2 arguments", ""},
		{[]string{"fences", "raise", "keep"}, "fences raise takes RESOURCE TOKEN", ""},
		{[]string{"fences", "list", "extra"}, "fences list takes no arguments", ""},
		{[]string{"fences", "list", "--bogus"}, "flag provided but not defined: -bogus", ""},
		{[]string{"fences", "list", "--limit", "many"}, `invalid value "many" for flag -limit`, ""},
		{[]string{"fences", "list", "--limit", "-1"}, "--limit is 0 (all) or more", ""},
		{[]string{"fences", "list", "--page-size", "0"}, "--page-size is 1 to 10000", ""},
		{[]string{"fences", "list", "--page-size", "10001"}, "--page-size is 1 to 10000", ""},
		{[]string{"fences", "list", "--output", "yaml"}, `--output is table or json, not "yaml"`, ""},
		{[]string{"fences", "show", "keep", "--control", "ftp://x"}, `the control URL "ftp://x" is not an http:// or https:// URL`, ""},
		{[]string{"fences", "show", "keep", "--control", "127.0.0.1:9090"}, "is not an http:// or https:// URL", ""},
		{[]string{"fences", "raise", "keep", "abc"}, `TOKEN "abc"`, ""},
		{[]string{"fences", "raise", "keep", "1", "--confirm", "keep"}, "flag provided but not defined: -confirm", ""},
		{[]string{"fences", "raise", "keep", "9223372036854775808"}, `TOKEN "9223372036854775808"`, ""},
		{[]string{"fences", "raise", "keep", "-5"}, "flag provided but not defined: -5", ""},
		{[]string{"fences", "reset", "keep"}, "repeat the resource key: --confirm keep", ""},
		{[]string{"fences", "reset", "keep", "--confirm", "kee"}, `--confirm "kee" is not the resource "keep"; nothing changed`, ""},
		{[]string{"leases", "show"}, "leases show takes NAME", ""},
		{[]string{"leases", "release", "a", "b"}, "leases release takes NAME, got 2 arguments", ""},
		{[]string{"leases", "list", "--confirm", "x"}, "flag provided but not defined: -confirm", ""},
		{[]string{"serve", "extra"}, "serve takes no arguments", ""},
		{[]string{"demo", "extra"}, "demo takes no arguments", ""},
		{[]string{"version", "extra"}, "version takes no arguments", "FENCEPROXY_"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`, ""},
		{[]string{"foo", "bar"}, `unknown command "foo"`, "takes no arguments"},
		// Flags come after the command: the error shows where.
		{[]string{"--control", "http://127.0.0.1:1", "fences", "show", "keep"},
			"flags go after the command: fenceproxy fences show keep --control http://127.0.0.1:1", "takes no arguments"},
		{[]string{"-o", "json", "leases", "list"}, "flags go after the command: fenceproxy leases list -o json", ""},
		{[]string{"--control=http://127.0.0.1:1"}, "flags go after the command: fenceproxy COMMAND [arguments] --control=http://127.0.0.1:1", ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, msg := op(t, env, tc.args...)
			if code != 2 {
				t.Errorf("exit status %d, want 2 (%s)", code, msg)
			}
			if out != "" {
				t.Errorf("printed %q", out)
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q lacks %q", msg, tc.want)
			}
			if tc.not != "" && strings.Contains(msg, tc.not) {
				t.Errorf("error %q says %q", msg, tc.not)
			}
		})
	}
	if m := servertest.FenceMax(t, servertest.NewClient(t), in.Control, "keep"); m != 5 {
		t.Errorf("fence of keep = %d after the wrong command lines, want 5", m)
	}

	// Help: the top level names the commands; each group and command has its own.
	code, out, _ := op(t, nil, "-h")
	for _, w := range []string{"fenceproxy version", "fenceproxy fences", "fenceproxy leases"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("fenceproxy -h (exit %d) does not mention %q", code, w)
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"fences", "-h"}, []string{"Usage: fenceproxy fences COMMAND", "list [--prefix P]", "show RESOURCE", "raise RESOURCE TOKEN",
			"reset RESOURCE --confirm RESOURCE", "FENCEPROXY_CONTROL_URL", "FENCEPROXY_ADMIN_TOKEN", "Exit status"}},
		{[]string{"leases", "--help"}, []string{"Usage: fenceproxy leases COMMAND", "list [--prefix P]", "show NAME", "release NAME"}},
		{[]string{"fences", "list", "-h"}, []string{"Usage: fenceproxy fences list [flags]", "-prefix P", "-limit N", "-page-size", "-control URL", "-output format"}},
		{[]string{"fences", "show", "-h"}, []string{"Usage: fenceproxy fences show RESOURCE [flags]"}},
		{[]string{"fences", "raise", "-h"}, []string{"Usage: fenceproxy fences raise RESOURCE TOKEN [flags]"}},
		{[]string{"fences", "reset", "keep", "--help"}, []string{"Usage: fenceproxy fences reset RESOURCE [flags]", "-confirm"}},
		{[]string{"leases", "list", "-h"}, []string{"Usage: fenceproxy leases list [flags]", "-prefix P"}},
		{[]string{"leases", "show", "-h"}, []string{"Usage: fenceproxy leases show NAME [flags]", "FENCEPROXY_LEASE_TOKEN"}},
		{[]string{"leases", "release", "-h"}, []string{"Usage: fenceproxy leases release NAME [flags]"}},
		// serve and demo take no arguments but the help flag: the help.
		{[]string{"serve", "-h"}, []string{"fenceproxy [serve]", "FENCEPROXY_UPSTREAM"}},
		{[]string{"demo", "--help"}, []string{"fenceproxy demo", "FENCEPROXY_UPSTREAM"}},
	} {
		code, out, msg := op(t, nil, tc.args...)
		if code != 0 {
			t.Errorf("%q: exit %d (%s), want 0", tc.args, code, msg)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%q does not print %q:\n%s", tc.args, w, out)
			}
		}
	}

	// Nobody listening: exit 1, saying where it looked.
	ln := httptest.NewServer(http.NotFoundHandler())
	dead := ln.URL
	ln.Close()
	code, _, msg := op(t, map[string]string{"FENCEPROXY_CONTROL_URL": dead}, "fences", "show", "keep")
	if code != 1 || !strings.Contains(msg, "the control API at "+dead) || !strings.Contains(msg, "FENCEPROXY_CONTROL_URL") {
		t.Errorf("control listener out of reach: %d %q", code, msg)
	}
}

// TestOperateArguments: flags go before or after the arguments; after "--"
// everything is an argument (a resource key may start with "-"); --control
// overrides FENCEPROXY_CONTROL_URL; keys are escaped segment by segment.
func TestOperateArguments(t *testing.T) {
	in := startOpServer(t, nil)
	env := opEnv(in, opAdmin)
	for _, args := range [][]string{
		{"fences", "raise", "-o", "json", "bkt/a", "3"},
		{"fences", "raise", "bkt/a", "-o", "json", "3"},
		{"fences", "raise", "bkt/a", "3", "-o", "json"},
		{"fences", "raise", "--output=json", "bkt/a", "3"},
	} {
		code, out, msg := op(t, env, args...)
		if code != 0 || out != `{"resource":"bkt/a","token":"3"}`+"\n" {
			t.Errorf("%q: %d %q %s", args, code, out, msg)
		}
	}
	code, out, msg := op(t, env, "fences", "raise", "-o", "json", "--", "-dash/x", "4")
	if code != 0 || out != `{"resource":"-dash/x","token":"4"}`+"\n" {
		t.Errorf("raise -- -dash/x: %d %q %s", code, out, msg)
	}
	// Keys with characters that URLs escape reach the server as the same key
	// (a run of slashes is one, as plain mode reads a path).
	for key, want := range map[string]string{"bkt/100%": "bkt/100%", "bkt/a?b": "bkt/a?b", "bkt/é": "bkt/é",
		"bkt//double": "bkt/double", "bkt/trailing/": "bkt/trailing/"} {
		code, out, msg := op(t, env, "fences", "raise", key, "6", "-o", "json")
		b, _ := json.Marshal(map[string]string{"resource": want, "token": "6"})
		if code != 0 || out != string(b)+"\n" {
			t.Errorf("raise %q: %d %q %s; want %s", key, code, out, msg, b)
		}
		if code, out, _ := op(t, env, "fences", "show", key); code != 0 || !strings.Contains(out, want) {
			t.Errorf("show %q: %d %q", key, code, out)
		}
	}
	// The command line that lists on quotes what a shell would read otherwise.
	_, _, stderr, _ := opStderr(t, env, "fences", "list", "--prefix", "bkt/a?", "--limit", "1")
	if want := "more may follow: fenceproxy fences list --after 'bkt/a?b' --prefix 'bkt/a?' --limit 1\n"; stderr != want {
		t.Errorf("list --prefix bkt/a? --limit 1 wrote %q to stderr, want %q", stderr, want)
	}
	code, out, msg = op(t, map[string]string{"FENCEPROXY_CONTROL_URL": "http://127.0.0.1:1"}, "fences", "show", "--control", in.ControlURL()+"/", "bkt/a")
	if got := lines(out); code != 0 || !slices.Equal(got, []string{"resource bkt/a", "token 3"}) {
		t.Errorf("--control over FENCEPROXY_CONTROL_URL: %d %q %s", code, got, msg)
	}
}

// TestServeIgnoresControlURL: FENCEPROXY_CONTROL_URL is the operator
// commands' variable; serve does not warn about it as an unknown variable,
// and still warns about a real typo.
func TestServeIgnoresControlURL(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	env := serveEnv(backend.URL(), t.TempDir())
	env["FENCEPROXY_CONTROL_URL"] = "http://127.0.0.1:9090"
	env["FENCEPROXY_DRAIN_TIMOUT"] = "1s"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr servertest.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, env, io.Discard, &stderr, func(server.Addrs) { cancel() }) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	logs := stderr.String()
	if strings.Contains(logs, "FENCEPROXY_CONTROL_URL") {
		t.Errorf("serve logged FENCEPROXY_CONTROL_URL:\n%s", logs)
	}
	if !strings.Contains(logs, "unknown variable FENCEPROXY_DRAIN_TIMOUT is ignored") {
		t.Errorf("serve did not warn about FENCEPROXY_DRAIN_TIMOUT:\n%s", logs)
	}
}

// TestBinaryOperate runs the operator commands as the built binary: output on
// stdout, the refusal's title and detail on stderr, exit status 0, 1 or 2.
func TestBinaryOperate(t *testing.T) {
	in := startOpServer(t, nil)
	env := opEnv(in, opAdmin)
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // exact, when not ""
		stderr []string
	}{
		{args: []string{"fences", "raise", "bkt/a", "5"}, stdout: "resource  bkt/a\ntoken     5\n"},
		{args: []string{"fences", "show", "bkt/a", "-o", "json"}, stdout: `{"resource":"bkt/a","token":"5"}` + "\n"},
		{args: []string{"fences", "list"}, stdout: "RESOURCE  TOKEN\nbkt/a     5\n"},
		{args: []string{"leases", "list"}, stdout: "NAME  HOLDER  TOKEN  STATE  TTL  EXPIRES_AT\n"},
		{args: []string{"fences", "show", "bkt/none"}, code: 1,
			stderr: []string{"fenceproxy: fences show bkt/none: 404 Unknown resource: no fencing token above 0 is stored for this resource\n"}},
		{args: []string{"leases", "release", "jobs/none"}, code: 1, stderr: []string{"fenceproxy: leases release jobs/none: 404 Unknown lease"}},
		{args: []string{"fences", "reset", "bkt/a"}, code: 2, stderr: []string{"--confirm bkt/a"}},
		{args: []string{"fences", "list", "--bogus"}, code: 2, stderr: []string{"flag provided but not defined: -bogus"}},
		{args: []string{"fences"}, code: 2, stderr: []string{"fences needs a command"}},
		{args: []string{"serve", "extra"}, code: 2, stderr: []string{"serve takes no arguments"}},
		{args: []string{"--control", in.ControlURL(), "fences", "show", "bkt/a"}, code: 2,
			stderr: []string{"flags go after the command: fenceproxy fences show bkt/a --control " + in.ControlURL()}},
		{args: []string{"serve", "-h"}, stdout: "(help)"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runProcess(t, 30*time.Second, env, tc.args...)
			if code != tc.code {
				t.Errorf("exit status %d, want %d\nstderr: %s", code, tc.code, stderr)
			}
			if tc.stdout == "(help)" {
				if code != 0 || !strings.HasPrefix(stdout, "fenceproxy: an HTTP proxy") || stderr != "" {
					t.Errorf("exit %d, stdout %q, stderr %q; want the help", code, stdout, stderr)
				}
				return
			}
			if tc.code == 0 && (stdout != tc.stdout || stderr != "") {
				t.Errorf("stdout %q, want %q; stderr %q", stdout, tc.stdout, stderr)
			}
			if tc.code != 0 && stdout != "" {
				t.Errorf("a failed command printed %q", stdout)
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
		})
	}
	wrong := opEnv(in, "wrong")
	code, _, stderr := runProcess(t, 30*time.Second, wrong, "fences", "raise", "bkt/a", "9")
	if code != 1 || !strings.Contains(stderr, "401 Unauthorized") {
		t.Errorf("wrong admin token: exit %d, stderr %q; want 1 and the 401", code, stderr)
	}
	if m := servertest.FenceMax(t, servertest.NewClient(t), in.Control, "bkt/a"); m != 5 {
		t.Errorf("fence of bkt/a = %d, want 5", m)
	}
}

// TestOperateProxyListener: the operator commands pointed at the proxy
// listener (a common slip: it is the port a worker uses) fail naming the
// mix-up and where the control API is, and the admin bearer never leaves
// for the backend the proxy listener forwards to.
func TestOperateProxyListener(t *testing.T) {
	var bearers, calls atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("Authorization") != "" {
			bearers.Add(1)
		}
		w.Write([]byte("ok"))
	}))
	defer backend.Close()
	in := servertest.Start(t, servertest.Env(map[string]string{
		"FENCEPROXY_UPSTREAM":    backend.URL,
		"FENCEPROXY_DATA_DIR":    t.TempDir(),
		"FENCEPROXY_ADMIN_TOKEN": opAdmin,
		"FENCEPROXY_LOG_LEVEL":   "warn",
	}, nil))
	env := map[string]string{"FENCEPROXY_CONTROL_URL": in.ProxyURL(), "FENCEPROXY_ADMIN_TOKEN": opAdmin}
	for _, args := range [][]string{
		{"fences", "list"},
		{"fences", "raise", "bkt/a", "5"},
		{"fences", "show", "bkt/a"},
		{"leases", "list"},
	} {
		code, out, msg := op(t, env, args...)
		if code != 1 || out != "" {
			t.Errorf("%q against the proxy listener: exit %d, stdout %q; want 1 and nothing", args, code, out)
		}
		for _, w := range []string{"not a fenceproxy control listener", "FENCEPROXY_CONTROL_LISTEN", "no credential was sent"} {
			if !strings.Contains(msg, w) {
				t.Errorf("%q: error %q lacks %q", args, msg, w)
			}
		}
	}
	if calls.Load() == 0 {
		t.Fatal("the backend behind the proxy listener saw no request: the commands did not reach the proxy listener")
	}
	if n := bearers.Load(); n != 0 {
		t.Errorf("the backend saw the admin bearer %d times", n)
	}
	if m := servertest.FenceMax(t, servertest.NewClient(t), in.Control, "bkt/a"); m != 0 {
		t.Errorf("fence of bkt/a = %d, want 0: nothing may be raised", m)
	}
}
