package servertest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// BackendRequest is one request as the backend received it.
type BackendRequest struct {
	Method, Path, Token, RequestID, Body string
}

// RecordingBackend is an httptest backend that records every request and
// answers 200 once it has read the body.
type RecordingBackend struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []BackendRequest
	sig  Signal // notified after each request is recorded
}

// NewRecordingBackend starts a RecordingBackend; cleanup stops it.
func NewRecordingBackend(t testing.TB) *RecordingBackend {
	t.Helper()
	b := &RecordingBackend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.reqs = append(b.reqs, BackendRequest{
			Method: r.Method, Path: r.URL.EscapedPath(), Token: r.Header.Get("X-Fencing-Token"),
			RequestID: r.Header.Get("X-Request-Id"), Body: string(body),
		})
		b.mu.Unlock()
		b.sig.Notify()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// Wait waits until cond holds, checking it as each request is recorded, for
// at most d; it reports whether cond holds.
func (b *RecordingBackend) Wait(d time.Duration, cond func() bool) bool {
	return b.sig.Wait(d, cond)
}

// URL is the backend's base URL (http://127.0.0.1:port).
func (b *RecordingBackend) URL() string { return b.srv.URL }

// Requests returns the requests received so far, in arrival order.
func (b *RecordingBackend) Requests() []BackendRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]BackendRequest(nil), b.reqs...)
}

// Saw reports whether the backend received the request with this X-Request-Id.
func (b *RecordingBackend) Saw(requestID string) bool {
	for _, r := range b.Requests() {
		if r.RequestID == requestID {
			return true
		}
	}
	return false
}

// CheckOrder asserts the invariant of the brief: per resource (path), the
// backend received writes in non-decreasing token order.
func (b *RecordingBackend) CheckOrder(t testing.TB) {
	t.Helper()
	last := map[string]uint64{}
	bad := 0
	for i, r := range b.Requests() {
		if bad >= 5 {
			t.Error("... (more out-of-order writes omitted)")
			return
		}
		tok, err := strconv.ParseUint(r.Token, 10, 64)
		if err != nil {
			t.Errorf("backend request %d (%s %s) has token %q", i, r.Method, r.Path, r.Token)
			continue
		}
		if tok < last[r.Path] {
			bad++
			t.Errorf("backend received token %d on %s after %d", tok, r.Path, last[r.Path])
		}
		last[r.Path] = max(last[r.Path], tok)
	}
}

// NewClient is an HTTP client with its own transport (no proxy from the
// environment, a 20s timeout); cleanup closes its idle connections.
func NewClient(t testing.TB) *http.Client {
	t.Helper()
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// DoPut sends PUT base+path with the fencing token and an X-Request-Id that
// the backend records; it returns the response with its body read.
func DoPut(client *http.Client, base, path, token, requestID string) (*http.Response, string, error) {
	req, err := http.NewRequest(http.MethodPut, base+path, strings.NewReader("body of "+requestID))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("X-Fencing-Token", token)
	req.Header.Set("X-Request-Id", requestID)
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

// PutToken is DoPut that fails the test on a transport error; it returns the
// status and the response headers.
func PutToken(t testing.TB, client *http.Client, base, path, token, requestID string) (int, http.Header) {
	t.Helper()
	resp, _, err := DoPut(client, base, path, token, requestID)
	if err != nil {
		t.Fatalf("PUT %s%s token %s: %v", base, path, token, err)
	}
	return resp.StatusCode, resp.Header
}

// AssertStale sends a PUT with a stale token and asserts the proxy's own 409
// naming current, and that the backend never received it.
func AssertStale(t testing.TB, client *http.Client, backend *RecordingBackend, base, path string, token, current uint64, requestID string) {
	t.Helper()
	resp, body, err := DoPut(client, base, path, strconv.FormatUint(token, 10), requestID)
	if err != nil {
		t.Fatalf("PUT %s token %d: %v", path, token, err)
	}
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("PUT %s with stale token %d: status %d, want 409\n%s", path, token, resp.StatusCode, body)
	}
	if got := resp.Header.Get("Fencing-Current-Token"); got != strconv.FormatUint(current, 10) {
		t.Errorf("PUT %s with stale token %d: Fencing-Current-Token %q, want %d", path, token, got, current)
	}
	if got := resp.Header.Get("Fencing-Refused"); got != "stale" {
		t.Errorf("PUT %s with stale token %d: Fencing-Refused %q, want stale", path, token, got)
	}
	if backend.Saw(requestID) {
		t.Errorf("the backend received the stale write %s (token %d)", requestID, token)
	}
}

// FenceMax reads GET /v1/fences/<key> on the control listener (host:port):
// the persisted maximum, 0 when the resource is unknown (404).
func FenceMax(t testing.TB, client *http.Client, control, key string) uint64 {
	t.Helper()
	resp, err := client.Get("http://" + control + "/v1/fences/" + key)
	if err != nil {
		t.Fatalf("GET /v1/fences/%s: %v", key, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return 0
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/fences/%s: status %d\n%s", key, resp.StatusCode, body)
	}
	var f struct{ Resource, Token string }
	if err := json.Unmarshal(body, &f); err != nil {
		t.Fatalf("GET /v1/fences/%s: %v\n%s", key, err, body)
	}
	if f.Resource != key {
		t.Errorf("GET /v1/fences/%s: resource %q", key, f.Resource)
	}
	m, err := strconv.ParseUint(f.Token, 10, 64)
	if err != nil {
		t.Fatalf("GET /v1/fences/%s: token %q is not a decimal string: %s", key, f.Token, body)
	}
	return m
}

// Call sends method to url with a JSON body and bearer (both optional) and
// returns the status and decoded JSON body.
func Call(t testing.TB, method, url, body, bearer string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// MustUint parses a decimal token, failing the test if it is not one.
func MustUint(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("token %q: %v", s, err)
	}
	return v
}
