package server_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// TestS3GatewaySignedStreaming sends 1 MiB PutObjects in both signed
// streaming forms (STREAMING-AWS4-HMAC-SHA256-PAYLOAD, and its -TRAILER form
// with a crc32 trailer), signed with worker1's proxy key (the seed by
// aws-sdk-go-v2's SignHTTP, the chunks by its StreamSigner, the trailer per
// the spec): versitygw stores exactly the payload. A byte changed in the
// middle chunk cuts the upload: the client gets 400 IncompleteBody, less
// than the body reaches the store and the object stays as it was; the
// fence was raised by the admitted write, as for any admitted write whose
// body then fails.
func TestS3GatewaySignedStreaming(t *testing.T) {
	g := startGateway(t, nil)
	var chunks [][]byte
	for i := range 16 {
		chunks = append(chunks, bytes.Repeat([]byte{byte('a' + i)}, 64<<10))
	}
	payload := bytes.Join(chunks, nil)

	for _, trailer := range []bool{false, true} {
		key := "w1/stream"
		if trailer {
			key += "-trailer"
		}
		status, code, err := g.streamPut(t, key, 7, trailer, chunks, nil)
		if err != nil || status != http.StatusOK {
			t.Fatalf("a signed stream (trailer %v): %d %s %v; want 200", trailer, status, code, err)
		}
		if got, _ := g.object(t, "jobs", key); got != string(payload) {
			t.Errorf("versitygw holds %d bytes of %s; want the %d bytes of the payload", len(got), key, len(payload))
		}
	}

	for _, trailer := range []bool{false, true} {
		key := "w1/stream"
		if trailer {
			key += "-trailer"
		}
		sent := g.fwd.quiet()
		status, code, err := g.streamPut(t, key, 8, trailer, chunks, func(enc []byte) {
			enc[bytes.Index(enc, bytes.Repeat([]byte("h"), 64))+1000] = 'X' // in the 8th chunk of 16
		})
		forwarded := g.fwd.Sent() - sent
		t.Logf("a bad 8th chunk (trailer %v): %d %s %v; %d bytes reached the store; fence %s", trailer, status, code, err,
			forwarded, g.fence(t, "jobs/"+key))
		if status != http.StatusBadRequest || code != "IncompleteBody" {
			t.Errorf("a bad chunk in the middle (trailer %v): %d %s %v; want 400 IncompleteBody", trailer, status, code, err)
		}
		if forwarded >= int64(len(payload)) {
			t.Errorf("%d bytes reached the store; want less than the payload's %d", forwarded, len(payload))
		}
		if !strings.Contains(g.in.Logs.String(), "chunk signature does not match: chunk 65536 bytes at payload offset 458752") {
			t.Errorf("no log line names the 8th chunk's bad signature:\n%s", g.in.Logs)
		}
		if got, _ := g.object(t, "jobs", key); got != string(payload) {
			t.Errorf("versitygw holds %d bytes of %s; want the first upload's", len(got), key)
		}
		if f := g.fence(t, "jobs/"+key); f != "8" {
			t.Errorf("the fence of jobs/%s is %s; want 8 (raised at admission)", key, f)
		}
	}
}
