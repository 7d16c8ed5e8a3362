package s3

import (
	"net/http"
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
	// Query lists parameters (any case) of which one marks the operation;
	// nil for any query.
	Query []string
	// Plain: only when the query names no sub-resource, i.e. has no
	// parameter but those whose names start with "x-" in any case (x-id,
	// a presigned URL's X-Amz-*).
	Plain  bool
	Writes Writes
	// Creates: the operation writes a new version of the object from the
	// request (PutObject, CopyObject, CreateMultipartUpload), so the audit
	// metadata goes with it.
	Creates bool
}

// bucketConfigs are the sub-resources of a bucket's configuration (the S3
// API as aws-sdk-go-v2 1.114 knows it).
var bucketConfigs = []string{
	"abac", "accelerate", "acl", "analytics", "cors", "encryption", "intelligent-tiering", "inventory", "lifecycle",
	"logging", "metadataAnnotationTable", "metadataConfiguration", "metadataInventoryTable", "metadataJournalTable",
	"metadataTable", "metrics", "notification", "object-lock", "ownershipControls", "policy",
	"publicAccessBlock", "replication", "requestPayment", "tagging", "versioning", "website",
}

// objectSubresources are the sub-resources of an object's PUT that change
// the object without writing its data: a PUT with none of them is a
// PutObject (or CopyObject), whatever other parameters it has, since stores
// ignore parameters they do not know (versitygw and SeaweedFS run a PUT
// ?torrent, ?select, ?restore or ?attributes as a PutObject).
var objectSubresources = []string{"acl", "tagging", "retention", "legal-hold", "uploadId", "partNumber", "renameObject"}

// Catalogue lists the operations in the order lookup matches them: the
// first row whose method, target and query match.
var Catalogue = func() []Operation {
	ops := []Operation{
		{Name: "ListObjects, ListObjectsV2, ListObjectVersions, ListMultipartUploads, GetBucket* (any sub-resource)", Method: http.MethodGet, Bucket: true, Writes: Nothing},
		{Name: "HeadBucket", Method: http.MethodHead, Bucket: true, Writes: Nothing},
		{Name: "DeleteObjects", Method: http.MethodPost, Bucket: true, Query: []string{"delete"}, Writes: Objects},
		// Stores route every other POST to a bucket to the form upload,
		// whatever its Content-Type and query (versitygw does).
		{Name: "PostObject (browser form upload; any other POST to a bucket)", Method: http.MethodPost, Bucket: true, Writes: Form},
	}
	for _, q := range bucketConfigs {
		ops = append(ops, Operation{Name: "PutBucket*/DeleteBucket* (" + q + ")", Bucket: true, Query: []string{q}, Writes: BucketConfig})
	}
	return append(ops,
		// A PUT with a sub-resource no row above names is a configuration
		// write the catalogue does not know yet, not a CreateBucket.
		Operation{Name: "CreateBucket", Method: http.MethodPut, Bucket: true, Plain: true, Writes: NewBucket},
		Operation{Name: "DeleteBucket", Method: http.MethodDelete, Bucket: true, Writes: BucketConfig},
		Operation{Name: "any other write to a bucket", Bucket: true, Writes: BucketConfig},
		Operation{Name: "GetObject, GetObjectAcl, GetObjectTagging, GetObjectAttributes, ListParts, ... (any sub-resource)", Method: http.MethodGet, Writes: Nothing},
		Operation{Name: "HeadObject", Method: http.MethodHead, Writes: Nothing},
		Operation{Name: "UploadPart, UploadPartCopy, PutObjectAcl, PutObjectTagging, PutObjectRetention, PutObjectLegalHold, RenameObject, ...", Method: http.MethodPut,
			Query: objectSubresources, Writes: Object},
		Operation{Name: "PutObject, CopyObject (destination)", Method: http.MethodPut, Writes: Object, Creates: true},
		Operation{Name: "DeleteObject, DeleteObjectTagging, AbortMultipartUpload", Method: http.MethodDelete, Writes: Object},
		// No S3 operation: refused rather than read as a write of the path
		// alone, in case a store reads it as a DeleteObjects of its bucket.
		Operation{Name: "DeleteObjects sent to an object", Method: http.MethodPost, Query: []string{"delete"}, Writes: Objects},
		Operation{Name: "CreateMultipartUpload", Method: http.MethodPost, Query: []string{"uploads"}, Writes: Object, Creates: true},
		Operation{Name: "CompleteMultipartUpload, RestoreObject, SelectObjectContent, ...", Method: http.MethodPost, Writes: Object},
		Operation{Name: "any other request to an object", Writes: Object},
	)
}()

// noBucket is a request to no bucket (/): ListBuckets, or a write of
// nothing the fence can name (refused).
var (
	listBuckets = Operation{Name: "ListBuckets", Bucket: true, Writes: Nothing}
	noBucket    = Operation{Name: "a write to no bucket", Bucket: true, Writes: Object}
)

// lookup returns the catalogue's operation for a request's method, target
// (no bucket, a bucket alone, or an object) and parameters. An operation the
// catalogue does not know writes its target, never nothing: an object, or a
// bucket's configuration.
func lookup(method string, none, bucket bool, q query) Operation {
	if none {
		if method == http.MethodGet || method == http.MethodHead {
			return listBuckets
		}
		return noBucket
	}
	for _, op := range Catalogue {
		if op.Bucket != bucket || op.Method != "" && op.Method != method || op.Query != nil && !q.hasAny(op.Query) ||
			op.Plain && !q.plain() {
			continue
		}
		return op
	}
	return Operation{Name: "unknown", Bucket: bucket, Writes: Object} // not reached: the last rows match any
}

// hasAny reports whether one of names is a parameter, in any case.
func (q query) hasAny(names []string) bool {
	for _, n := range names {
		if q.has(n) {
			return true
		}
	}
	return false
}

// plain reports a query that names no sub-resource: each of its parameters'
// names starts with "x-" in any case.
func (q query) plain() bool {
	for _, p := range q {
		if len(p.name) < 2 || !strings.EqualFold(p.name[:2], "x-") {
			return false
		}
	}
	return true
}
