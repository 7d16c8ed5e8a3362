package s3

import (
	"errors"
	"strings"
	"testing"
)

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
