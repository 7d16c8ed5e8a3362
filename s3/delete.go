package s3

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// MaxDeleteKeys is the most keys one DeleteObjects request may name, as in S3.
const MaxDeleteKeys = 1000

// MaxDeleteBody is the largest DeleteObjects body in bytes the proxy reads
// (2 MiB): 1,000 keys of S3's maximum 1,024 bytes with a version ID each take
// about 1.15 MiB; the rest leaves room for indentation and escaped bytes.
// A larger body is refused rather than read further.
const MaxDeleteBody = 2 << 20

// ErrMalformedDelete: a DeleteObjects body that is not a Delete element of 1
// to MaxDeleteKeys objects, each with one non-empty Key, in S3's schema.
var ErrMalformedDelete = errors.New("malformed DeleteObjects body")

// s3Namespace is the namespace of S3's XML; a body may also have none.
const s3Namespace = "http://s3.amazonaws.com/doc/2006-03-01/"

// objectFields are the elements an Object of a Delete may hold besides Key
// (ETag, LastModifiedTime and Size are conditions of a conditional delete).
var objectFields = map[string]bool{"VersionId": true, "ETag": true, "LastModifiedTime": true, "Size": true}

// DeleteKeys returns the object keys a DeleteObjects body names, in order and
// with duplicates, as the bytes of each Key element's text:
//
//	<Delete><Object><Key>k</Key><VersionId>v</VersionId></Object>...<Quiet>true</Quiet></Delete>
//
// It is strict so that the keys it returns are the keys any S3 backend reads:
// ErrMalformedDelete for XML that does not parse, a document type declaration,
// an element S3's schema does not have (or in another namespace than S3's),
// text outside the leaf elements, a comment or processing instruction inside
// the Delete element, a Key given twice, empty or in more than one piece
// (text and CDATA), an Object without a Key, no Object, or more than
// MaxDeleteKeys of them. The caller bounds the body's size (MaxDeleteBody).
func DeleteKeys(body []byte) ([]string, error) {
	d := xml.NewDecoder(bytes.NewReader(body))
	d.Strict = true
	var keys []string
	depth := 0 // elements open
	inObject := false
	hasKey := false // the open Object has a Key
	leaf := ""      // the open leaf element (Key, VersionId, Quiet, ...), "" if none
	pieces := 0     // text tokens in the open leaf
	key := ""       // the open Key's text
	quiet := false  // Quiet was given
	ended := false  // Delete is closed
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformedDelete, err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if t.Name.Space != "" && t.Name.Space != s3Namespace {
				return nil, fmt.Errorf("%w: element %s in namespace %q", ErrMalformedDelete, t.Name.Local, t.Name.Space)
			}
			name := t.Name.Local
			switch {
			case ended:
				return nil, fmt.Errorf("%w: element %s after Delete", ErrMalformedDelete, name)
			case depth == 0 && name == "Delete":
			case depth == 1 && name == "Object":
				if len(keys) == MaxDeleteKeys {
					return nil, fmt.Errorf("%w: more than %d objects", ErrMalformedDelete, MaxDeleteKeys)
				}
				inObject, hasKey = true, false
			case depth == 1 && name == "Quiet" && !quiet:
				quiet, leaf = true, name
			case depth == 2 && inObject && name == "Key" && !hasKey:
				hasKey, leaf, key = true, name, ""
			case depth == 2 && inObject && objectFields[name]:
				leaf = name
			default:
				return nil, fmt.Errorf("%w: unexpected element %s", ErrMalformedDelete, name)
			}
			depth++
			pieces = 0
		case xml.EndElement:
			depth--
			switch {
			case leaf == "Key":
				if key == "" {
					return nil, fmt.Errorf("%w: an empty Key", ErrMalformedDelete)
				}
				keys = append(keys, key)
				leaf = ""
			case leaf != "":
				leaf = ""
			case depth == 1: // an Object
				if !hasKey {
					return nil, fmt.Errorf("%w: an Object without a Key", ErrMalformedDelete)
				}
				inObject = false
			case depth == 0:
				ended = true
			}
		case xml.CharData:
			switch {
			case leaf != "":
				if pieces++; pieces > 1 {
					return nil, fmt.Errorf("%w: the text of %s is in more than one piece", ErrMalformedDelete, leaf)
				}
				if leaf == "Key" {
					key = string(t)
				}
			case len(bytes.TrimSpace(t)) > 0: // xml's white space is a subset of TrimSpace's
				return nil, fmt.Errorf("%w: text outside Key, VersionId and Quiet", ErrMalformedDelete)
			}
		case xml.Comment, xml.ProcInst:
			if depth > 0 {
				return nil, fmt.Errorf("%w: a comment or processing instruction inside Delete", ErrMalformedDelete)
			}
		case xml.Directive:
			return nil, fmt.Errorf("%w: a document type declaration", ErrMalformedDelete)
		}
	}
	switch {
	case !ended:
		return nil, fmt.Errorf("%w: no Delete element", ErrMalformedDelete)
	case len(keys) == 0:
		return nil, fmt.Errorf("%w: no Object", ErrMalformedDelete)
	}
	return keys, nil
}

// KeyPath returns the path of key in the bucket whose path (as sent, still
// percent-encoded) is bucketPath ("/bkt"): each segment escaped as S3 SDKs
// escape a key in a path, so that the path resolves to the resource of a
// PUT of the key.
func KeyPath(bucketPath, key string) string {
	var b strings.Builder
	b.Grow(len(bucketPath) + 1 + len(key) + len(key)/4)
	b.WriteString(bucketPath)
	for seg := range strings.SplitSeq(key, "/") {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(seg)) // also ";" and ",", as SDKs do
	}
	return b.String()
}
