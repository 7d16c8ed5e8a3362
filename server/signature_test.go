package server_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
	"github.com/fenceproxy/fenceproxy/tokensig"
)

// Signed-token mode (FENCEPROXY_TOKEN_KEY) through the running server: the
// lease API signs the tokens it issues, and the proxy forwards a fenced write
// only with a valid X-Fencing-Token-Signature, checking in the order 428,
// 400, 403, 409.

const sgAdmin = "sig-admin"

// sgKey returns a fresh random 32-byte key as FENCEPROXY_TOKEN_KEY takes it,
// and its bytes.
func sgKey(t *testing.T) (string, []byte) {
	t.Helper()
	k := make([]byte, 32)
	rand.Read(k)
	return base64.StdEncoding.EncodeToString(k), k
}

// sgKeys are tokensig keys over raw keys, for signatures an issuer holding
// them would make.
func sgKeys(t *testing.T, keys ...[]byte) *tokensig.Keys {
	t.Helper()
	k, err := tokensig.New(keys)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// sgStart runs fenceproxy in front of a recording backend with env added.
func sgStart(t *testing.T, backend *servertest.RecordingBackend, dataDir string, env map[string]string) *servertest.Instance {
	t.Helper()
	full := map[string]string{
		"FENCEPROXY_UPSTREAM": backend.URL(), "FENCEPROXY_DATA_DIR": dataDir,
		"FENCEPROXY_ADMIN_TOKEN": sgAdmin, "FENCEPROXY_ABANDON_GRACE": "0s",
	}
	for k, v := range env {
		full[k] = v
	}
	return servertest.Start(t, full)
}

// sgLease is an acquire or renew answer: the token, the body's signature and
// the header's.
type sgLease struct{ token, sig, headerSig string }

// sgLeaseCall acquires (POST, holder and ttl) or renews (PUT, holder and
// token) the lease name and returns the answer; it fails the test on any
// status but 201/200.
func sgLeaseCall(t *testing.T, in *servertest.Instance, method, name, body string) sgLease {
	t.Helper()
	req, _ := http.NewRequest(method, in.ControlURL()+"/v1/leases/"+name, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Token          string `json:"token"`
		TokenSignature string `json:"token_signature"`
	}
	data, _ := io.ReadAll(resp.Body)
	if want := map[string]int{"POST": 201, "PUT": 200}[method]; resp.StatusCode != want || json.Unmarshal(data, &out) != nil {
		t.Fatalf("%s lease %s: %d %s, want %d", method, name, resp.StatusCode, data, want)
	}
	return sgLease{token: out.Token, sig: out.TokenSignature, headerSig: resp.Header.Get("X-Fencing-Token-Signature")}
}

func sgAcquire(t *testing.T, in *servertest.Instance, name, holder string) sgLease {
	t.Helper()
	return sgLeaseCall(t, in, "POST", name, `{"holder":"`+holder+`","ttl":"1h"}`)
}

// sgAnswer is a proxy answer: status, Fencing-Refused and the problem's reason.
type sgAnswer struct {
	status          int
	refused, reason string
}

// sgPut sends PUT path through the proxy with the given token and signature
// headers (nil: header absent) and an X-Request-Id the backend records.
func sgPut(t *testing.T, in *servertest.Instance, path string, token, sig []string, requestID string) sgAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, in.ProxyURL()+path, strings.NewReader("body of "+requestID))
	if token != nil {
		req.Header["X-Fencing-Token"] = token
	}
	if sig != nil {
		req.Header["X-Fencing-Token-Signature"] = sig
	}
	req.Header.Set("X-Request-Id", requestID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var pb struct{ Reason string }
	json.NewDecoder(resp.Body).Decode(&pb)
	return sgAnswer{resp.StatusCode, resp.Header.Get("Fencing-Refused"), pb.Reason}
}

func one(s string) []string { return []string{s} }

func TestSignedTokensOrderOfChecks(t *testing.T) {
	keyText, key := sgKey(t)
	_, otherKey := sgKey(t)
	backend := servertest.NewRecordingBackend(t)
	in := sgStart(t, backend, t.TempDir(), map[string]string{"FENCEPROXY_TOKEN_KEY": keyText})
	issuer, stranger := sgKeys(t, key), sgKeys(t, otherKey)
	if !strings.Contains(in.Logs.String(), `"signed_tokens":true`) {
		t.Errorf("the start-up log does not say signed_tokens true:\n%s", in.Logs)
	}

	// The lease API issues the token with its signature, in the body and the header.
	a := sgAcquire(t, in, "bkt/obj", "A")
	tok := servertest.MustUint(t, a.token)
	if a.sig == "" || a.sig != a.headerSig || a.sig != issuer.Sign("bkt/obj", tok) {
		t.Fatalf("acquire: signature %q, header %q; want both %q", a.sig, a.headerSig, issuer.Sign("bkt/obj", tok))
	}
	if got := sgPut(t, in, "/bkt/obj", one(a.token), one(a.sig), "signed"); got.status != 200 {
		t.Fatalf("write with token and signature: %+v, want 200", got)
	}
	if !backend.Saw("signed") {
		t.Fatal("the signed write did not reach the backend")
	}
	if r := sgLeaseCall(t, in, "PUT", "bkt/obj", `{"holder":"A","token":"`+a.token+`"}`); r.sig != a.sig || r.headerSig != a.sig {
		t.Errorf("renew: signature %q, header %q; want %q", r.sig, r.headerSig, a.sig)
	}
	other := sgAcquire(t, in, "bkt/other", "A") // a real signature, for another resource

	// A newer grant: a.token is now stale, with a valid signature.
	b := sgAcquire(t, in, "bkt/obj", "A")
	if servertest.MustUint(t, b.token) <= tok {
		t.Fatalf("second acquire: token %s not above %s", b.token, a.token)
	}
	maxTok := strconv.FormatUint(client.MaxToken, 10)
	garbage := strings.Repeat("A", 43)
	cases := []struct {
		name       string
		token, sig []string
		want       sgAnswer
	}{
		{"no token", nil, nil, sgAnswer{428, "missing", "missing"}},
		{"no token, a signature", nil, one(b.sig), sgAnswer{428, "missing", "missing"}},
		{"malformed token", one("abc"), one(b.sig), sgAnswer{400, "malformed", "malformed"}},
		{"leading zero", one("0" + b.token), one(b.sig), sgAnswer{400, "malformed", "malformed"}},
		{"token twice", []string{b.token, b.token}, one(b.sig), sgAnswer{400, "malformed", "malformed"}},
		{"valid token, no signature", one(b.token), nil, sgAnswer{403, "signature", "signature"}},
		{"valid token, empty signature", one(b.token), one(""), sgAnswer{403, "signature", "signature"}},
		{"signature of another resource", one(other.token), one(other.sig), sgAnswer{403, "signature", "signature"}},
		{"current token signed for another resource", one(b.token), one(issuer.Sign("bkt/other", servertest.MustUint(t, b.token))), sgAnswer{403, "signature", "signature"}},
		{"signature of another token", one(b.token), one(a.sig), sgAnswer{403, "signature", "signature"}},
		{"garbage signature", one(b.token), one(garbage), sgAnswer{403, "signature", "signature"}},
		{"signature under an unknown key", one(b.token), one(stranger.Sign("bkt/obj", servertest.MustUint(t, b.token))), sgAnswer{403, "signature", "signature"}},
		{"forged 2^63-1, unsigned", one(maxTok), nil, sgAnswer{403, "signature", "signature"}},
		{"forged 2^63-1, the current token's signature", one(maxTok), one(b.sig), sgAnswer{403, "signature", "signature"}},
		{"stale token, bad signature", one(a.token), one(garbage), sgAnswer{403, "signature", "signature"}},
		{"stale token, signed", one(a.token), one(a.sig), sgAnswer{409, "stale", "stale"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := "refused " + c.name
			if got := sgPut(t, in, "/bkt/obj", c.token, c.sig, id); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
			if backend.Saw(id) {
				t.Error("the refused write reached the backend")
			}
		})
	}
	// Nothing moved the maximum: it is still the second grant's token.
	if got := admFence(t, in, "bkt/obj"); got != b.token {
		t.Fatalf("fence of bkt/obj is %q after the refusals, want %s", got, b.token)
	}
	if got := sgPut(t, in, "/bkt/obj", one(b.token), one(b.sig), "current"); got.status != 200 {
		t.Fatalf("the current holder's signed write: %+v", got)
	}

	// An admin raise needs no signature; the tokens above it come from an
	// issuer holding the key.
	raised := servertest.MustUint(t, b.token) + 5
	if status, body := servertest.Call(t, "PUT", in.ControlURL()+"/v1/fences/bkt/obj", `{"token":"`+strconv.FormatUint(raised, 10)+`"}`, sgAdmin); status != 200 {
		t.Fatalf("admin raise: %d %v", status, body)
	}
	if got := sgPut(t, in, "/bkt/obj", one(b.token), one(b.sig), "below the raise"); got != (sgAnswer{409, "stale", "stale"}) {
		t.Errorf("write below the admin raise: %+v, want 409 stale", got)
	}
	rs := strconv.FormatUint(raised, 10)
	if got := sgPut(t, in, "/bkt/obj", one(rs), one(issuer.Sign("bkt/obj", raised)), "external issuer"); got.status != 200 {
		t.Errorf("write with an external issuer's signature: %+v, want 200", got)
	}
	// Unfenced reads need neither token nor signature.
	if resp, err := http.Get(in.ProxyURL() + "/bkt/obj"); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	var writes []string
	for _, r := range backend.Requests() {
		if r.Method == http.MethodPut {
			writes = append(writes, r.RequestID)
		}
	}
	if got, want := strings.Join(writes, ","), "signed,current,external issuer"; got != want {
		t.Errorf("the backend got writes %s, want %s", got, want)
	}
}

// A write with a Destination needs a signature for each resource it touches.
func TestSignedTokensDestination(t *testing.T) {
	keyText, key := sgKey(t)
	backend := servertest.NewRecordingBackend(t)
	in := sgStart(t, backend, t.TempDir(), map[string]string{"FENCEPROXY_TOKEN_KEY": keyText})
	issuer := sgKeys(t, key)
	move := func(sigs ...string) (int, string) {
		req, _ := http.NewRequest("MOVE", in.ProxyURL()+"/bkt/src", nil)
		req.Header.Set("X-Fencing-Token", "7")
		req.Header.Set("Destination", in.ProxyURL()+"/bkt/dst")
		req.Header["X-Fencing-Token-Signature"] = sigs
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var pb struct{ Resource string }
		json.NewDecoder(resp.Body).Decode(&pb)
		return resp.StatusCode, pb.Resource
	}
	if got, res := move(issuer.Sign("bkt/src", 7)); got != 403 || res != "bkt/dst" {
		t.Errorf("MOVE signed for its source only: %d naming %q, want 403 naming bkt/dst", got, res)
	}
	if got, _ := move(issuer.Sign("bkt/src", 7), issuer.Sign("bkt/dst", 7)); got != 200 {
		t.Errorf("MOVE signed for both resources on two lines: %d, want 200", got)
	}
	// One field line with both values is the same header to HTTP.
	if got, _ := move(issuer.Sign("bkt/src", 7) + ", " + issuer.Sign("bkt/dst", 7)); got != 200 {
		t.Errorf("MOVE signed for both resources on one line: %d, want 200", got)
	}
}

// Key rotation across restarts on one data directory: KEY=old, then
// KEY=new,old (old signatures still verify, new grants are signed with the
// new key), then KEY=new (old signatures are refused).
func TestSignedTokensKeyRotation(t *testing.T) {
	oldText, oldKey := sgKey(t)
	newText, newKey := sgKey(t)
	onlyOld, onlyNew := sgKeys(t, oldKey), sgKeys(t, newKey)
	backend := servertest.NewRecordingBackend(t)
	dir := t.TempDir()

	in := sgStart(t, backend, dir, map[string]string{"FENCEPROXY_TOKEN_KEY": oldText})
	a := sgAcquire(t, in, "bkt/rot", "A")
	tok := servertest.MustUint(t, a.token)
	if onlyOld.Verify("bkt/rot", tok, a.sig) != nil {
		t.Fatal("KEY=old: the acquire's signature is not the old key's")
	}
	if got := sgPut(t, in, "/bkt/rot", one(a.token), one(a.sig), "old-1"); got.status != 200 {
		t.Fatalf("KEY=old: write %+v", got)
	}
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}

	in = sgStart(t, backend, dir, map[string]string{"FENCEPROXY_TOKEN_KEY": newText + "," + oldText})
	if got := sgPut(t, in, "/bkt/rot", one(a.token), one(a.sig), "old-2"); got.status != 200 {
		t.Fatalf("KEY=new,old: write with the old signature %+v, want 200", got)
	}
	renewed := sgLeaseCall(t, in, "PUT", "bkt/rot", `{"holder":"A","token":"`+a.token+`"}`)
	if renewed.sig == a.sig || onlyNew.Verify("bkt/rot", tok, renewed.sig) != nil {
		t.Fatalf("KEY=new,old: renew signs %q, want the new key's signature", renewed.sig)
	}
	c := sgAcquire(t, in, "bkt/rot2", "C")
	ctok := servertest.MustUint(t, c.token)
	if onlyNew.Verify("bkt/rot2", ctok, c.sig) != nil || onlyOld.Verify("bkt/rot2", ctok, c.sig) == nil {
		t.Fatalf("KEY=new,old: a new acquire is not signed with the new key: %q", c.sig)
	}
	if got := sgPut(t, in, "/bkt/rot2", one(c.token), one(c.sig), "new-1"); got.status != 200 {
		t.Fatalf("KEY=new,old: write with the new signature %+v", got)
	}
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}

	in = sgStart(t, backend, dir, map[string]string{"FENCEPROXY_TOKEN_KEY": newText})
	if got := sgPut(t, in, "/bkt/rot", one(a.token), one(a.sig), "old-3"); got != (sgAnswer{403, "signature", "signature"}) {
		t.Errorf("KEY=new: write with the old signature %+v, want 403 signature", got)
	}
	if got := sgPut(t, in, "/bkt/rot", one(a.token), one(renewed.sig), "renewed"); got.status != 200 {
		t.Errorf("KEY=new: write with the renewed signature %+v, want 200", got)
	}
	if got := sgPut(t, in, "/bkt/rot2", one(c.token), one(c.sig), "new-2"); got.status != 200 {
		t.Errorf("KEY=new: write with the new signature %+v, want 200", got)
	}
	if backend.Saw("old-3") {
		t.Error("the refused write reached the backend")
	}
}

// Without FENCEPROXY_TOKEN_KEY nothing is signed and nothing is checked.
func TestSignedTokensOff(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	in := sgStart(t, backend, t.TempDir(), nil)
	if !strings.Contains(in.Logs.String(), `"signed_tokens":false`) {
		t.Errorf("the start-up log does not say signed_tokens false:\n%s", in.Logs)
	}
	a := sgAcquire(t, in, "bkt/obj", "A")
	if a.sig != "" || a.headerSig != "" {
		t.Errorf("acquire without keys carries a signature: %+v", a)
	}
	if got := sgPut(t, in, "/bkt/obj", one(a.token), nil, "unsigned"); got.status != 200 {
		t.Errorf("unsigned write without keys: %+v", got)
	}
}

// Observe mode: a bad signature is logged, counted as observe_signature and
// forwarded, and does not raise the maximum.
func TestSignedTokensObserveMode(t *testing.T) {
	keyText, _ := sgKey(t)
	backend := servertest.NewRecordingBackend(t)
	in := sgStart(t, backend, t.TempDir(), map[string]string{"FENCEPROXY_TOKEN_KEY": keyText, "FENCEPROXY_MODE": "observe"})
	a := sgAcquire(t, in, "bkt/obj", "A")
	maxTok := strconv.FormatUint(client.MaxToken, 10)
	for i, c := range []struct{ token, sig []string }{
		{one(a.token), nil},
		{one(maxTok), one(strings.Repeat("A", 43))},
	} {
		id := "observed-" + strconv.Itoa(i)
		if got := sgPut(t, in, "/bkt/obj", c.token, c.sig, id); got.status != 200 || got.refused != "" {
			t.Errorf("write %d in observe mode: %+v, want 200 forwarded", i, got)
		}
		if !backend.Saw(id) {
			t.Errorf("write %d was not forwarded", i)
		}
	}
	if got := scrape(t, in, `fenceproxy_requests_total{decision="observe_signature"}`); got != 2 {
		t.Errorf("observe_signature = %v, want 2", got)
	}
	if got := admFence(t, in, "bkt/obj"); got != a.token {
		t.Errorf("fence %q after unsigned writes in observe mode, want %s (an unsigned token must not raise it)", got, a.token)
	}
	if !strings.Contains(in.Logs.String(), `"reason":"signature"`) {
		t.Errorf("no observe log line with reason signature:\n%s", in.Logs)
	}
}

// The Go client: Leases returns the signature, WithLease sends it, and a
// refusal for a missing signature is a *RefusedError, not a stale one. The
// S3 middleware sends it too, under SigV4.
func TestSignedTokensClient(t *testing.T) {
	keyText, _ := sgKey(t)
	const bucket = "jobs"
	_, upstream := startS3Gofakes3(t, bucket)
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": upstream, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_TOKEN_KEY": keyText, "FENCEPROXY_ABANDON_GRACE": "0s",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	leases := &client.Leases{BaseURL: in.ControlURL()}
	l, err := leases.Acquire(ctx, bucket+"/report.txt", "A", time.Minute)
	if err != nil || l.TokenSignature == "" {
		t.Fatalf("acquire: %+v, %v; want a signature", l, err)
	}
	hc := &http.Client{Transport: &client.Transport{}}
	if resp := clPut(client.WithLease(ctx, l), t, hc, in.ProxyURL()+"/"+bucket+"/report.txt", "signed"); resp.StatusCode != 200 || client.CheckResponse(resp) != nil {
		t.Fatalf("write with WithLease: %d", resp.StatusCode)
	}
	resp := clPut(client.WithToken(ctx, l.Token), t, hc, in.ProxyURL()+"/"+bucket+"/report.txt", "unsigned")
	err = client.CheckResponse(resp)
	var refused *client.RefusedError
	if !errors.As(err, &refused) || refused.Status != 403 || refused.Reason != client.ReasonSignature || errors.Is(err, client.ErrStale) {
		t.Errorf("write without the signature: %v, want *RefusedError 403 signature", err)
	}

	s3c := clS3Client(in.ProxyURL(), client.S3Fencing(client.ContextToken))
	put := func(ctx context.Context, body string) error {
		_, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("report.txt"), Body: strings.NewReader(body)})
		return err
	}
	if err := put(client.WithLease(ctx, l), "from S3, signed"); err != nil {
		t.Fatalf("S3 PutObject with WithLease: %v", err)
	}
	err = put(client.WithToken(ctx, l.Token), "from S3, unsigned")
	if !errors.As(err, &refused) || refused.Reason != client.ReasonSignature {
		t.Errorf("S3 PutObject without the signature: %v, want *RefusedError signature", err)
	}
	if got := s3GetObject(ctx, t, s3c, bucket, "report.txt"); got != "from S3, signed" {
		t.Errorf("object holds %q", got)
	}
}

// The example worker runs its lease loop in signed-token mode.
func TestSignedTokensWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs examples/worker; skipped with -short")
	}
	bin := wkBuild(t, t.TempDir())
	keyText, _ := sgKey(t)
	backend := servertest.NewRecordingBackend(t)
	in := sgStart(t, backend, t.TempDir(), map[string]string{"FENCEPROXY_TOKEN_KEY": keyText, "FENCEPROXY_LEASE_MIN_TTL": "50ms"})
	// Renews every TTL/3, so it re-reads the signature twice while writing.
	w := wkStart(t, bin, in, "A", "-ttl", "3s", "-writes", "8", "-interval", "300ms")
	if code := wkExit(t, w, "A", 30*time.Second); code != 0 {
		t.Fatalf("worker: exit %d, want 0\nstderr:\n%s", code, w.Stderr)
	}
	if !strings.Contains(w.Stderr.String(), `"signed":true`) {
		t.Errorf("the worker did not get a signature with its lease\nstderr:\n%s", w.Stderr)
	}
	if n := wkWrites(backend, "A"); n != 8 {
		t.Errorf("the backend got %d writes from the worker, want 8\nstderr:\n%s", n, w.Stderr)
	}
}

// The signed-mode answers match api/openapi.yaml.
func TestOpenAPIConformanceSigned(t *testing.T) {
	s := loadOASSpec(t)
	keyText, key := sgKey(t)
	backend := newOASBackend()
	in := startOASProxy(t, backend, map[string]string{"FENCEPROXY_TOKEN_KEY": keyText})
	issuer := sgKeys(t, key)
	C, P := oasControl, oasProxy
	hdr := func(tok, sig string) http.Header {
		h := http.Header{"X-Fencing-Token": {tok}}
		if sig != "" {
			h.Set("X-Fencing-Token-Signature", sig)
		}
		return h
	}
	resp, _ := s.check(t, in, oasCase{name: "acquire", listener: C, method: "POST", target: "/v1/leases/jobs/a",
		body: `{"holder":"A","ttl":"10s"}`, op: "acquireLease", status: 201, req: oasReqOK})
	if resp.Header.Get("X-Fencing-Token-Signature") != issuer.Sign("jobs/a", 1) {
		t.Fatalf("acquire: signature header %q", resp.Header.Get("X-Fencing-Token-Signature"))
	}
	oasRun(t, s, in, backend, []oasCase{
		{name: "renew", listener: C, method: "PUT", target: "/v1/leases/jobs/a", body: `{"holder":"A","token":"1"}`,
			op: "renewLease", status: 200, req: oasReqOK},
		{name: "read", listener: C, method: "GET", target: "/v1/leases/jobs/a", op: "getLease", status: 200, req: oasReqOK},
		{name: "signed write", listener: P, method: "PUT", target: "/jobs/a", header: hdr("1", issuer.Sign("jobs/a", 1)), body: "x",
			op: "proxyPut", status: 200, req: oasReqOK},
		{name: "write without a signature", listener: P, method: "PUT", target: "/jobs/a", header: hdr("1", ""), body: "x",
			op: "proxyPut", status: 403, req: oasReqOK, refused: "signature"},
		{name: "write with a garbage signature", listener: P, method: "DELETE", target: "/jobs/a", header: hdr("1", "not-a-signature"),
			op: "proxyDelete", status: 403, req: oasReqBad, refused: "signature"},
		{name: "write with another token's signature", listener: P, method: "PATCH", target: "/jobs/a", header: hdr("2", issuer.Sign("jobs/a", 1)),
			op: "proxyPatch", status: 403, req: oasReqOK, refused: "signature"},
		{name: "signed stale write", listener: P, method: "POST", target: "/jobs/a", header: hdr("0", issuer.Sign("jobs/a", 0)),
			op: "proxyPost", status: 409, req: oasReqOK, refused: "stale"},
	})
}

// TestSignedTokenInPresignedQuery: in S3 mode a presigned URL carries the
// token and its signature as query parameters; a wrong signature there is
// refused as in the header.
func TestSignedTokenInPresignedQuery(t *testing.T) {
	keyText, key := sgKey(t)
	backend := servertest.NewRecordingBackend(t)
	in := sgStart(t, backend, t.TempDir(), map[string]string{"FENCEPROXY_TOKEN_KEY": keyText,
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1"})
	issuer := sgKeys(t, key)
	client := servertest.NewClient(t)
	put := func(query, body string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, in.ProxyURL()+"/bkt/presigned?"+query, strings.NewReader(body))
		req.Header.Set("X-Request-Id", body)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	sig := url.QueryEscape(issuer.Sign("bkt/presigned", 7))
	if st := put("X-Fencing-Token=7&X-Fencing-Token-Signature="+sig, "q-signed"); st != 200 || !backend.Saw("q-signed") {
		t.Errorf("token and signature in the query: %d, want 200 and forwarded", st)
	}
	other := url.QueryEscape(issuer.Sign("bkt/other", 8))
	if st := put("X-Fencing-Token=8&X-Fencing-Token-Signature="+other, "q-wrong"); st != 403 || backend.Saw("q-wrong") {
		t.Errorf("a signature for another resource in the query: %d, want 403 and nothing forwarded", st)
	}
	if st := put("X-Fencing-Token=8", "q-unsigned"); st != 403 || backend.Saw("q-unsigned") {
		t.Errorf("no signature: %d, want 403 and nothing forwarded", st)
	}
}
