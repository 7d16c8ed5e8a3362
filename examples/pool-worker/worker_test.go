package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/client"
)

// A write the proxy refuses with anything but 409 is logged, not only
// returned; a released shard's work error shows in its event's line.
func TestWriteFailuresLogged(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "NoSuchBucket", http.StatusNotFound)
	}))
	defer srv.Close()
	var buf bytes.Buffer
	w := &worker{proxy: srv.URL, holder: "w1", log: slog.New(slog.NewJSONHandler(&buf, nil))}
	s := client.Shard{Pool: "jobs", Shard: "2", Lease: client.Lease{Name: "jobs/2", Token: 1}}
	if err := w.write(context.Background(), s, "x"); err == nil {
		t.Fatal("a 404 write succeeded")
	}
	if out := buf.String(); !strings.Contains(out, `"msg":"write failed"`) || !strings.Contains(out, `"status":404`) {
		t.Errorf("log after a 404 write: %s", out)
	}
	buf.Reset()
	w.event(client.PoolEvent{Kind: "released", Shard: s, WorkErr: errors.New("write: status 404")})
	if out := buf.String(); !strings.Contains(out, `"work_error":"write: status 404"`) {
		t.Errorf("released event's log: %s", out)
	}
}
