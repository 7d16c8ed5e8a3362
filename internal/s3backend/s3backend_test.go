package s3backend_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/fenceproxy/fenceproxy/internal/s3backend"
)

// The server stores what a correctly signed client writes, and refuses a
// request signed with another secret: it is a verifying backend.
func TestServerVerifiesSignatures(t *testing.T) {
	srv := s3backend.Start(t)
	srv.CreateBucket(t, "bkt")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	c := srv.Client()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("bkt"), Key: aws.String("dir/a.txt"), Body: strings.NewReader("hello"),
	}); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("dir/a.txt")})
	if err != nil {
		t.Fatalf("GetObject: %v", err)
	}
	data, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil || string(data) != "hello" {
		t.Fatalf("GetObject body %q, %v; want \"hello\"", data, err)
	}
	if _, err := os.Stat(srv.Dir + "/bkt/dir/a.txt"); err != nil {
		t.Errorf("the object is not a file under the posix root: %v", err)
	}

	wrong := srv.Client(func(o *s3.Options) {
		o.Credentials = credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey+"x", "")
	})
	_, err = wrong.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("bkt"), Key: aws.String("dir/a.txt"), Body: strings.NewReader("forged"),
	})
	var re *awshttp.ResponseError
	var ae smithy.APIError
	if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusForbidden || !errors.As(err, &ae) || ae.ErrorCode() != "SignatureDoesNotMatch" {
		t.Fatalf("PutObject signed with a wrong secret: %v; want 403 SignatureDoesNotMatch", err)
	}
}

// StartVirtualHosted: a request to {bucket}.localhost is for the bucket, and
// path style still works; the signature over the virtual host verifies.
func TestServerVirtualHosted(t *testing.T) {
	srv := s3backend.StartVirtualHosted(t, "localhost")
	srv.CreateBucket(t, "bkt")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	vhost := srv.Client(func(o *s3.Options) {
		o.UsePathStyle = false
		o.BaseEndpoint = aws.String("http://localhost:" + u.Port())
		o.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			hosts = append(hosts, addr) // bkt.localhost needs no DNS: dial the server
			return (&net.Dialer{}).DialContext(ctx, network, u.Host)
		}}}
	})
	if _, err := vhost.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("bkt"), Key: aws.String("a.txt"), Body: strings.NewReader("virtual"),
	}); err != nil {
		t.Fatalf("virtual-hosted PutObject: %v", err)
	}
	if want := "bkt.localhost:" + u.Port(); len(hosts) != 1 || hosts[0] != want {
		t.Errorf("dialled %q, want %s", hosts, want)
	}
	out, err := srv.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("a.txt")})
	if err != nil {
		t.Fatalf("path-style GetObject: %v", err)
	}
	data, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil || string(data) != "virtual" {
		t.Fatalf("path-style GetObject body %q, %v; want \"virtual\"", data, err)
	}
}

// Without the binary anywhere, and no way to build it (no module proxy), a
// test skips, and fails when CI is set. The test runs itself with an empty
// PATH, HOME and cache to see both.
func TestMissingBinary(t *testing.T) {
	if os.Getenv("S3BACKEND_CHILD") == "1" {
		s3backend.Start(t)
		t.Fatal("Start returned without the binary")
	}
	for _, ci := range []string{"", "1"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingBinary$", "-test.v")
		home := t.TempDir()
		cmd.Env = []string{"PATH=", "HOME=" + home, "GOPROXY=off", "S3BACKEND_CHILD=1", "CI=" + ci}
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case ci == "" && (err != nil || !strings.Contains(string(out), "--- SKIP") || !strings.Contains(string(out), "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0")):
			t.Errorf("without CI: %v, want a skip that names the install command\n%s", err, out)
		case ci != "" && (!errors.As(err, &exit) || !strings.Contains(string(out), "--- FAIL") || !strings.Contains(string(out), "CI is set")):
			t.Errorf("with CI=1: %v, want a failure\n%s", err, out)
		}
	}
}
