package s3

import (
	"net/http"
	"testing"
)

func TestInBody(t *testing.T) {
	for q, want := range map[string]bool{
		"delete": true, "delete=": true, "x=1&delete": true, "x=1;delete": true, "%64elete": true, "DELETE": true,
		"": false, "uploads": false, "uploadId=1&partNumber=2": false, "deleted": false, "x=delete": false,
		"prefix=100%&delete": true, "prefix=100%": false,
	} {
		if got := InBody(true, q, http.Header{}, "bkt") == BulkDelete; got != want {
			t.Errorf("POST ?%s: bulk delete %v, want %v", q, got, want)
		}
		if InBody(false, q, http.Header{}, "bkt") != Path {
			t.Errorf("PUT ?%s is not a write of its path", q)
		}
	}
	form := http.Header{"Content-Type": {"multipart/form-data; boundary=x"}}
	for key, want := range map[string]Kind{"bkt": FormUpload, "bkt/": FormUpload, "bkt/obj": Path} {
		if got := InBody(true, "", form, key); got != want {
			t.Errorf("form POST to %q: %v, want %v", key, got, want)
		}
	}
}
