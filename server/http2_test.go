package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// TestHTTP2PriorKnowledge: HTTP/2 with prior knowledge (the PRI * HTTP/2.0
// preface) on the plain proxy listener, which speaks no h2c. It is answered
// 400 bad_resource with Connection: close, nothing reaches the backend, and
// each connection is logged once as what it is, not as a refused write with
// method PRI.
func TestHTTP2PriorKnowledge(t *testing.T) {
	backend := servertest.NewRecordingBackend(t)
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": backend.URL(), "FENCEPROXY_DATA_DIR": t.TempDir(),
	})

	// The preface as raw bytes, followed by an empty SETTINGS frame.
	conn, br := catDial(t, in.Proxy)
	preface := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"
	resp, body, err := catExchange(conn, br, preface, "PRI")
	if err != nil {
		t.Fatalf("no answer to the preface: %v", err)
	}
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Fencing-Refused") != "bad_resource" || !resp.Close {
		t.Fatalf("preface: %d, Fencing-Refused %q, close %v; want 400 bad_resource and Connection: close", resp.StatusCode,
			resp.Header.Get("Fencing-Refused"), resp.Close)
	}
	if !strings.Contains(string(body), "HTTP/2 with prior knowledge") {
		t.Errorf("problem %s does not say what was refused", body)
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Errorf("after the answer: %q, %v; want the connection closed", rest, err)
	}

	// Go's own client with prior knowledge: it fails, it never succeeds.
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols}
	t.Cleanup(tr.CloseIdleConnections)
	req, _ := http.NewRequest(http.MethodPut, in.ProxyURL()+"/bkt/h2c", strings.NewReader("x"))
	req.Header.Set("X-Fencing-Token", "7")
	if resp, err := (&http.Client{Transport: tr}).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("h2c client got %d; want an error", resp.StatusCode)
	} else {
		t.Logf("h2c client: %v", err)
	}

	if got := backend.Requests(); len(got) != 0 {
		t.Errorf("the backend got %+v", got)
	}
	var prior, other []string
	for line := range strings.SplitSeq(in.Logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch msg, _ := rec["msg"].(string); {
		case strings.HasPrefix(msg, "HTTP/2 prior knowledge"):
			prior = append(prior, line)
		case rec["method"] == "PRI" || msg == "write refused":
			other = append(other, line)
		}
	}
	if len(prior) != 2 || len(other) != 0 {
		t.Fatalf("log: %d prior-knowledge lines (want 2, one per connection): %q; other lines about PRI: %q", len(prior), prior, other)
	}
}
