package main

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// TLS settings that cannot work stop start-up with an error naming a TLS variable.
func TestTLSConfigErrors(t *testing.T) {
	certFile, keyFile, _ := servertest.TLSFiles(t)
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
			err := run(t.Context(), nil, e, &servertest.Buffer{}, &servertest.Buffer{}, nil)
			if err == nil || !strings.Contains(err.Error(), strings.Split(want, "_FILE")[0][:len("FENCEPROXY_")]) {
				t.Fatalf("run = %v, want an error naming a TLS variable", err)
			}
		})
	}
}
