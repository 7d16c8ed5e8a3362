package s3

import (
	"net/http"
	"net/url"
	"strings"
)

// Writes is what an S3 operation writes, as the fence sees it.
type Writes int

const (
	// Nothing: a read.
	Nothing Writes = iota
	// Object: the object (or its metadata, or an upload's part) its path
	// names; fenced on {bucket}/{key}.
	Object
	// Objects: DeleteObjects, whose keys are in the body.
	Objects
	// NewBucket: CreateBucket, which writes no object.
	NewBucket
	// BucketConfig: a bucket's configuration (policy, lifecycle rules, ACL,
	// versioning...) or the bucket itself (DeleteBucket): lifecycle rules and
	// policies can delete or expose every object in it.
	BucketConfig
	// Form: a browser upload (POST Object), whose key is in a form field.
	Form
)

// String names w as the catalogue in docs/S3.md does.
func (w Writes) String() string {
	return [...]string{"nothing", "object", "objects", "new bucket", "bucket configuration", "form upload"}[w]
}

// Operation is one row of the catalogue: the S3 REST operations with a
// method, a target (a bucket, or an object in it) and a query shape.
type Operation struct {
	Name   string // the S3 API's names, for logs and docs
	Method string // "" for any method not matched by an earlier row
	Bucket bool   // the path names a bucket alone (/{bucket}), else an object
	Query  string // a query parameter that marks the operation; "" for any query
	// Plain: only when the query names no sub-resource, i.e. has no
	// parameter but those whose names start with "x-" in any case (x-id,
	// a presigned URL's X-Amz-*, X-Fencing-Token).
	Plain  bool
	Writes Writes
}

// bucketConfigs are the sub-resources of a bucket's configuration (the S3
// API as aws-sdk-go-v2 1.114 knows it).
var bucketConfigs = []string{
	"abac", "accelerate", "acl", "analytics", "cors", "encryption", "intelligent-tiering", "inventory", "lifecycle",
	"logging", "metadataAnnotationTable", "metadataConfiguration", "metadataInventoryTable", "metadataJournalTable",
	"metadataTable", "metrics", "notification", "object-lock", "ownershipControls", "policy",
	"publicAccessBlock", "replication", "requestPayment", "tagging", "versioning", "website",
}

// Catalogue lists the operations in the order Lookup matches them: the
// first row whose method, target and query parameter match.
var Catalogue = func() []Operation {
	ops := []Operation{
		{Name: "ListObjects, ListObjectsV2, ListObjectVersions, ListMultipartUploads, GetBucket* (any sub-resource)", Method: http.MethodGet, Bucket: true, Writes: Nothing},
		{Name: "HeadBucket", Method: http.MethodHead, Bucket: true, Writes: Nothing},
		{Name: "DeleteObjects", Method: http.MethodPost, Bucket: true, Query: "delete", Writes: Objects},
		{Name: "PostObject (browser form upload)", Method: http.MethodPost, Bucket: true, Writes: Form},
	}
	for _, q := range bucketConfigs {
		ops = append(ops, Operation{Name: "PutBucket*/DeleteBucket* (" + q + ")", Bucket: true, Query: q, Writes: BucketConfig})
	}
	return append(ops,
		// A PUT with a sub-resource no row above names is a configuration
		// write the catalogue does not know yet, not a CreateBucket.
		Operation{Name: "CreateBucket", Method: http.MethodPut, Bucket: true, Plain: true, Writes: NewBucket},
		Operation{Name: "DeleteBucket", Method: http.MethodDelete, Bucket: true, Writes: BucketConfig},
		Operation{Name: "any other write to a bucket", Bucket: true, Writes: BucketConfig},
		Operation{Name: "GetObject, GetObjectAcl, GetObjectTagging, GetObjectAttributes, ListParts, ... (any sub-resource)", Method: http.MethodGet, Writes: Nothing},
		Operation{Name: "HeadObject", Method: http.MethodHead, Writes: Nothing},
		Operation{Name: "PutObject, CopyObject (destination), UploadPart, UploadPartCopy, PutObjectAcl, PutObjectTagging, PutObjectRetention, PutObjectLegalHold", Method: http.MethodPut, Writes: Object},
		Operation{Name: "DeleteObject, DeleteObjectTagging, AbortMultipartUpload", Method: http.MethodDelete, Writes: Object},
		Operation{Name: "CreateMultipartUpload, CompleteMultipartUpload, RestoreObject, SelectObjectContent", Method: http.MethodPost, Writes: Object},
		Operation{Name: "any other request to an object", Writes: Object},
	)
}()

// noBucket is a write to a path that names no bucket (/): it is fenced on
// its path, which names no resource (the proxy answers 400).
var noBucket = Operation{Name: "a write to no bucket", Bucket: true, Writes: Object}

// Lookup returns the catalogue's operation for a request: its method, the
// path it names (/{bucket} or /{bucket}/{key}, as Addressing returns it),
// its raw query and header. An operation the catalogue does not know writes
// its target, never nothing: an object, or a bucket's configuration; a
// write to / (no bucket) is an object write of that path.
func Lookup(method, path, rawQuery string, header http.Header) Operation {
	if strings.TrimPrefix(path, "/") == "" && method != http.MethodGet && method != http.MethodHead {
		return noBucket
	}
	bucket := !strings.Contains(strings.TrimPrefix(path, "/"), "/")
	for _, op := range Catalogue {
		if op.Bucket != bucket || op.Method != "" && op.Method != method || op.Query != "" && !hasParam(rawQuery, op.Query) ||
			op.Plain && !plainQuery(rawQuery) {
			continue
		}
		if op.Writes == Form && !strings.HasPrefix(strings.ToLower(header.Get("Content-Type")), "multipart/form-data") {
			continue
		}
		return op
	}
	return Operation{Name: "unknown", Bucket: bucket, Writes: Object} // not reached: the last rows match any
}

// plainQuery reports whether a raw query names no sub-resource: each of its
// parameters' names starts with "x-" in any case (split as hasParam does).
func plainQuery(rawQuery string) bool {
	for part := range strings.FieldsFuncSeq(rawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		n, _, _ := strings.Cut(part, "=")
		if unescaped, err := url.QueryUnescape(n); err == nil {
			n = unescaped
		}
		if len(n) < 2 || !strings.EqualFold(n[:2], "x-") {
			return false
		}
	}
	return true
}
