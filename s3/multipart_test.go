package s3

import (
	"errors"
	"strings"
	"testing"
)

func TestMultipartOf(t *testing.T) {
	token := func(name string) bool { return strings.EqualFold(name, "X-Fencing-Token") }
	cases := []struct {
		method, path, query string
		want                Multipart
		id                  string
	}{
		{"POST", "/b/k", "uploads", CreateUpload, ""},
		{"POST", "/b/k", "uploads=&x-id=CreateMultipartUpload", CreateUpload, ""},
		{"POST", "/b", "uploads", NotMultipart, ""}, // a bucket
		{"POST", "/b/k", "uploadId=abc%2Fd", CompleteUpload, "abc/d"},
		{"POST", "/b/k", "uploadId=u&x-id=CompleteMultipartUpload", CompleteUpload, "u"},
		{"DELETE", "/b/k", "uploadId=u", AbortUpload, "u"},
		{"DELETE", "/b/k/deep/key", "x-id=AbortMultipartUpload&uploadId=u%2B1", AbortUpload, "u+1"},
		{"DELETE", "/b/k", "uploadId=u&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=ab&x-amz-date=1", AbortUpload, "u"},
		{"DELETE", "/b/k", "uploadId=u&X-Fencing-Token=41", AbortUpload, "u"},
		{"DELETE", "/b/k", "uploadId=u&versionId=v", NotMultipart, ""},
		{"DELETE", "/b/k", "uploadId=u&x-id=DeleteObject", NotMultipart, ""},
		{"DELETE", "/b/k", "uploadId=u&uploadId=u", NotMultipart, ""},
		{"DELETE", "/b/k", "uploadId=u;a=b", NotMultipart, ""},
		{"DELETE", "/b/k", "uploadid=u", NotMultipart, ""},
		{"DELETE", "/b/k", "uploadId=", NotMultipart, ""},
		{"DELETE", "/b/k", "uploadId=%zz", NotMultipart, ""},
		{"DELETE", "/b/k", "X-Amz-=1&uploadId=u", NotMultipart, ""},
		{"DELETE", "/b/k", "", NotMultipart, ""},
		{"DELETE", "/b", "uploadId=u", NotMultipart, ""},
		{"PUT", "/b/k", "uploadId=u&partNumber=1", NotMultipart, ""},
	}
	for _, c := range cases {
		got, id := MultipartOf(c.method, c.path, c.query, token)
		if got != c.want || id != c.id {
			t.Errorf("MultipartOf(%s %s?%s) = %d, %q; want %d, %q", c.method, c.path, c.query, got, id, c.want, c.id)
		}
	}
	// Without ignored parameters, the token in the query is another parameter.
	if got, _ := MultipartOf("DELETE", "/b/k", "uploadId=u&X-Fencing-Token=41", nil); got != NotMultipart {
		t.Errorf("with ignored nil, an abort with the token in its query = %d, want NotMultipart", got)
	}
}

func TestInitiatedUpload(t *testing.T) {
	ok := `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>b</Bucket><Key>k</Key><UploadId>VXBs&amp;b2Fk</UploadId></InitiateMultipartUploadResult>`
	id, read, err := InitiatedUpload(strings.NewReader(ok))
	if err != nil || id != "VXBs&b2Fk" || string(read) != ok {
		t.Fatalf("InitiatedUpload = %q, %d bytes, %v; want VXBs&b2Fk, the whole body", id, len(read), err)
	}
	for name, body := range map[string]string{
		"error":     `<Error><Code>AccessDenied</Code><UploadId>x</UploadId></Error>`,
		"no id":     `<InitiateMultipartUploadResult><Bucket>b</Bucket></InitiateMultipartUploadResult>`,
		"not xml":   `{"UploadId": "x"}`,
		"too long":  `<InitiateMultipartUploadResult><UploadId>x</UploadId>` + strings.Repeat(" ", MaxInitiateBody) + `</InitiateMultipartUploadResult>`,
		"empty":     ``,
		"truncated": `<InitiateMultipartUploadResult><UploadId>x`,
	} {
		id, read, err := InitiatedUpload(strings.NewReader(body))
		if err == nil || id != "" {
			t.Errorf("%s: InitiatedUpload = %q, %v; want an error", name, id, err)
		}
		if name != "too long" && string(read) != body {
			t.Errorf("%s: read %d bytes, want the body's %d", name, len(read), len(body))
		}
		if name == "no id" && !errors.Is(err, ErrNoUploadID) {
			t.Errorf("no id: %v, want ErrNoUploadID", err)
		}
	}
}
