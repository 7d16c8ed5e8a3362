package s3

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/fence"
)

// classifyRaw classifies a request whose target is sent as given (raw path
// bytes and query), on host, with the header lines "Name: value".
func classifyRaw(t *testing.T, method, host, target string, headers ...string) (Request, error) {
	t.Helper()
	a, err := NewAddressing([]string{"localhost", "127.0.0.1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(method, "/", nil)
	r.Host = host
	r.RequestURI = target
	rawPath, rawQuery, _ := strings.Cut(target, "?")
	r.URL.RawQuery = rawQuery
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		r.Header[k] = append(r.Header[k], v) // as net/http keys what it reads
	}
	token := func(name string) bool { return strings.EqualFold(name, "X-Fencing-Token") }
	return a.Classify(r, rawPath, token)
}

func TestClassifyOperations(t *testing.T) {
	for _, c := range []struct {
		method, target string
		headers        []string
		writes         Writes
		bucket, key    string
		object         string
		creates        bool
	}{
		{"GET", "/bkt?list-type=2", nil, Nothing, "bkt", "", "", false},
		{"GET", "/bkt?policy", nil, Nothing, "bkt", "", "", false},
		{"GET", "/", nil, Nothing, "", "", "", false},
		{"HEAD", "/bkt", nil, Nothing, "bkt", "", "", false},
		{"PUT", "/bkt", nil, NewBucket, "bkt", "", "", false},
		{"PUT", "/bkt/", nil, NewBucket, "bkt", "", "", false},
		{"PUT", "/bkt?x-id=CreateBucket", nil, NewBucket, "bkt", "", "", false},
		{"PUT", "/bkt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Fencing-Token=5", nil, NewBucket, "bkt", "", "", false},
		{"PUT", "/bkt?policy", nil, BucketConfig, "bkt", "", "", false},
		{"PUT", "/bkt?x-id=PutBucketPolicy&policy", nil, BucketConfig, "bkt", "", "", false},
		{"DELETE", "/bkt?lifecycle", nil, BucketConfig, "bkt", "", "", false},
		{"PUT", "/bkt?frobnicate", nil, BucketConfig, "bkt", "", "", false}, // unknown: not a CreateBucket
		{"PUT", "/bkt?%78-id=CreateBucket", nil, NewBucket, "bkt", "", "", false},
		{"DELETE", "/bkt", nil, BucketConfig, "bkt", "", "", false},
		{"PATCH", "/bkt", nil, BucketConfig, "bkt", "", "", false},
		{"POST", "/bkt?delete", nil, Objects, "bkt", "", "", false},
		// Every other POST to a bucket is a form upload to the store,
		// whatever its Content-Type and query (the third bypass).
		{"POST", "/bkt", []string{"Content-Type: multipart/form-data; boundary=x"}, Form, "bkt", "", "", false},
		{"POST", "/bkt", []string{"Content-Type: text/plain"}, Form, "bkt", "", "", false},
		{"POST", "/bkt?policy", nil, Form, "bkt", "", "", false},
		{"POST", "/bkt?uploads", nil, Form, "bkt", "", "", false},
		{"GET", "/bkt/k?uploadId=1", nil, Nothing, "bkt", "k", "k", false},
		{"PUT", "/bkt/k", nil, Object, "bkt", "k", "k", true},
		{"PUT", "/bkt/k?foo=1", nil, Object, "bkt", "k", "k", true}, // stores ignore parameters they do not know
		{"PUT", "/bkt/k?versionId=1", nil, Object, "bkt", "k", "k", true},
		{"PUT", "/bkt/k", []string{"X-Amz-Copy-Source: /bkt/src"}, Object, "bkt", "k", "k", true},
		{"PUT", "/bkt/k?partNumber=1&uploadId=1", nil, Object, "bkt", "k", "k", false},
		{"PUT", "/bkt/k?tagging", nil, Object, "bkt", "k", "k", false},
		{"PUT", "/bkt/k?legal-hold", nil, Object, "bkt", "k", "k", false},
		{"PUT", "/bkt/k?policy", nil, Object, "bkt", "k", "k", true},  // a key: an unknown parameter
		{"PUT", "/bkt/k?torrent", nil, Object, "bkt", "k", "k", true}, // a GET sub-resource: a PutObject to the stores
		{"PUT", "/bkt/k?attributes", nil, Object, "bkt", "k", "k", true},
		// A form POSTed to an object's path: SeaweedFS routes it by its
		// Content-Type to the form upload, which writes the form's key.
		{"POST", "/bkt/k", []string{"Content-Type: multipart/form-data; boundary=x"}, Form, "bkt", "k", "k", false},
		{"POST", "/bkt/k?uploadId=u", []string{"Content-Type: Multipart/Mixed; boundary=x"}, Form, "bkt", "k", "k", false},
		{"POST", "/bkt/k?uploadId=u", []string{"Content-Type: application/xml"}, Object, "bkt", "k", "k", false},
		{"DELETE", "/bkt/k?uploadId=1", nil, Object, "bkt", "k", "k", false},
		{"POST", "/bkt/k?uploads", nil, Object, "bkt", "k", "k", true},
		{"POST", "/bkt/k?uploadId=u", nil, Object, "bkt", "k", "k", false},
		{"PROPPATCH", "/bkt/k", nil, Object, "bkt", "k", "k", false},
		// Keys as decoded, and their alias class.
		{"PUT", "/bkt/a%2Fb", nil, Object, "bkt", "a/b", "a/b", true},
		{"PUT", "/bkt//a", nil, Object, "bkt", "/a", "a", true},
		{"PUT", "/bkt/%2Fa", nil, Object, "bkt", "/a", "a", true},
		{"PUT", "/bkt/a//b", nil, Object, "bkt", "a//b", "a/b", true},
		{"PUT", "/bkt/o/", nil, Object, "bkt", "o/", "o", true},
		{"PUT", "/bkt/o%2F?tagging", nil, Object, "bkt", "o/", "o", false},
		{"PUT", "/bkt/d/e/", nil, Object, "bkt", "d/e/", "d/e", true},
		{"PUT", "/bkt/%41", nil, Object, "bkt", "A", "A", true},
	} {
		req, err := classifyRaw(t, c.method, "localhost:8080", c.target, c.headers...)
		if err != nil {
			t.Errorf("%s %s %q: %v", c.method, c.target, c.headers, err)
			continue
		}
		if req.Op.Writes != c.writes || req.Bucket != c.bucket || req.Key != c.key || req.Object != c.object || req.Op.Creates != c.creates {
			t.Errorf("%s %s %q: %s (%v), bucket %q, key %q, object %q, creates %v; want %v, %q, %q, %q, %v", c.method, c.target, c.headers,
				req.Op.Name, req.Op.Writes, req.Bucket, req.Key, req.Object, req.Op.Creates, c.writes, c.bucket, c.key, c.object, c.creates)
		}
	}
}

// TestClassifyVirtualHosted: the bucket from the Host, the key from the path.
func TestClassifyVirtualHosted(t *testing.T) {
	for target, want := range map[string][3]string{
		"/":      {"bkt", "", ""},
		"/k":     {"bkt", "k", "k"},
		"/k/":    {"bkt", "k/", "k"},
		"/a%2Fb": {"bkt", "a/b", "a/b"},
	} {
		req, err := classifyRaw(t, "PUT", "bkt.localhost:8080", target)
		if err != nil || req.Bucket != want[0] || req.Key != want[1] || req.Object != want[2] {
			t.Errorf("PUT %s on bkt.localhost: %q, %q, %q, %v; want %q", target, req.Bucket, req.Key, req.Object, err, want)
		}
	}
}

// TestClassifyRefuses: the spellings that the proxy and a store, or two
// stores, could read as another operation or object (ErrAmbiguous), and the
// names no bucket has (fence.ErrBadResource).
func TestClassifyRefuses(t *testing.T) {
	for _, c := range []struct {
		method, host, target string
		headers              []string
		want                 error
	}{
		// The bypasses: an encoded "/" in the bucket (versitygw
		// decodes first: PutObject bkt/obj), the same for the copy and
		// nested keys.
		{"PUT", "localhost", "/bkt%2Fobj", nil, ErrAmbiguous},
		{"PUT", "localhost", "/bkt%2fobj", nil, ErrAmbiguous},
		{"PUT", "localhost", "/bkt%2Fd%2Fx", nil, ErrAmbiguous},
		{"DELETE", "localhost", "/bkt%2Fobj", nil, ErrAmbiguous},
		{"GET", "localhost", "/bkt%2Fobj", nil, ErrAmbiguous},
		{"PUT", "localhost", "/b%6Bt/obj", nil, ErrAmbiguous},
		// Keys that name the bucket to some stores and an object to others.
		{"PUT", "localhost", "/bkt//", nil, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/%2F", nil, ErrAmbiguous},
		{"DELETE", "bkt.localhost", "//", nil, ErrAmbiguous},
		{"PUT", "localhost", "//bkt/obj", nil, ErrAmbiguous},
		// Routing headers given twice: Go reads the first, stores the last.
		{"POST", "localhost", "/bkt", []string{"Content-Type: text/plain", "Content-Type: multipart/form-data; boundary=x"}, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k", []string{"X-Amz-Copy-Source: /bkt/a", "X-Amz-Copy-Source: /bkt/b"}, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k", []string{"X-Amz-Metadata-Directive: COPY", "X-Amz-Metadata-Directive: REPLACE"}, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k", []string{"Content-Encoding: aws-chunked", "Content-Encoding: gzip"}, ErrAmbiguous},
		// Under a name with "_", read as "-" by some servers.
		{"PUT", "localhost", "/bkt/k", []string{"X_Amz_Copy_Source: /bkt/a"}, ErrAmbiguous},
		{"POST", "localhost", "/bkt", []string{"Content_Type: multipart/form-data; boundary=x"}, ErrAmbiguous},
		{"GET", "localhost", "/bkt/k", []string{"X_HTTP_Method_Override: DELETE"}, ErrAmbiguous},
		// A method override: S3 stores run the request line's method.
		{"GET", "localhost", "/bkt/k", []string{"X-Http-Method-Override: DELETE"}, ErrAmbiguous},
		{"POST", "localhost", "/bkt/k", []string{"X-Method-Override: PUT"}, ErrAmbiguous},
		// The query: raw "#", ";", bad escapes, a parameter twice.
		{"DELETE", "localhost", "/bkt/k?X-Amz-Foo=1#&uploadId=u", nil, ErrAmbiguous},
		{"PUT", "localhost", "/bkt?policy#", nil, ErrAmbiguous},
		{"DELETE", "localhost", "/bkt/k?uploadId=u;a=b", nil, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k?tagging=%zz", nil, ErrAmbiguous},
		{"DELETE", "localhost", "/bkt/k?uploadId=u&uploadId=v", nil, ErrAmbiguous},
		{"DELETE", "localhost", "/bkt/k?uploadId=u&uploadid=v", nil, ErrAmbiguous},
		// A known parameter in another case: S3 and SeaweedFS match it
		// exactly, other stores not (POST ?Delete was a form upload to
		// SeaweedFS, PUT ?Tagging a PutObject to both stores).
		{"POST", "localhost", "/bkt?Delete", nil, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k?Tagging", nil, ErrAmbiguous},
		{"PUT", "localhost", "/bkt?Policy", nil, ErrAmbiguous},
		{"DELETE", "localhost", "/bkt/k?uploadid=u", nil, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k?Uploadid=u&PartNumber=1", nil, ErrAmbiguous},
		{"GET", "localhost", "/bkt?List-Type=2", nil, ErrAmbiguous},
		// A DeleteObjects with a multipart body: a form upload to a store
		// that routes by Content-Type first.
		{"POST", "localhost", "/bkt?delete", []string{"Content-Type: multipart/form-data; boundary=B"}, ErrAmbiguous},
		// Signed for another service: SeaweedFS runs S3 Tables and IAM on
		// its S3 port.
		{"DELETE", "localhost", "/tables/arn/ns1/t1", []string{"Authorization: AWS4-HMAC-SHA256 Credential=AK/20261203/us-east-1/s3tables/aws4_request, SignedHeaders=host, Signature=00"}, ErrAmbiguous},
		{"POST", "localhost", "/bkt/k?X-Amz-Credential=AK%2F20261203%2Fus-east-1%2Fiam%2Faws4_request&uploads", nil, ErrAmbiguous},
		{"GET", "localhost", "/bkt?prefix=jobs/&prefix=", nil, ErrAmbiguous},
		// Copy sources that stores parse differently.
		{"PUT", "localhost", "/bkt/k", []string{"X-Amz-Copy-Source: reports/jobs/?/../../private/p.txt"}, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k", []string{"X-Amz-Copy-Source: reports/jobs/%3FversionId=x"}, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k", []string{"X-Amz-Copy-Source: reports/a?versionId=1%3FversionId=2"}, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k", []string{"X-Amz-Copy-Source: reports/a+b"}, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k", []string{"X-Amz-Copy-Source: reports/a?versionId="}, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k", []string{"X-Amz-Copy-Source: reports/a?versionId=1&x=2"}, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k", []string{"X-Amz-Copy-Source: reports"}, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k", []string{"X-Amz-Copy-Source: reports/"}, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k", []string{"X-Amz-Copy-Source: re%zzports/a"}, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k", []string{"X-Amz-Copy-Source: rep;orts/a"}, ErrAmbiguous},
		{"PUT", "localhost", "/bkt/k", []string{"X-Amz-Rename-Source: /bkt/a?versionId=1"}, ErrAmbiguous},
		// Archives a store extracts into objects named in the body.
		{"PUT", "localhost", "/bkt/a.zip?extract=zip", nil, ErrInBody},
		{"PUT", "localhost", "/bkt/a.zip", []string{"X-Seaweedfs-Extract: zip"}, ErrInBody},
		{"PUT", "localhost", "/bkt/a.tar", []string{"X-Amz-Meta-Snowball-Auto-Extract: true"}, ErrInBody},
		{"PUT", "localhost", "/bkt/a.tar", []string{"X-Amz-Meta-Minio-Snowball-Prefix: x"}, ErrInBody},
		// The stores' own state: multipart staging, versions.
		{"PUT", "localhost", "/bkt/.sgwtmp/multipart/abc/id/", nil, fence.ErrBadResource},
		{"DELETE", "localhost", "/bkt/.uploads/id/0001.part", nil, fence.ErrBadResource},
		{"PUT", "localhost", "/bkt/d/a.txt.versions/v1", nil, fence.ErrBadResource},
		{"PUT", "localhost", "/bkt/dst?renameObject", []string{"X-Amz-Rename-Source: .uploads/id"}, fence.ErrBadResource},
		// Names no bucket has; writes to no bucket.
		{"PUT", "localhost", "/b;kt/k", nil, fence.ErrBadResource},
		{"PUT", "localhost", "/../k", nil, fence.ErrBadResource},
		{"PUT", "localhost", "/", nil, fence.ErrBadResource},
		{"PUT", "localhost", "/bkt/%zz", nil, fence.ErrBadResource},
		{"PUT", "evil.example", "/bkt/k", nil, ErrHost},
	} {
		req, err := classifyRaw(t, c.method, c.host, c.target, c.headers...)
		if !errors.Is(err, c.want) {
			t.Errorf("%s %s%s %q: %+v, %v; want %v", c.method, c.host, c.target, c.headers, req, err, c.want)
		}
	}
}

func TestClassifyPasses(t *testing.T) {
	for _, c := range []struct {
		method, target string
		headers        []string
	}{
		// Metadata may repeat (the store joins it) and carry "_".
		{"PUT", "/bkt/k", []string{"X-Amz-Meta-A: 1", "X-Amz-Meta-A: 2", "X-Amz-Meta-My_key: v"}},
		// Other headers with "_" are no routing header's alias.
		{"PUT", "/bkt/k", []string{"X_custom: 1"}},
		// The token may come twice (the proxy refuses that itself, as malformed).
		{"PUT", "/bkt/k?X-Fencing-Token=1&x-fencing-token=1", nil},
		{"PUT", "/bkt/k", []string{"X-Amz-Copy-Source: bkt/a%2Fb?versionId=3HL4kqtJvjVBH40Nrjfkd"}},
		{"PUT", "/bkt/k", []string{"X-Amz-Copy-Source: /bkt/a%20b%3Bc"}},
		// An encoded "?" is a key byte to every store (boto3 sends one).
		{"PUT", "/bkt/k", []string{"X-Amz-Copy-Source: bkt/p/report%3Fv%3D2.csv"}},
		{"PUT", "/bkt/k?torrent", nil}, // a PutObject to the stores
		{"GET", "/bkt/k?extract=zip", nil},
		{"PUT", "/bkt/my.versions.txt", nil},
		{"PUT", "/bkt/k?X-Amz-Credential=AK%2F20261203%2Fus-east-1%2Fs3%2Faws4_request&X-AMZ-Date=1", nil},
		{"PUT", "/bkt/k", []string{"Authorization: AWS4-HMAC-SHA256 Credential=AK/20261203/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"}},
	} {
		if req, err := classifyRaw(t, c.method, "localhost", c.target, c.headers...); err != nil {
			t.Errorf("%s %s %q: %+v, %v; want it read", c.method, c.target, c.headers, req, err)
		}
	}
}

func TestClassifySources(t *testing.T) {
	// The value is decoded whole, then split (an encoded "/" between the
	// bucket and the key is theirs: a store that splits first reads no
	// bucket of that name, and copies nothing).
	req, err := classifyRaw(t, "PUT", "localhost", "/bkt/dst?partNumber=1&uploadId=u", "X-Amz-Copy-Source: /src%2Fa//b/?versionId=v1")
	want := ObjectRef{Bucket: "src", Key: "a//b/", Object: "a/b", VersionID: "v1"}
	if err != nil || req.Source == nil || *req.Source != want {
		t.Fatalf("copy source %+v, %v; want %+v", req.Source, err, want)
	}
	req, err = classifyRaw(t, "PUT", "localhost", "/bkt/dst?renameObject", "X-Amz-Rename-Source: /bkt/old/")
	var changed []string
	for _, o := range req.Changes() {
		changed = append(changed, o.Bucket+"/"+o.Object)
	}
	// Both readings of the source (a key of the bucket, SeaweedFS's first;
	// {bucket}/{key}), and a directory marker's data (SeaweedFS stores it as
	// old/old).
	if want := "bkt/dst bkt/bkt/old bkt/bkt/old/old bkt/old bkt/old/old"; err != nil || strings.Join(changed, " ") != want {
		t.Fatalf("rename: %q, %v; want %s changed", changed, err, want)
	}
	req, err = classifyRaw(t, "PUT", "localhost", "/bkt/stolen?renameObject", "X-Amz-Rename-Source: jobs/a")
	changed = nil
	for _, o := range req.Changes() {
		changed = append(changed, o.Bucket+"/"+o.Object)
	}
	if want := "bkt/stolen bkt/jobs/a jobs/a"; err != nil || strings.Join(changed, " ") != want {
		t.Fatalf("rename of a bare key: %q, %v; want %s changed", changed, err, want)
	}
	req, _ = classifyRaw(t, "PUT", "localhost", "/bkt/a/b%5C")
	if c := req.Changes(); len(c) != 2 || c[0].Object != "a/b" || c[1].Object != "a/b/b" {
		t.Fatalf("PUT /bkt/a/b%%5C changes %+v; want a/b and a/b/b", c)
	}
}

func TestClassifyListing(t *testing.T) {
	for target, want := range map[string]string{
		"/bkt?list-type=2&prefix=jobs%2F":             "jobs/",
		"/bkt?prefix=a+b&delimiter=/":                 "a b",
		"/bkt?versions&prefix=x":                      "x",
		"/bkt?uploads&prefix=x&X-Amz-Expires=60":      "x",
		"/bkt":                                        "",
		"/bkt?list-type=2&X-Fencing-Token=1&prefix=p": "p",
	} {
		req, err := classifyRaw(t, "GET", "localhost", target)
		if err != nil || !req.Listing || req.Prefix != want {
			t.Errorf("GET %s: listing %v, prefix %q, %v; want a listing below %q", target, req.Listing, req.Prefix, err, want)
		}
	}
	for _, target := range []string{"/bkt?policy", "/bkt?acl&prefix=x", "/bkt/k"} {
		if req, err := classifyRaw(t, "GET", "localhost", target); err != nil || req.Listing {
			t.Errorf("GET %s: listing %v, %v; want no listing", target, req.Listing, err)
		}
	}
}

func TestClassifyMultipart(t *testing.T) {
	for _, c := range []struct {
		method, target string
		want           Multipart
		id             string
	}{
		{"POST", "/b/k?uploads", CreateUpload, ""},
		{"POST", "/b/k?uploads=&x-id=CreateMultipartUpload", CreateUpload, ""},
		{"POST", "/b/k?uploadId=abc%2Fd", CompleteUpload, "abc/d"},
		{"POST", "/b/k?uploadId=u&x-id=CompleteMultipartUpload", CompleteUpload, "u"},
		{"DELETE", "/b/k?uploadId=u", AbortUpload, "u"},
		{"DELETE", "/b/k/deep/key?x-id=AbortMultipartUpload&uploadId=u%2B1", AbortUpload, "u+1"},
		{"DELETE", "/b/k?uploadId=u&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=ab&x-amz-date=1", AbortUpload, "u"},
		{"DELETE", "/b/k?uploadId=u&X-Fencing-Token=41", AbortUpload, "u"},
		{"DELETE", "/b/k?uploadId=u&versionId=v", NotMultipart, ""},
		{"DELETE", "/b/k?uploadId=u&x-id=DeleteObject", NotMultipart, ""},
		{"DELETE", "/b/k?uploadId=", NotMultipart, ""},
		{"DELETE", "/b/k?X-Amz-=1&uploadId=u", NotMultipart, ""},
		{"DELETE", "/b/k", NotMultipart, ""},
		{"DELETE", "/b?uploadId=u", NotMultipart, ""},
		{"PUT", "/b/k?uploadId=u&partNumber=1", NotMultipart, ""},
	} {
		req, err := classifyRaw(t, c.method, "localhost", c.target)
		if err != nil || req.Multipart != c.want || req.UploadID != c.id {
			t.Errorf("%s %s: %d, %q, %v; want %d, %q", c.method, c.target, req.Multipart, req.UploadID, err, c.want, c.id)
		}
	}
}

func TestMarkerData(t *testing.T) {
	for key, want := range map[string]string{"o": "", "o/": "o/o", "a/b/": "a/b/b", `a\b\`: "a/b/b", "a//": "a/a", "/": ""} {
		if got := MarkerData(key); got != want {
			t.Errorf("MarkerData(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestObjectName(t *testing.T) {
	for key, want := range map[string]string{
		"o": "o", "o/": "o", "/o": "o", "a//b": "a/b", "//a///b//": "a/b", "/": "", "": "", "a/b/c": "a/b/c",
		`a\b`: "a/b", `a\\b\`: "a/b", `\`: "",
	} {
		if got := ObjectName(key); got != want {
			t.Errorf("ObjectName(%q) = %q, want %q", key, got, want)
		}
	}
}

// TestClassifyAllocs: a plain PutObject, the common fenced write, is read
// without allocating.
func TestClassifyAllocs(t *testing.T) {
	a, err := NewAddressing([]string{"localhost"}, true)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPut, "http://localhost:8080/bkt/obj-1", nil)
	r.Header.Set("Content-Type", "text/plain")
	r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	if n := testing.AllocsPerRun(100, func() { _, _ = a.Classify(r, "/bkt/obj-1", nil) }); n != 0 {
		t.Errorf("Classify of a PutObject: %v allocations, want 0", n)
	}
}
