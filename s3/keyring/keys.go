// Package keyring holds the worker credentials of the S3 gateway: which access
// key ids may sign requests to the proxy, their secrets (for SigV4
// verification), and what each key may do (buckets and key prefixes, read
// and/or write). Everything not granted is denied.
//
// The credentials file (YAML; JSON is accepted too, being YAML):
//
//	keys:
//	  - access_key_id: worker1
//	    secret_access_key: "..."
//	    grants:
//	      - {bucket: reports, prefix: "jobs/", access: readwrite}   # read | write | readwrite
//
// Parse checks the whole file and reports every problem with its field
// (keys[1].grants[0].access); no error or log line of this package holds a
// secret. Watch loads the file and re-reads it while the proxy runs (a
// Kubernetes Secret volume updates in place).
package keyring

import (
	"slices"
	"strings"
)

// Access is what a grant allows: Read, Write or ReadWrite.
type Access uint8

// The values of a grant's access field: read, write, readwrite.
const (
	Read      Access = 1 << iota // GET and HEAD of objects; listing
	Write                        // PUT, POST, DELETE
	ReadWrite = Read | Write
)

// String is the access as the file spells it.
func (a Access) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	case ReadWrite:
		return "readwrite"
	}
	return "none"
}

// Grant lets a key read and/or write the objects of Bucket whose keys start
// with Prefix (an empty Prefix: the whole bucket, bucket-level requests
// included).
type Grant struct {
	Bucket string
	Prefix string
	Access Access
}

type entry struct {
	secret string
	grants []Grant
}

// Keys is one parsed credentials file. It is never changed after Parse, so
// any number of goroutines may read it. A nil *Keys denies everything.
type Keys struct {
	byID map[string]entry
}

// Len is the number of keys.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.byID)
}

// IDs are the access key ids, sorted (ids are not secret: logs may show them).
func (k *Keys) IDs() []string {
	if k == nil {
		return nil
	}
	ids := make([]string, 0, len(k.byID))
	for id := range k.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Grants are the grants of the key id, in file order (a copy); nil for an
// unknown id.
func (k *Keys) Grants(id string) []Grant {
	if k == nil {
		return nil
	}
	return slices.Clone(k.byID[id].grants)
}

// Secret is the secret access key of the key id, for the SigV4 verifier;
// false for an unknown id. The gateway answers an unknown id with
// InvalidAccessKeyId, as S3 does: key ids are names, not secrets.
func (k *Keys) Secret(id string) (string, bool) {
	if k == nil {
		return "", false
	}
	e, ok := k.byID[id]
	return e.secret, ok
}

// Allowed reports whether the key id may read (write false) or write (write
// true) the object key of bucket: a grant on bucket with that access whose
// prefix starts key. key is the object key decoded from the request path
// (no leading "/"). A key with a "." or ".." segment ("jobs/../x", "a/./b",
// "..") is refused under every grant: a posix store (versitygw) resolves it
// as a path, so "jobs/../x" writes "x", outside "jobs/". A bucket-level
// request has key "" and is allowed only by a grant on the whole bucket
// (prefix ""). Unknown ids, an empty bucket (ListBuckets) and everything not
// granted: false.
func (k *Keys) Allowed(id, bucket, key string, write bool) bool {
	if k == nil || bucket == "" || hasDotSegment(key) {
		return false
	}
	need := Read
	if write {
		need = Write
	}
	for _, g := range k.byID[id].grants {
		if g.Bucket == bucket && g.Access&need != 0 && strings.HasPrefix(key, g.Prefix) {
			return true
		}
	}
	return false
}

// AllowedList reports whether the key id may list bucket with the list
// prefix listPrefix (the prefix query parameter of ListObjects, ListObjectsV2,
// ListObjectVersions or ListMultipartUploads; "" when absent): a read grant
// on bucket whose prefix starts listPrefix, so that everything the listing
// can return is granted. A key granted "jobs/" may list "jobs/" and
// "jobs/2024/", not "jobs" (it would show "jobsX") nor the whole bucket. A
// prefix with a "." or ".." segment ("jobs/../") is refused: a posix store
// lists the directory it resolves to.
func (k *Keys) AllowedList(id, bucket, listPrefix string) bool {
	if k == nil || bucket == "" || hasDotSegment(listPrefix) {
		return false
	}
	for _, g := range k.byID[id].grants {
		if g.Bucket == bucket && g.Access&Read != 0 && strings.HasPrefix(listPrefix, g.Prefix) {
			return true
		}
	}
	return false
}

// hasDotSegment reports whether a "/"-separated segment of key is "." or
// "..".
func hasDotSegment(key string) bool {
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}
