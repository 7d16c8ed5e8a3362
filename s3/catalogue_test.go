package s3

import (
	"net/http"
	"testing"
)

func TestLookup(t *testing.T) {
	form := http.Header{"Content-Type": {"multipart/form-data; boundary=x"}}
	for _, c := range []struct {
		method, path, query string
		header              http.Header
		want                Writes
	}{
		{"GET", "/bkt", "list-type=2", nil, Nothing},
		{"HEAD", "/bkt", "", nil, Nothing},
		{"GET", "/bkt", "policy", nil, Nothing},
		{"GET", "/", "x-id=ListBuckets", nil, Nothing},
		{"PUT", "/bkt", "", nil, NewBucket},
		{"PUT", "/bkt", "x-id=CreateBucket", nil, NewBucket},
		{"PUT", "/bkt", "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=60&X-Fencing-Token=5", nil, NewBucket},
		{"PUT", "/bkt", "policy", nil, BucketConfig},
		{"PUT", "/bkt", "x-id=PutBucketPolicy&policy", nil, BucketConfig},
		{"DELETE", "/bkt", "lifecycle", nil, BucketConfig},
		{"PUT", "/bkt", "abac", nil, BucketConfig},
		{"PUT", "/bkt", "metadataJournalTable", nil, BucketConfig},
		// Sub-resources the catalogue does not name: not a CreateBucket.
		{"PUT", "/bkt", "frobnicate", nil, BucketConfig},
		{"PUT", "/bkt", "frobnicate=1&x-id=X", nil, BucketConfig},
		{"PUT", "/bkt", "x", nil, BucketConfig},
		{"PUT", "/bkt", "%78-id=CreateBucket", nil, NewBucket},
		{"DELETE", "/bkt", "", nil, BucketConfig},
		{"PATCH", "/bkt", "", nil, BucketConfig},
		{"POST", "/bkt", "delete", nil, Objects},
		{"POST", "/bkt", "", form, Form},
		{"POST", "/bkt", "", nil, BucketConfig},
		{"GET", "/bkt/k", "uploadId=1", nil, Nothing},
		{"PUT", "/bkt/k", "partNumber=1&uploadId=1", nil, Object},
		{"PUT", "/bkt/k", "policy", nil, Object},
		{"DELETE", "/bkt/k", "uploadId=1", nil, Object},
		{"POST", "/bkt/k", "uploads", nil, Object},
		{"FROB", "/bkt/k", "", nil, Object},
		// A write to no bucket is fenced on its path, which names nothing.
		{"PUT", "/", "", nil, Object},
		{"DELETE", "/", "", nil, Object},
	} {
		if got := Lookup(c.method, c.path, c.query, c.header).Writes; got != c.want {
			t.Errorf("%s %s?%s: %v, want %v", c.method, c.path, c.query, got, c.want)
		}
	}
}
