package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tlsFiles writes a self-signed certificate for 127.0.0.1 and its key as PEM
// files and returns their paths and a pool that trusts the certificate.
func tlsFiles(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fenceproxy test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TLS on both listeners, and an HTTPS upstream trusted through UPSTREAM_CA_FILE.
func TestTLSListenersAndUpstream(t *testing.T) {
	backend := &leaseBackend{}
	upstream := httptest.NewTLSServer(backend)
	defer upstream.Close()
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: upstream.Certificate().Raw}), 0o600)
	certFile, keyFile, pool := tlsFiles(t)

	in := startFenceproxy(t, map[string]string{
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
	in := startFenceproxy(t, map[string]string{"FENCEPROXY_UPSTREAM": upstream.URL, "FENCEPROXY_DATA_DIR": t.TempDir()})
	if got := metricsPut(t, in, "/bkt/obj", "1"); got != 502 || backend.got() != "" {
		t.Fatalf("untrusted upstream: %d, backend got %q", got, backend.got())
	}
}

func TestTLSConfigErrors(t *testing.T) {
	certFile, keyFile, _ := tlsFiles(t)
	for name, env := range map[string]map[string]string{
		"cert without key":   {"FENCEPROXY_TLS_CERT_FILE": certFile},
		"key without cert":   {"FENCEPROXY_CONTROL_TLS_KEY_FILE": keyFile},
		"missing files":      {"FENCEPROXY_TLS_CERT_FILE": "/nonexistent/c.pem", "FENCEPROXY_TLS_KEY_FILE": "/nonexistent/k.pem"},
		"CA file not PEM":    {"FENCEPROXY_UPSTREAM_CA_FILE": keyFile + ".missing"},
		"key as certificate": {"FENCEPROXY_TLS_CERT_FILE": keyFile, "FENCEPROXY_TLS_KEY_FILE": keyFile},
	} {
		t.Run(name, func(t *testing.T) {
			e := map[string]string{"FENCEPROXY_UPSTREAM": "https://127.0.0.1:1", "FENCEPROXY_DATA_DIR": t.TempDir()}
			var want string
			for k, v := range env {
				e[k] = v
				want = k
			}
			err := run(t.Context(), nil, e, &syncBuffer{}, &syncBuffer{}, nil)
			if err == nil || !strings.Contains(err.Error(), strings.Split(want, "_FILE")[0][:len("FENCEPROXY_")]) {
				t.Fatalf("run = %v, want an error naming a TLS variable", err)
			}
		})
	}
}
