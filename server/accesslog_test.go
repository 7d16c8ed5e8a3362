package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// accessBackend answers GET with "hello world", PUT with 201 "created"
// (its body read whole), any other method with 204; a GET of /slow is
// answered only once its request is cancelled, after signalling slow.
func accessBackend(t *testing.T, slow chan<- struct{}) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch {
		case r.URL.Path == "/slow":
			slow <- struct{}{}
			<-r.Context().Done()
		case r.Method == http.MethodGet:
			io.WriteString(w, "hello world")
		case r.Method == http.MethodPut:
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "created")
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// sendThrough sends method path through the proxy with body and token (none when
// ""), and returns the status and the number of body bytes read.
func sendThrough(t *testing.T, in *servertest.Instance, method, path, body, token string) (int, int) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, in.ProxyURL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Fencing-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, len(got)
}

// accessLines returns the access log lines in logs, decoded.
func accessLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line is not JSON: %v\n%s", err, sc.Text())
		}
		if line["log"] == "access" || line["msg"] == "access" {
			lines = append(lines, line)
		}
	}
	return lines
}

// waitAnswered waits until fenceproxy_http_requests_total holds n requests
// in all. The proxy writes a request's access line before it counts it, so
// every line of those n is in the log then.
func waitAnswered(t *testing.T, in *servertest.Instance, n float64) {
	t.Helper()
	// The count moves after the answer reached the client: no event to wait on.
	servertest.Eventually(t, 10*time.Second, "the proxy counted every request", func() bool {
		return answeredTotal(t, in) >= n
	})
	if got := answeredTotal(t, in); got != n {
		t.Fatalf("fenceproxy_http_requests_total sums to %v, want %v", got, n)
	}
}

// answeredTotal sums every series of fenceproxy_http_requests_total.
func answeredTotal(t *testing.T, in *servertest.Instance) float64 {
	t.Helper()
	resp, err := http.Get(in.ControlURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, "fenceproxy_http_requests_total{"); ok {
			_, v, _ := strings.Cut(rest, "} ")
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			sum += n
		}
	}
	return sum
}

// With FENCEPROXY_ACCESS_LOG=true, an admitted write, a stale write and an
// unfenced read each give exactly one access line, with what was asked,
// what the proxy decided and what it sent.
func TestAccessLog(t *testing.T) {
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": accessBackend(t, nil), "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_ACCESS_LOG": "true"})

	status, admittedOut := sendThrough(t, in, http.MethodPut, "/bkt/a", "data", "6")
	if status != http.StatusCreated {
		t.Fatalf("PUT token 6: %d, want 201", status)
	}
	status, staleOut := sendThrough(t, in, http.MethodPut, "/bkt/a", "data", "5")
	if status != http.StatusConflict {
		t.Fatalf("PUT token 5: %d, want 409", status)
	}
	status, readOut := sendThrough(t, in, http.MethodGet, "/bkt/a", "", "")
	if status != http.StatusOK {
		t.Fatalf("GET: %d, want 200", status)
	}
	long := "/bkt/" + strings.Repeat("k", 2000)
	if status, _ := sendThrough(t, in, http.MethodGet, long, "", ""); status != http.StatusOK {
		t.Fatalf("GET of a long path: %d, want 200", status)
	}
	waitAnswered(t, in, 4)

	lines := accessLines(t, in.Logs.String())
	if len(lines) != 4 {
		t.Fatalf("%d access lines, want 4:\n%s", len(lines), in.Logs)
	}
	want := []map[string]any{
		{"method": "PUT", "path": "/bkt/a", "resource": "bkt/a", "token": "6", "decision": "admitted", "status": 201.0,
			"upstream_status": 201.0, "bytes_in": 4.0, "bytes_out": float64(admittedOut)},
		// Nothing of a refused body is forwarded.
		{"method": "PUT", "path": "/bkt/a", "resource": "bkt/a", "token": "5", "decision": "refused", "reason": "stale",
			"status": 409.0, "bytes_in": 0.0, "bytes_out": float64(staleOut)},
		{"method": "GET", "path": "/bkt/a", "decision": "unfenced", "status": 200.0, "upstream_status": 200.0,
			"bytes_in": 0.0, "bytes_out": float64(readOut)},
		{"method": "GET", "path": long[:1024], "path_bytes": float64(len(long)), "decision": "unfenced", "status": 200.0},
	}
	for i, line := range lines {
		for k, v := range want[i] {
			if line[k] != v {
				t.Errorf("line %d: %s = %#v, want %#v\n%v", i, k, line[k], v, line)
			}
		}
		if line["level"] != "INFO" || line["msg"] != "access" || line["log"] != "access" {
			t.Errorf("line %d: level %v, msg %v, log %v; want INFO, access, access", i, line["level"], line["msg"], line["log"])
		}
		if d, ok := line["duration_ms"].(float64); !ok || d < 0 {
			t.Errorf("line %d: duration_ms = %#v", i, line["duration_ms"])
		}
		if r, _ := line["remote"].(string); !strings.HasPrefix(r, "127.0.0.1:") {
			t.Errorf("line %d: remote = %#v", i, line["remote"])
		}
		if _, ok := line["time"]; !ok {
			t.Errorf("line %d has no time", i)
		}
		if _, ok := line["aborted"]; ok {
			t.Errorf("line %d: aborted, but the exchange ended normally", i)
		}
	}
	for _, i := range []int{1} { // refused: the backend never answered
		if _, ok := lines[i]["upstream_status"]; ok {
			t.Errorf("line %d: upstream_status %v on a refusal", i, lines[i]["upstream_status"])
		}
	}
	for _, i := range []int{2, 3} { // unfenced: no resource, no token
		if _, ok := lines[i]["resource"]; ok {
			t.Errorf("line %d: resource %v on an unfenced read", i, lines[i]["resource"])
		}
	}
}

// Off by default: no access line, however many requests.
func TestAccessLogOffByDefault(t *testing.T) {
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": accessBackend(t, nil), "FENCEPROXY_DATA_DIR": t.TempDir()})
	sendThrough(t, in, http.MethodPut, "/bkt/a", "data", "6")
	sendThrough(t, in, http.MethodPut, "/bkt/a", "data", "5")
	sendThrough(t, in, http.MethodGet, "/bkt/a", "", "")
	waitAnswered(t, in, 3)
	if lines := accessLines(t, in.Logs.String()); len(lines) != 0 {
		t.Fatalf("access lines with FENCEPROXY_ACCESS_LOG unset: %v", lines)
	}
	if !in.Logs.Contains(`"access_log":false`) {
		t.Errorf("the start-up line does not say access_log false:\n%s", in.Logs)
	}
}

// fenceproxy_http_requests_total and its duration histogram count each
// request once, by method and status class; a method outside the known set
// (FOO, a lower-case get) is "other", so clients cannot add series.
func TestRequestMetricsByMethodAndCode(t *testing.T) {
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": accessBackend(t, nil), "FENCEPROXY_DATA_DIR": t.TempDir()})
	for _, tc := range []struct {
		method, path, body, token string
		status                    int
	}{
		{"PUT", "/bkt/a", "data", "6", 201},
		{"PUT", "/bkt/a", "data", "6", 201},
		{"PUT", "/bkt/a", "data", "5", 409},
		{"PUT", "/bkt/a", "data", "", 428},
		{"GET", "/bkt/a", "", "", 200},
		{"HEAD", "/bkt/a", "", "", 204},
		{"DELETE", "/bkt/b", "", "1", 204},
		{"FOO", "/bkt/c", "", "1", 204}, // a fenced write, as every method not unfenced
		{"get", "/bkt/d", "", "1", 204},
		{"FOO", "/bkt/c", "", "0", 409},
	} {
		if status, _ := sendThrough(t, in, tc.method, tc.path, tc.body, tc.token); status != tc.status {
			t.Fatalf("%s %s token %q: %d, want %d", tc.method, tc.path, tc.token, status, tc.status)
		}
	}
	waitAnswered(t, in, 10)
	for series, want := range map[string]float64{
		`fenceproxy_http_requests_total{code="2xx",method="PUT"}`:                   2,
		`fenceproxy_http_requests_total{code="4xx",method="PUT"}`:                   2,
		`fenceproxy_http_requests_total{code="2xx",method="GET"}`:                   1,
		`fenceproxy_http_requests_total{code="2xx",method="HEAD"}`:                  1,
		`fenceproxy_http_requests_total{code="2xx",method="DELETE"}`:                1,
		`fenceproxy_http_requests_total{code="2xx",method="other"}`:                 2,
		`fenceproxy_http_requests_total{code="4xx",method="other"}`:                 1,
		`fenceproxy_http_requests_total{code="5xx",method="PUT"}`:                   0, // created up front
		`fenceproxy_http_requests_total{code="2xx",method="MKCOL"}`:                 0,
		`fenceproxy_http_request_duration_seconds_count{code="2xx",method="PUT"}`:   2,
		`fenceproxy_http_request_duration_seconds_count{code="4xx",method="PUT"}`:   2,
		`fenceproxy_http_request_duration_seconds_count{code="2xx",method="other"}`: 2,
		`fenceproxy_http_request_duration_seconds_count{code="2xx",method="POST"}`:  -1, // no request yet: no series
		`fenceproxy_requests_total{decision="forwarded"}`:                           5,
	} {
		if got := scrape(t, in, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	resp, err := http.Get(in.ControlURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	exposed, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, bad := range []string{`method="FOO"`, `method="get"`} {
		if strings.Contains(string(exposed), bad) {
			t.Errorf("/metrics has a series with %s", bad)
		}
	}
}

// A client gone before the backend's answer: the handler aborts the
// exchange, and it is still logged and counted once, as 499.
func TestAccessLogAborted(t *testing.T) {
	slow := make(chan struct{}, 1)
	// net/http's Transport: its exchange ends with the client's context
	// (the fast path's waits for the answer's headers up to the response timeout).
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": accessBackend(t, slow), "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_ACCESS_LOG": "true", "FENCEPROXY_UPSTREAM_FAST_PATH": "false"})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.ProxyURL()+"/slow", nil)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-slow // the backend has the request
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v, want context.Canceled", err)
	}
	waitAnswered(t, in, 1)
	if got := scrape(t, in, `fenceproxy_http_requests_total{code="4xx",method="GET"}`); got != 1 {
		t.Errorf(`{code="4xx",method="GET"} = %v, want 1`, got)
	}
	lines := accessLines(t, in.Logs.String())
	if len(lines) != 1 {
		t.Fatalf("%d access lines, want 1:\n%s", len(lines), in.Logs)
	}
	for k, v := range map[string]any{"method": "GET", "path": "/slow", "decision": "unfenced", "status": 499.0, "aborted": true} {
		if lines[0][k] != v {
			t.Errorf("%s = %#v, want %#v\n%v", k, lines[0][k], v, lines[0])
		}
	}
	if _, ok := lines[0]["upstream_status"]; ok {
		t.Errorf("upstream_status %v, but the backend never answered", lines[0]["upstream_status"])
	}
}
