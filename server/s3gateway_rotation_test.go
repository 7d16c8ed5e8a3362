package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

const gwSecret3 = "worker3-secret-0123456789abcdef"

// rotationBound is how soon a change of the credentials file takes effect:
// s3/keyring re-reads it every 5 s; the rest is margin for a loaded machine.
const rotationBound = 5*time.Second + 2*time.Second

// TestS3GatewayRotation rewrites the workers' credentials file while the
// server runs, atomically (a new file renamed over it): worker2, removed,
// is refused (InvalidAccessKeyId) within rotationBound, worker3, added,
// works within the same time, and worker1, kept, works throughout. Then a
// file that does not parse: the last good keys stay (worker1 and worker3
// still work, worker2 is still refused) and the server logs an error that
// quotes no secret.
func TestS3GatewayRotation(t *testing.T) {
	g := startGateway(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := g.backend.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("other"), Key: aws.String("r"), Body: strings.NewReader("r")}); err != nil {
		t.Fatal(err)
	}
	w1, w2, w3 := g.worker("worker1", gwSecret1), g.worker("worker2", gwSecret2), g.worker("worker3", gwSecret3)
	list := func(c *s3.Client, bucket, prefix string) error {
		_, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
		return err
	}
	w1ok := func() error { return list(w1, "jobs", "w1/") }
	w2ok := func() error {
		out, err := w2.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("other"), Key: aws.String("r")})
		if err == nil {
			out.Body.Close()
		}
		return err
	}
	w3ok := func() error { return list(w3, "jobs", "w3/") }
	if err := w2ok(); err != nil {
		t.Fatalf("worker2 before the rotation: %v", err)
	}
	wantAPIError(t, "worker3 before the rotation", w3ok(), "InvalidAccessKeyId")

	replace := func(content string) {
		t.Helper()
		tmp := filepath.Join(filepath.Dir(g.keys), ".keys.yaml.new")
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, g.keys); err != nil {
			t.Fatal(err)
		}
	}
	replace(`keys:
  - access_key_id: worker1
    secret_access_key: "` + gwSecret1 + `"
    grants:
      - {bucket: jobs, prefix: "w1/", access: readwrite}
  - access_key_id: worker3
    secret_access_key: "` + gwSecret3 + `"
    grants:
      - {bucket: jobs, prefix: "w3/", access: readwrite}
`)
	start := time.Now()
	// worker1 works throughout: back-to-back requests until the reload.
	reloaded, w1err := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-reloaded:
				w1err <- w1ok()
				return
			default:
			}
			if err := w1ok(); err != nil {
				w1err <- fmt.Errorf("%v in: %w", time.Since(start), err)
				return
			}
		}
	}()
	// The watcher logs the reload once the new keys are in use.
	ok := g.in.Logs.WaitFor("s3 credentials reloaded", 3*rotationBound)
	close(reloaded)
	if err := <-w1err; err != nil {
		t.Fatalf("worker1 (kept) during the rotation: %v", err)
	}
	if !ok {
		t.Fatalf("no reload of the credentials file within %v:\n%s", 3*rotationBound, g.in.Logs)
	}
	var removed, added time.Duration
	if w2ok() != nil {
		removed = time.Since(start)
		wantAPIError(t, "worker2 after its removal", w2ok(), "InvalidAccessKeyId")
	}
	if w3ok() == nil {
		added = time.Since(start)
	}
	t.Logf("worker2 removed: refused %v after the rename; worker3 added: accepted %v after", removed, added)
	if removed == 0 || removed > rotationBound {
		t.Errorf("worker2 was refused %v after its removal (0: never); want within %v", removed, rotationBound)
	}
	if added == 0 || added > rotationBound {
		t.Errorf("worker3 was accepted %v after it was added (0: never); want within %v", added, rotationBound)
	}

	// A broken file: the last good keys stay.
	const leaked = "broken-file-secret-0123456789abcdef"
	replace(`keys:
  - access_key_id: worker1
    secret_access_key: "` + leaked + `"
    grants:
      - {bucket: jobs, prefix: "w1/", access: everything}
`)
	g.in.Logs.WaitFor("s3 credentials file not loaded", rotationBound)
	logs := g.in.Logs.String()
	var line string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "s3 credentials file not loaded") {
			line = l
		}
	}
	t.Logf("the broken file's log line: %s", line)
	if !strings.Contains(line, `"level":"ERROR"`) {
		t.Errorf("no ERROR line for the broken credentials file within %v:\n%s", rotationBound, logs)
	}
	for _, secret := range []string{gwSecret1, gwSecret2, gwSecret3, leaked} {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs quote the secret %q:\n%s", secret, logs)
		}
	}
	if err := w1ok(); err != nil {
		t.Errorf("worker1 after the broken file: %v", err)
	}
	if err := w3ok(); err != nil {
		t.Errorf("worker3 after the broken file: %v", err)
	}
	wantAPIError(t, "worker2 after the broken file", w2ok(), "InvalidAccessKeyId")
	wantAPIError(t, "worker1 with the broken file's secret", list(g.worker("worker1", leaked), "jobs", "w1/"), "SignatureDoesNotMatch")
}
