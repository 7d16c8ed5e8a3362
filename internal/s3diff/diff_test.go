package s3diff_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/s3diff"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// The run's size: FENCEPROXY_TEST_S3DIFF_SEED and _REQUESTS set them for a
// longer run by hand; CI runs the fixed default.
func budget(t *testing.T) (int64, int) {
	seed, requests := int64(1), 400
	if v := os.Getenv("FENCEPROXY_TEST_S3DIFF_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("FENCEPROXY_TEST_S3DIFF_SEED: %v", err)
		}
		seed = n
	}
	if v := os.Getenv("FENCEPROXY_TEST_S3DIFF_REQUESTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("FENCEPROXY_TEST_S3DIFF_REQUESTS: %v", err)
		}
		requests = n
	}
	return seed, requests
}

const adminToken = "s3diff-admin-token-0123456789"

// workerKeys is gateway mode's credentials file: one worker granted
// bkt/jobs/ and other/drop/.
const workerKeys = `keys:
  - access_key_id: worker1
    secret_access_key: "worker1-secret-0123456789abcdef"
    grants:
      - {bucket: bkt, prefix: "jobs/", access: readwrite}
      - {bucket: other, prefix: "drop/", access: readwrite}
`

var grants = []s3diff.Grant{{Bucket: "bkt", Prefix: "jobs/"}, {Bucket: "other", Prefix: "drop/"}}

func report(t *testing.T, name string, seed int64, res s3diff.Result) {
	t.Helper()
	var refused, aliases []string
	for k, v := range res.Refused {
		refused = append(refused, k+" "+strconv.Itoa(v))
	}
	for k, v := range res.Aliases {
		aliases = append(aliases, k+": "+strconv.Itoa(v))
	}
	sort.Strings(refused)
	sort.Strings(aliases)
	t.Logf("%s, seed %d: %d requests, %d spellings, %d applied by the store, refused by the proxy: %s; %d violations",
		name, seed, res.Requests, res.Spellings, res.Applied, strings.Join(refused, ", "), len(res.Violations))
	t.Logf("%s: alias classes the store applied (spelling -> how its object differs from the literal key):\n\t%s", name, strings.Join(aliases, "\n\t"))
}

// TestVersitygwPass: versitygw (posix, virtual-hosted style on) behind
// the proxy in pass mode, FENCEPROXY_S3_BUCKET_WRITES=pass.
func TestVersitygwPass(t *testing.T) {
	seed, requests := budget(t)
	cfg := versitygwPass(t)
	cfg.Seed, cfg.Requests = seed, requests
	res := s3diff.Run(t, cfg)
	report(t, "versitygw, pass", seed, res)
	noViolations(t, res)
}

// versitygwPass starts versitygw and the proxy in front of it in pass mode.
func versitygwPass(t *testing.T) s3diff.Config {
	store := s3backend.StartVirtualHosted(t, "localhost")
	for _, b := range s3diff.Buckets {
		store.CreateBucket(t, b)
	}
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": store.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_ADMIN_TOKEN": adminToken,
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "localhost", "FENCEPROXY_S3_BUCKET_WRITES": "pass",
	})
	return s3diff.Config{
		Proxy: in.Proxy, Domain: "localhost",
		Control:  &client.Control{BaseURL: in.ControlURL(), AdminBearer: adminToken},
		Snapshot: func(t testing.TB) s3diff.Snapshot { return s3diff.PosixSnapshot(t, store.Dir) },
		Direct:   store.Client(), Staging: versitygwStaging,
		Signer: &s3diff.Signer{AccessKey: store.AccessKey, SecretKey: store.SecretKey, Region: s3backend.Region},
		Resign: true, BucketWrites: "pass",
	}
}

// versitygwStaging is where versitygw's posix backend keeps an upload in
// progress: below .sgwtmp/multipart/{sha256 of the key}/{upload id}/.
func versitygwStaging(_, key, id string) string {
	sum := sha256.Sum256([]byte(key))
	return ".sgwtmp/multipart/" + hex.EncodeToString(sum[:]) + "/" + id + []string{"/", "/1"}[len(id)%2]
}

// seaweedStaging is where SeaweedFS keeps an upload in progress: below
// .uploads/{upload id}/ in the bucket.
func seaweedStaging(_, _, id string) string {
	return ".uploads/" + id + []string{"/", "/0001.part"}[len(id)%2]
}

func noViolations(t *testing.T, res s3diff.Result) {
	t.Helper()
	for _, v := range res.Violations {
		t.Error(v)
	}
}

// TestVersitygwResign: versitygw behind the proxy in gateway mode, the
// worker granted bkt/jobs/ and other/drop/, FENCEPROXY_S3_BUCKET_WRITES=fence.
func TestVersitygwResign(t *testing.T) {
	seed, requests := budget(t)
	store := s3backend.Start(t)
	for _, b := range s3diff.Buckets {
		store.CreateBucket(t, b)
	}
	in, _ := gatewayProxy(t, store.URL, store.AccessKey, store.SecretKey, map[string]string{"FENCEPROXY_S3_BUCKET_WRITES": "fence"})
	res := s3diff.Run(t, s3diff.Config{
		Seed: seed, Requests: requests, Proxy: in.Proxy, Domain: "localhost",
		Control:  &client.Control{BaseURL: in.ControlURL(), AdminBearer: adminToken},
		Snapshot: func(t testing.TB) s3diff.Snapshot { return s3diff.PosixSnapshot(t, store.Dir) },
		Direct:   store.Client(), Signer: workerSigner(), Grants: grants, BucketWrites: "fence", Staging: versitygwStaging,
	})
	report(t, "versitygw, resign", seed, res)
	noViolations(t, res)
}

// gatewayProxy starts the proxy in gateway mode in front of the store at
// storeURL, whose key and secret only it holds (the AWS default chain reads
// them from the environment), with worker1's credentials file, the audit
// metadata on, and extra settings; it returns the instance and the file.
func gatewayProxy(t *testing.T, storeURL, key, secret string, extra map[string]string) (*servertest.Instance, string) {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(keys, []byte(workerKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
		"AWS_CONFIG_FILE": os.DevNull, "AWS_SHARED_CREDENTIALS_FILE": os.DevNull, "AWS_EC2_METADATA_DISABLED": "true"} {
		t.Setenv(k, v)
	}
	env := map[string]string{
		"FENCEPROXY_UPSTREAM": storeURL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_ADMIN_TOKEN": adminToken,
		"FENCEPROXY_S3": "resign", "FENCEPROXY_S3_DOMAINS": "localhost", "FENCEPROXY_S3_CREDENTIALS_FILE": keys,
		"FENCEPROXY_S3_REGION": s3backend.Region, "FENCEPROXY_S3_TOKEN_METADATA": "true",
	}
	return servertest.Start(t, servertest.Env(env, extra)), keys
}

// workerSigner signs as worker1 of workerKeys, for the proxy.
func workerSigner() *s3diff.Signer {
	return &s3diff.Signer{AccessKey: "worker1", SecretKey: "worker1-secret-0123456789abcdef", Region: s3backend.Region}
}

// TestSeaweedPass: SeaweedFS (weed mini, authentication off) behind the
// proxy in pass mode, path style only, FENCEPROXY_S3_BUCKET_WRITES=refuse.
func TestSeaweedPass(t *testing.T) {
	seed, requests := budget(t)
	cfg := seaweedPass(t)
	cfg.Seed, cfg.Requests = seed, requests
	res := s3diff.Run(t, cfg)
	report(t, "SeaweedFS, pass", seed, res)
	noViolations(t, res)
}

// seaweedPass starts SeaweedFS and the proxy in front of it in pass mode.
func seaweedPass(t *testing.T) s3diff.Config {
	store := s3backend.StartSeaweed(t)
	for _, b := range s3diff.Buckets {
		store.CreateBucket(t, b)
	}
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": store.URL, "FENCEPROXY_DATA_DIR": t.TempDir(), "FENCEPROXY_ADMIN_TOKEN": adminToken,
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1", "FENCEPROXY_S3_VIRTUAL_HOSTED": "false",
	})
	return s3diff.Config{
		Proxy:    in.Proxy,
		Control:  &client.Control{BaseURL: in.ControlURL(), AdminBearer: adminToken},
		Snapshot: func(t testing.TB) s3diff.Snapshot { return s3diff.SeaweedSnapshot(t, store) },
		Direct:   store.Client(), BucketWrites: "refuse", Staging: seaweedStaging,
	}
}

// TestSeaweedResign: SeaweedFS behind the proxy in gateway mode, the worker
// granted bkt/jobs/ and other/drop/, FENCEPROXY_S3_BUCKET_WRITES=pass.
func TestSeaweedResign(t *testing.T) {
	seed, requests := budget(t)
	store := s3backend.StartSeaweed(t)
	for _, b := range s3diff.Buckets {
		store.CreateBucket(t, b)
	}
	in, _ := gatewayProxy(t, store.URL, store.AccessKey, store.SecretKey, map[string]string{"FENCEPROXY_S3_BUCKET_WRITES": "pass"})
	res := s3diff.Run(t, s3diff.Config{
		Seed: seed, Requests: requests, Proxy: in.Proxy, Domain: "localhost",
		Control:  &client.Control{BaseURL: in.ControlURL(), AdminBearer: adminToken},
		Snapshot: func(t testing.TB) s3diff.Snapshot { return s3diff.SeaweedSnapshot(t, store) },
		Direct:   store.Client(), Signer: workerSigner(), Grants: grants, BucketWrites: "pass", Staging: seaweedStaging,
	})
	report(t, "SeaweedFS, resign", seed, res)
	noViolations(t, res)
}
