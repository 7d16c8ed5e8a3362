package server_test

import (
	"crypto/tls"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// TLS on both listeners, and an HTTPS upstream trusted through UPSTREAM_CA_FILE.
func TestTLSListenersAndUpstream(t *testing.T) {
	backend := &leaseBackend{}
	upstream := httptest.NewTLSServer(backend)
	defer upstream.Close()
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: upstream.Certificate().Raw}), 0o600)
	certFile, keyFile, pool := servertest.TLSFiles(t)

	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": upstream.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_UPSTREAM_CA_FILE": caFile,
		"FENCEPROXY_TLS_CERT_FILE":    certFile, "FENCEPROXY_TLS_KEY_FILE": keyFile,
		"FENCEPROXY_CONTROL_TLS_CERT_FILE": certFile, "FENCEPROXY_CONTROL_TLS_KEY_FILE": keyFile,
	})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest(http.MethodPut, "https://"+in.Proxy+"/bkt/obj", strings.NewReader("x"))
	req.Header.Set("X-Fencing-Token", "7")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || backend.got() != "7" {
		t.Fatalf("PUT over TLS to an HTTPS upstream: %d, backend got %q", resp.StatusCode, backend.got())
	}
	resp, err = client.Get("https://" + in.Control + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("control over TLS: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, err := http.Get("http://" + in.Proxy + "/bkt/obj"); err == nil {
		// Go answers plain HTTP on a TLS port with a 400; either way no write happens.
		t.Log("plain HTTP to the TLS listener got an answer (net/http's 400)")
	}
}

// Without the CA file the upstream's certificate is not trusted: 502, nothing applied.
func TestUpstreamTLSUntrusted(t *testing.T) {
	backend := &leaseBackend{}
	upstream := httptest.NewTLSServer(backend)
	defer upstream.Close()
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": upstream.URL, "FENCEPROXY_DATA_DIR": t.TempDir()})
	if got := metricsPut(t, in, "/bkt/obj", "1"); got != 502 || backend.got() != "" {
		t.Fatalf("untrusted upstream: %d, backend got %q", got, backend.got())
	}
}
