package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// s3Presign returns a presigned PUT URL for rawURL (whose query may carry
// the token) with the v4 signer of aws-sdk-go-v2, as a presigner hands one
// to an uploader that can add no header.
func s3Presign(t *testing.T, rawURL string) string {
	t.Helper()
	return s3PresignWith(t, rawURL, aws.Credentials{AccessKeyID: s3TestAccessKey, SecretAccessKey: s3TestSecretKey})
}

// s3PresignWith is s3Presign signing with creds.
func s3PresignWith(t *testing.T, rawURL string, creds aws.Credentials) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := req.URL.Query()
	q.Set("X-Amz-Expires", "900")
	req.URL.RawQuery = q.Encode()
	signed, _, err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).PresignHTTP(context.Background(),
		creds, req, "UNSIGNED-PAYLOAD", "s3", s3TestRegion, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return signed
}

// TestS3PresignedTokenInQuery: in S3 mode a presigned URL carries the token
// as a query parameter named like the header; with the header too, both
// must agree. In off mode the query is not read, so the write has no token.
func TestS3PresignedTokenInQuery(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("demo"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	put := func(u, header, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, u, strings.NewReader(body))
		if header != "" {
			req.Header.Set("X-Fencing-Token", header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header.Get("Fencing-Refused")
	}

	pass := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1"})
	base := pass.ProxyURL() + "/demo/presigned.txt"
	for _, tc := range []struct {
		name, query, header string
		status              int
		reason              string
	}{
		{"token 42 in the URL", "X-Fencing-Token=42", "", 200, ""},
		{"token 41 in the URL, stale", "X-Fencing-Token=41", "", 409, "stale"},
		{"lower-case name", "x-fencing-token=42", "", 200, ""},
		{"header and query agree", "X-Fencing-Token=42", "42", 200, ""},
		{"header and query differ", "X-Fencing-Token=41", "42", 400, "malformed"},
		{"twice in the URL", "X-Fencing-Token=42&X-Fencing-Token=43", "", 400, "malformed"},
		{"not a token", "X-Fencing-Token=4x2", "", 400, "malformed"},
		{"none", "", "", 428, "missing"},
	} {
		u := base
		if tc.query != "" {
			u += "?" + tc.query
		}
		if status, reason := put(s3Presign(t, u), tc.header, "from "+tc.name); status != tc.status || reason != tc.reason {
			t.Errorf("%s: %d %q, want %d %q", tc.name, status, reason, tc.status, tc.reason)
		}
	}
	if tok, _ := s3FenceOf(t, pass, "demo/presigned.txt"); tok != "42" {
		t.Errorf("fence %q, want 42", tok)
	}

	off := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir()})
	if status, reason := put(s3Presign(t, off.ProxyURL()+"/demo/off.txt?X-Fencing-Token=42"), "", "x"); status != 428 || reason != "missing" {
		t.Errorf("off mode, token in the URL: %d %q, want 428 missing", status, reason)
	}
}

// TestS3RealPresignedPut: a PUT URL presigned with the token in its query
// (aws s3 presign makes GET URLs only, so aws-sdk-go-v2's signer presigns
// here), uploaded by a client that adds no header, through pass mode to
// versitygw: the store verifies the signature over the query that carries
// the token, a stale URL is refused, and a URL without a token gets 428.
func TestS3RealPresignedPut(t *testing.T) {
	backend := s3backend.Start(t)
	backend.CreateBucket(t, "jobs")
	in := servertest.Start(t, map[string]string{"FENCEPROXY_UPSTREAM": backend.URL, "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1"})
	creds := aws.Credentials{AccessKeyID: backend.AccessKey, SecretAccessKey: backend.SecretKey}
	base := in.ProxyURL() + "/jobs/presigned/up.txt"
	for _, tc := range []struct {
		query, body string
		status      int
		code        string
	}{
		{"X-Fencing-Token=42", "from 42", 200, ""},
		{"X-Fencing-Token=41", "late from 41", 409, "StaleFencingToken"},
		{"", "without a token", 428, "MissingFencingToken"},
	} {
		u := base
		if tc.query != "" {
			u += "?" + tc.query
		}
		req, _ := http.NewRequest(http.MethodPut, s3PresignWith(t, u, creds), strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.code) {
			t.Errorf("presigned PUT %q: %d %s, want %d %s", tc.query, resp.StatusCode, body, tc.status, tc.code)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got := s3GetObject(ctx, t, backend.Client(), "jobs", "presigned/up.txt"); got != "from 42" {
		t.Errorf("backend object %q, want from 42", got)
	}
}
