package control

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeStore is a hand-written Store.
type fakeStore struct {
	mu      sync.Mutex
	max     map[string]uint64
	readErr error
	closed  bool
}

func (s *fakeStore) Max(resource string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readErr != nil {
		return 0, s.readErr
	}
	return s.max[resource], nil
}

func (s *fakeStore) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("closed")
	}
	return nil
}

func TestControlAPI(t *testing.T) {
	store := &fakeStore{max: map[string]uint64{
		"bkt/part-0/objA": 42, "bkt/a b": 7, "solo": 9223372036854775807,
	}}
	srv := httptest.NewServer(Handler(store, slog.New(slog.DiscardHandler), Options{}))
	defer srv.Close()

	cases := []struct {
		name, method, path string
		status             int
		contentType        string
		body               string // substring
	}{
		{"healthz", "GET", "/healthz", 200, "application/json", `"status":"ok"`},
		{"readyz", "GET", "/readyz", 200, "application/json", `"status":"ready"`},
		{"fence with slashes", "GET", "/v1/fences/bkt/part-0/objA", 200, "application/json", `{"resource":"bkt/part-0/objA","token":"42"}`},
		{"fence by encoded key", "GET", "/v1/fences/bkt/part-0/obj%41", 200, "application/json", `"resource":"bkt/part-0/objA"`},
		{"fence with space", "GET", "/v1/fences/bkt/a%20b", 200, "application/json", `"token":"7"`},
		{"token is a string, full precision", "GET", "/v1/fences/solo", 200, "application/json", `"token":"9223372036854775807"`},
		{"unknown resource", "GET", "/v1/fences/bkt/nope", 404, "application/problem+json", `"status":404`},
		{"prefix of a resource is not one", "GET", "/v1/fences/bkt", 404, "application/problem+json", `"status":404`},
		{"empty key", "GET", "/v1/fences/", 404, "application/problem+json", `"status":404`},
		{"key too long", "GET", "/v1/fences/" + strings.Repeat("k", 4097), 404, "application/problem+json", `"status":404`},
		{"unknown endpoint", "GET", "/v2/whatever", 404, "application/problem+json", `"status":404`},
		{"fences are read-only here", "PUT", "/v1/fences/solo", 405, "application/problem+json", `"status":405`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != tc.contentType || !strings.Contains(string(body), tc.body) {
				t.Fatalf("%s %s: %d %q %s; want %d %q containing %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.status, tc.contentType, tc.body)
			}
			if !json.Valid(body) {
				t.Fatalf("body is not JSON: %s", body)
			}
		})
	}
}

func TestControlStoreTrouble(t *testing.T) {
	store := &fakeStore{max: map[string]uint64{"r": 1}}
	srv := httptest.NewServer(Handler(store, slog.New(slog.DiscardHandler), Options{}))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	store.mu.Lock()
	store.readErr = errors.New("badger: secret internal detail")
	store.closed = true
	store.mu.Unlock()
	if code, body := get("/v1/fences/r"); code != 503 || strings.Contains(body, "secret") {
		t.Fatalf("fence on store error: %d %s", code, body)
	}
	if code, _ := get("/readyz"); code != 503 {
		t.Fatalf("readyz on a closed store: %d", code)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("healthz: %d (liveness does not depend on the store)", code)
	}
}
