package proxy_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/proxy"
	"github.com/fenceproxy/fenceproxy/wire"
)

// recordChan hands each JSON log record written to it to a channel (slog's
// handlers write a record in one Write).
type recordChan chan map[string]any

func (c recordChan) Write(p []byte) (int, error) {
	var rec map[string]any
	if err := json.Unmarshal(p, &rec); err != nil {
		return 0, err
	}
	c <- rec
	return len(p), nil
}

// next returns the next access record, failing the test after 10s.
func (c recordChan) next(t *testing.T) map[string]any {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case rec := <-c:
			if rec["log"] == "access" {
				return rec
			}
		case <-timeout:
			t.Fatal("no access record within 10s")
		}
	}
}

// Cluster mode: a write whose shard another replica owns goes to it whole
// (Ownership.Forward); its access line says to_owner, with the owner's
// status and refusal, and the body bytes that went to the owner.
func TestAccessLogToOwner(t *testing.T) {
	owner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Fencing-Token") == "1" { // the owner refuses without reading the body
			w.Header().Set(wire.HeaderRefused, wire.ReasonStale)
			w.WriteHeader(http.StatusConflict)
			return
		}
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created")
	})
	records := make(recordChan, 64)
	opts := fwdOptions()
	opts.AccessLog = true
	opts.Logger = slog.New(slog.NewJSONHandler(records, nil))
	opts.Owner = func(*http.Request, []string) (proxy.Ownership, error) { return proxy.Ownership{Forward: owner}, nil }
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the backend got %s %s; every write goes to the owner", r.Method, r.URL)
	}))
	t.Cleanup(backend.Close)
	_, srv := newFwdProxy(t, backend.URL, opts)
	client := newFwdClient(t)

	for _, tc := range []struct {
		token  string
		status int
		want   map[string]any
	}{
		{"2", http.StatusCreated, map[string]any{"decision": "to_owner", "status": 201.0, "bytes_in": 9.0, "bytes_out": 7.0,
			"resource": "bkt/obj", "token": "2"}},
		{"1", http.StatusConflict, map[string]any{"decision": "to_owner", "reason": "stale", "status": 409.0, "bytes_in": 0.0,
			"resource": "bkt/obj", "token": "1"}},
	} {
		resp, err := client.Do(fwdRequest(t, http.MethodPut, srv.URL+"/bkt/obj", "some data", fwdHeader{"X-Fencing-Token", tc.token}))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Fatalf("token %s: %d, want %d", tc.token, resp.StatusCode, tc.status)
		}
		rec := records.next(t)
		for k, v := range tc.want {
			if rec[k] != v {
				t.Errorf("token %s: %s = %#v, want %#v\n%v", tc.token, k, rec[k], v, rec)
			}
		}
		if _, ok := rec["upstream_status"]; ok {
			t.Errorf("token %s: upstream_status %v, but the backend was never asked", tc.token, rec["upstream_status"])
		}
	}
}

// Off, nothing is logged of a request (and the logger is not even asked).
func TestAccessLogOff(t *testing.T) {
	records := make(recordChan, 64)
	opts := fwdOptions()
	opts.Logger = slog.New(slog.NewJSONHandler(records, &slog.HandlerOptions{Level: slog.LevelDebug}))
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "x") }))
	t.Cleanup(backend.Close)
	_, srv := newFwdProxy(t, backend.URL, opts)
	for range 3 {
		resp, err := newFwdClient(t).Get(srv.URL + "/bkt/obj")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	srv.Close() // waits for the handlers: every record is written
	close(records)
	for rec := range records {
		if rec["log"] == "access" || rec["msg"] == "access" {
			t.Errorf("access record with AccessLog off: %v", rec)
		}
	}
}

// A path, host or method longer than its bound is cut in the line, at a
// UTF-8 boundary, and the path's length given.
func TestAccessLogBounds(t *testing.T) {
	records := make(recordChan, 64)
	opts := fwdOptions()
	opts.AccessLog = true
	opts.Logger = slog.New(slog.NewJSONHandler(records, nil))
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(backend.Close)
	_, srv := newFwdProxy(t, backend.URL, opts)
	path := "/bkt/" + strings.Repeat("é", 600) // 1,205 bytes raw: é is 2
	method := strings.Repeat("M", 40)
	resp, _ := fwdRoundTrip(t, srv, method, fwdRawRequest(method, path, "example.com", nil, ""))
	if resp.StatusCode != http.StatusPreconditionRequired {
		t.Fatalf("answer %d, want 428 (no token)", resp.StatusCode)
	}
	rec := records.next(t)
	if p, _ := rec["path"].(string); p != path[:1023] || len(p) != 1023 {
		t.Errorf("path %q (%d bytes), want the first 1,023 bytes: 1,024 would cut an é", p, len(p))
	}
	if rec["path_bytes"] != float64(len(path)) {
		t.Errorf("path_bytes = %v, want %d", rec["path_bytes"], len(path))
	}
	if rec["method"] != method[:32] {
		t.Errorf("method = %v, want its first 32 bytes", rec["method"])
	}
	if rec["decision"] != "refused" || rec["reason"] != wire.ReasonMissing || rec["status"] != 428.0 {
		t.Errorf("decision %v, reason %v, status %v; want refused, missing, 428", rec["decision"], rec["reason"], rec["status"])
	}
}
