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
	Query  string // a query parameter that marks the operation; "" for none
	Writes Writes
}

// bucketConfigs are the sub-resources of a bucket's configuration.
var bucketConfigs = []string{
	"accelerate", "acl", "analytics", "cors", "encryption", "intelligent-tiering", "inventory", "lifecycle",
	"logging", "metadataTable", "metrics", "notification", "object-lock", "ownershipControls", "policy",
	"publicAccessBlock", "replication", "requestPayment", "tagging", "versioning", "website",
}

// Catalogue lists the operations in the order Lookup matches them: the
// first row whose method, target and query parameter match.
var Catalogue = func() []Operation {
	ops := []Operation{
		{"ListObjects, ListObjectsV2, ListObjectVersions, ListMultipartUploads, GetBucket* (any sub-resource)", http.MethodGet, true, "", Nothing},
		{"HeadBucket", http.MethodHead, true, "", Nothing},
		{"DeleteObjects", http.MethodPost, true, "delete", Objects},
		{"PostObject (browser form upload)", http.MethodPost, true, "", Form},
	}
	for _, q := range bucketConfigs {
		ops = append(ops, Operation{"PutBucket*/DeleteBucket* (" + q + ")", "", true, q, BucketConfig})
	}
	return append(ops,
		Operation{"CreateBucket", http.MethodPut, true, "", NewBucket},
		Operation{"DeleteBucket", http.MethodDelete, true, "", BucketConfig},
		Operation{"any other write to a bucket", "", true, "", BucketConfig},
		Operation{"GetObject, GetObjectAcl, GetObjectTagging, GetObjectAttributes, ListParts, ... (any sub-resource)", http.MethodGet, false, "", Nothing},
		Operation{"HeadObject", http.MethodHead, false, "", Nothing},
		Operation{"PutObject, CopyObject (destination), UploadPart, UploadPartCopy, PutObjectAcl, PutObjectTagging, PutObjectRetention, PutObjectLegalHold", http.MethodPut, false, "", Object},
		Operation{"DeleteObject, DeleteObjectTagging, AbortMultipartUpload", http.MethodDelete, false, "", Object},
		Operation{"CreateMultipartUpload, CompleteMultipartUpload, RestoreObject, SelectObjectContent", http.MethodPost, false, "", Object},
		Operation{"any other request to an object", "", false, "", Object},
	)
}()

// Lookup returns the catalogue's operation for a request: its method, the
// path it names (/{bucket} or /{bucket}/{key}, as Addressing returns it),
// its raw query and header. An operation the catalogue does not know writes
// its target, never nothing: an object, or a bucket's configuration.
func Lookup(method, path, rawQuery string, header http.Header) Operation {
	bucket := !strings.Contains(strings.TrimPrefix(path, "/"), "/")
	for _, op := range Catalogue {
		if op.Bucket != bucket || op.Method != "" && op.Method != method || op.Query != "" && !hasParam(rawQuery, op.Query) {
			continue
		}
		if op.Writes == Form && !strings.HasPrefix(strings.ToLower(header.Get("Content-Type")), "multipart/form-data") {
			continue
		}
		return op
	}
	return Operation{Name: "unknown", Bucket: bucket, Writes: Object} // not reached: the last rows match any
}
