package sigv4

import (
	"strings"
	"testing"
)

// TestErrorTextIsBounded: a request's own values appear in an error (which
// a caller logs) cut to a few dozen bytes, however long they are; the
// headers a server accepts reach 1 MiB.
func TestErrorTextIsBounded(t *testing.T) {
	addr, results := serve(t, verifierAt(signTime))
	long := strings.Repeat("A", 64<<10)
	date := signTime.Format(timeFormat)
	cred := func(c string) string {
		return "AWS4-HMAC-SHA256 Credential=" + c + ", SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=" + strings.Repeat("0", 64)
	}
	scope := "/" + date[:8] + "/" + testRegion + "/s3/aws4_request"
	header := func(authz, xdate string) [][2]string {
		return [][2]string{{"Authorization", authz}, {"X-Amz-Date", xdate}, {"X-Amz-Content-Sha256", UnsignedPayload}}
	}
	presigned := "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" + testKey + "%2F" + date[:8] + "%2F" + testRegion +
		"%2Fs3%2Faws4_request&X-Amz-Date=" + date + "&X-Amz-SignedHeaders=host&X-Amz-Signature=" + strings.Repeat("0", 64)
	for _, c := range []struct {
		name   string
		target string
		header [][2]string
	}{
		{"credential", "/b/k", header(cred(long), date)},
		{"X-Amz-Date", "/b/k", header(cred(testKey+scope), long)},
		{"scope date", "/b/k", header(cred(testKey+"/"+long+"/"+testRegion+"/s3/aws4_request"), date)},
		{"region", "/b/k", header(cred(testKey+"/"+date[:8]+"/"+long+"/s3/aws4_request"), date)},
		{"service", "/b/k", header(cred(testKey+"/"+date[:8]+"/"+testRegion+"/"+long+"/aws4_request"), date)},
		{"unknown key", "/b/k", header(cred(long+scope), date)},
		{"signed header name", "/b/k", header(strings.Replace(cred(testKey+scope), "host;", "host;"+strings.Repeat("a", 32<<10)+"B;", 1), date)},
		{"X-Amz-Expires", presigned + "&X-Amz-Expires=" + long, nil},
		{"bad escape", "/b/k?" + long + "=%zz", [][2]string{{"Authorization", cred(testKey + scope)}}},
	} {
		res := wireReq{method: "GET", target: c.target, host: "bucket.example", header: c.header}.send(t, addr, results)
		if res.err == nil || len(res.err.Error()) > 400 {
			t.Errorf("%s of %d bytes: error of %d bytes: %.300s", c.name, len(long), len(res.err.Error()), res.err)
		}
	}
}
