package server_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/internal/s3backend"
	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// Every cut of an upload the proxy makes mid-body reaches versitygw as a
// TCP reset (over TLS: without a close_notify), never as an orderly close:
// versitygw v1.8.0 takes an orderly close for the end of the body and
// stores what arrived (over TLS a close_notify, and a bare FIN at a record
// boundary too, which Go's crypto/tls reads as the end), a reset fails its
// read. TestCutReset cuts a 41
// upload of a few hundred KiB once per cause, after versitygw's connection
// got part of its body, and reads versitygw directly afterwards: the object
// is its previous content (a token-40 write) or absent, never a truncated
// body.
//
// The uploads sign with UNSIGNED-PAYLOAD and carry no checksum (as a
// presigned PUT does): versitygw then has nothing but the connection's end
// to tell a whole body from a cut one. A relay between the proxy and
// versitygw counts the bytes versitygw's connection got (to cut mid-body,
// and to know when versitygw is done with the connection) and passes each
// end on as it came: a FIN as a FIN, a reset as a reset, TLS bytes
// untouched.
//
// Its teeth: built with -tags upstreamteeth and run with
// FENCEPROXY_TEST_UPSTREAM_UNPROTECTED=reset (the proxy then closes its
// upstream connections with a FIN, and a close_notify over TLS), it finds
// the truncated 41 body in versitygw for every cause that sent part of a
// body (the fast path's small bodies never do).

const (
	cutAdminToken = "cut-adm1n"
	cutBucket     = "jobs"
	cutBodySize   = 320 << 10 // streamed: past the fast path's 64 KiB
	cutSent       = 160 << 10 // what the client sends of it before the cut
	cutCarried    = 128 << 10 // what versitygw's connection got, at least, before the cut
	cutSmallSize  = 48 << 10  // the fast path's: read whole before anything is sent
	cutSmallSent  = 16 << 10
)

// TestCutReset: one subtest per cause of a cut (a raise, the upload idle
// timeout, the client resetting or closing its connection, the proxy's
// shutdown), over HTTP and TLS to versitygw, with the key holding a token-40
// object beforehand and absent; over HTTP also a small body the fast path
// reads ahead, where a cut sends nothing at all.
func TestCutReset(t *testing.T) {
	for _, tr := range []struct {
		name string
		tls  bool
	}{{"http", false}, {"tls", true}} {
		t.Run(tr.name, func(t *testing.T) {
			var backend *s3backend.Server
			var caFile string
			if tr.tls {
				cert, key, pool := servertest.TLSFiles(t)
				backend, caFile = s3backend.StartTLS(t, cert, key, pool), cert
			} else {
				backend = s3backend.Start(t)
			}
			backend.CreateBucket(t, cutBucket)
			rig := startCutRig(t, backend, caFile, nil)
			idle := startCutRig(t, backend, caFile, map[string]string{"FENCEPROXY_UPLOAD_IDLE_TIMEOUT": "1s"})
			variants := []cutVariant{{"existing", true, false}, {"absent", false, false}}
			if !tr.tls { // the fast path is for http:// backends only
				variants = append(variants, cutVariant{"small", true, true})
			}
			for _, v := range variants {
				t.Run("raise/"+v.name, func(t *testing.T) { rig.raise(t, v) })
			}
			for _, v := range variants {
				t.Run("idle/"+v.name, func(t *testing.T) { idle.idle(t, v) })
			}
			for _, v := range variants {
				t.Run("client-reset/"+v.name, func(t *testing.T) { rig.clientGone(t, v, true) })
			}
			for _, v := range variants {
				t.Run("client-close/"+v.name, func(t *testing.T) { rig.clientGone(t, v, false) })
			}
			for _, v := range variants[:2] {
				t.Run("shutdown/"+v.name, func(t *testing.T) {
					startCutRig(t, backend, caFile, map[string]string{"FENCEPROXY_SHUTDOWN_TIMEOUT": "1s"}).shutdown(t, v)
				})
			}
		})
	}
}

// cutVariant is the key's state before the 41 upload and the body's size.
type cutVariant struct {
	name     string
	existing bool // the key holds a token-40 object (else it is absent)
	small    bool // a body the fast path reads whole before sending
}

// cutRig is a fenceproxy in S3 pass mode in front of versitygw through a
// cutRelay.
type cutRig struct {
	backend *s3backend.Server
	relay   *cutRelay
	in      *servertest.Instance
	sdk     *s3.Client // of the proxy, sending client.WithToken's token
}

// startCutRig starts a relay to backend and a fenceproxy in front of it
// with env added (caFile: the CA the proxy trusts for an https backend).
func startCutRig(t *testing.T, backend *s3backend.Server, caFile string, env map[string]string) *cutRig {
	t.Helper()
	scheme, target, _ := strings.Cut(backend.URL, "://")
	relay := startCutRelay(t, target)
	full := map[string]string{
		"FENCEPROXY_UPSTREAM": scheme + "://" + relay.addr(), "FENCEPROXY_DATA_DIR": t.TempDir(),
		"FENCEPROXY_S3": "pass", "FENCEPROXY_S3_DOMAINS": "127.0.0.1", "FENCEPROXY_ADMIN_TOKEN": cutAdminToken,
	}
	if caFile != "" {
		full["FENCEPROXY_UPSTREAM_CA_FILE"] = caFile
	}
	for k, v := range env {
		full[k] = v
	}
	in := servertest.Start(t, full)
	return &cutRig{backend: backend, relay: relay, in: in,
		sdk: s3.New(backend.Options(in.ProxyURL()), client.S3Fencing(client.ContextToken))}
}

// cutKey is the object key of a subtest: its name's last two parts.
func cutKey(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	return "cut/" + strings.Join(parts[len(parts)-2:], "-") + ".bin"
}

// cutBody is n bytes of a pattern that names token, so that a stored body
// shows whose it is.
func cutBody(token uint64, n int) []byte {
	line := fmt.Sprintf("token %d writes this line.\n", token)
	return bytes.Repeat([]byte(line), n/len(line)+1)[:n]
}

// cutUploadState is an upload under way and what it is checked against.
type cutUploadState struct {
	rig      *cutRig
	key      string
	previous []byte // the key's object before (nil: absent)
	body     []byte // the 41 upload's
	up       *cutUpload
	carrier  *cutRelayConn // the relay connection that carried it (streamed bodies)
	relayed  int64         // the relay's upstream bytes before it (small bodies)
}

// begin seeds the key for v, starts the 41 upload and returns once it is
// mid-body: versitygw's connection got at least cutCarried bytes of a
// streamed body, or the proxy admitted (and reads ahead) a small one.
// trickle: the client keeps sending a few bytes now and then (never the
// whole body) instead of stopping.
func (r *cutRig) begin(t *testing.T, v cutVariant, trickle bool) *cutUploadState {
	t.Helper()
	s := &cutUploadState{rig: r, key: cutKey(t)}
	if v.existing {
		s.previous = cutBody(40, 100<<10)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := r.sdk.PutObject(client.WithToken(ctx, 40), &s3.PutObjectInput{Bucket: aws.String(cutBucket),
			Key: aws.String(s.key), Body: bytes.NewReader(s.previous)}); err != nil {
			t.Fatalf("PutObject of %s with token 40 through the proxy: %v", s.key, err)
		}
		if got, ok := r.stored(t, s.key); !ok || !bytes.Equal(got, s.previous) {
			t.Fatalf("versitygw holds %d bytes (exists %v) of %s after the token-40 write; want its %d", len(got), ok, s.key, len(s.previous))
		}
	}
	size, sent := cutBodySize, cutSent
	if v.small {
		size, sent = cutSmallSize, cutSmallSent
	}
	s.body = cutBody(41, size)
	if v.small {
		// The gauge counts admitted writes until their handler returns,
		// which may be a moment after their client read the answer; only
		// the gauge shows it.
		servertest.Eventually(t, 10*time.Second, "no write is in flight", func() bool {
			return r.metric(t, "fenceproxy_inflight_requests") == 0
		})
	}
	snap := r.relay.snapshot()
	s.relayed = r.relay.total()
	s.up = r.startUpload(t, s.key, 41, s.body, sent)
	if trickle {
		s.up.trickle(size - 1<<10)
	}
	if v.small {
		// The admission shows only in the in-flight gauge.
		servertest.Eventually(t, 10*time.Second, "the proxy admits the small upload", func() bool {
			return r.metric(t, "fenceproxy_inflight_requests") >= 1
		})
		return s
	}
	s.carrier = r.relay.waitCarried(t, snap, cutCarried)
	return s
}

// upstreamUnprotected reports whether the teeth build runs with the named
// upstream protection off.
func upstreamUnprotected(name string) bool {
	return upstreamTeeth && strings.Contains(","+os.Getenv("FENCEPROXY_TEST_UPSTREAM_UNPROTECTED")+",", ","+name+",")
}

// check asserts what versitygw holds at the key afterwards: the previous
// object or none, never (part of) the 41 body; for a small body also that
// nothing of it reached versitygw at all.
func (s *cutUploadState) check(t *testing.T) {
	t.Helper()
	if s.carrier != nil {
		select {
		case <-s.carrier.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the relay connection that carried the upload did not end within 10s of the cut")
		}
		t.Logf("versitygw's connection got %d bytes of the request before the cut (body %d, client sent %d)",
			s.carrier.up.Load(), len(s.body), s.up.sent.Load())
	} else if n := s.rig.relay.total() - s.relayed; n != 0 {
		t.Errorf("the small upload cut before its end sent %d bytes to versitygw; want none (the fast path reads it whole first)", n)
	}
	got, ok := s.rig.stored(t, s.key)
	if s.carrier != nil && upstreamUnprotected("reset") {
		// Teeth: the cut reached versitygw as a FIN; it stores the prefix.
		if !ok || len(got) == 0 || len(got) >= len(s.body) || !bytes.HasPrefix(s.body, got) {
			t.Errorf("teeth: with the reset off versitygw holds %d bytes (object %v), want a truncated 41 body", len(got), ok)
			return
		}
		t.Logf("teeth: with the reset off versitygw stored the first %d of %d bytes of the cut 41 body", len(got), len(s.body))
		return
	}
	switch {
	case s.previous == nil && !ok:
		return
	case ok && bytes.Equal(got, s.previous):
		return
	}
	what := "other content"
	switch {
	case !ok:
		what = "no object"
	case bytes.Equal(got, s.body):
		what = "the whole 41 body, although the proxy cut it off"
	case bytes.HasPrefix(s.body, got):
		what = fmt.Sprintf("a TRUNCATED 41 body: its first %d of %d bytes", len(got), len(s.body))
	}
	want := "no object"
	if s.previous != nil {
		want = fmt.Sprintf("the token-40 object (%d bytes)", len(s.previous))
	}
	t.Errorf("versitygw holds %d bytes at %s/%s after the cut: %s; want %s", len(got), cutBucket, s.key, what, want)
}

// raise: an admin raise to 42 while 41 is mid-body cuts the upload: 409
// stale naming 42.
func (r *cutRig) raise(t *testing.T, v cutVariant) {
	cut := r.metric(t, `fenceproxy_upstream_errors_total{kind="upload_cut"}`)
	s := r.begin(t, v, v.small)
	defer s.up.close()
	status, body := servertest.Call(t, http.MethodPut, r.in.ControlURL()+"/v1/fences/"+cutBucket+"/"+s.key, `{"token":"42"}`, cutAdminToken)
	if status != http.StatusOK || body["token"] != "42" {
		t.Fatalf("admin raise of %s/%s to 42: %d %v", cutBucket, s.key, status, body)
	}
	s.up.stopTrickle() // the raise answered: the upload was cut and answered
	resp, answer, err := s.up.answer()
	if err != nil {
		t.Fatalf("the 41 upload cut by the raise got no answer: %v", err)
	}
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Fencing-Refused") != "stale" ||
		resp.Header.Get("Fencing-Current-Token") != "42" || !strings.Contains(answer, "<Code>StaleFencingToken</Code>") {
		t.Errorf("the 41 upload cut by the raise: %d, Fencing-Refused %q, Fencing-Current-Token %q\n%s; want 409 stale naming 42",
			resp.StatusCode, resp.Header.Get("Fencing-Refused"), resp.Header.Get("Fencing-Current-Token"), answer)
	}
	if n := r.metric(t, `fenceproxy_upstream_errors_total{kind="upload_cut"}`); n != cut+1 {
		t.Errorf("upload_cut went from %v to %v; want one more (the barrier cut the upload, it was not refused at admission)", cut, n)
	}
	s.check(t)
}

// idle: the client stops sending; past UPLOAD_IDLE_TIMEOUT (1s) the upload
// is cut off: 408.
func (r *cutRig) idle(t *testing.T, v cutVariant) {
	const series = `fenceproxy_upstream_errors_total{kind="upload_timeout"}`
	before := r.metric(t, series)
	s := r.begin(t, v, false)
	defer s.up.close()
	resp, answer, err := s.up.answer()
	if err != nil {
		t.Fatalf("the 41 upload paused past the idle timeout got no answer: %v", err)
	}
	paused := time.Since(s.up.lastSend())
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(answer, "<Code>RequestTimeout</Code>") {
		t.Errorf("the 41 upload paused past the idle timeout: %d\n%s; want 408 RequestTimeout", resp.StatusCode, answer)
	}
	if paused < time.Second {
		t.Errorf("the 408 came %v after the client's last bytes; want at least the 1s idle timeout", paused)
	}
	if n := r.metric(t, series); n != before+1 {
		t.Errorf("upload_timeout went from %v to %v; want one more", before, n)
	}
	s.check(t)
}

// clientGone: the client resets its connection mid-body (nobody to answer:
// logged as 499, counted client_gone), or closes its sending side (the
// proxy reads an early end of the body: 400 IncompleteBody, counted
// bad_body; a client that closed both sides gets the same, unread).
func (r *cutRig) clientGone(t *testing.T, v cutVariant, reset bool) {
	kind := "bad_body"
	if reset {
		kind = "client_gone"
	}
	series := `fenceproxy_upstream_errors_total{kind="` + kind + `"}`
	before := r.metric(t, series)
	s := r.begin(t, v, false)
	defer s.up.close()
	if reset {
		s.up.conn.SetLinger(0)
		s.up.conn.Close()
	} else {
		s.up.conn.CloseWrite()
		resp, answer, err := s.up.answer()
		if err != nil {
			t.Fatalf("the 41 upload whose client closed its sending side got no answer: %v", err)
		}
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Fencing-Refused") != "bad_body" ||
			!strings.Contains(answer, "<Code>IncompleteBody</Code>") {
			t.Errorf("the 41 upload whose client closed its sending side: %d, Fencing-Refused %q\n%s; want 400 bad_body",
				resp.StatusCode, resp.Header.Get("Fencing-Refused"), answer)
		}
	}
	// The count is the proxy's metric, which signals no event.
	servertest.Eventually(t, 10*time.Second, "the proxy counts the upload as "+kind, func() bool { return r.metric(t, series) >= before+1 })
	s.check(t)
}

// shutdown: the proxy stops (as on SIGTERM) while 41 is mid-body; past
// SHUTDOWN_TIMEOUT (1s) it closes the client's connection, the upload
// ends with a read error on it, and the client gets no answer (logged as
// 499). Stop returns nil and the stop is not marked clean.
func (r *cutRig) shutdown(t *testing.T, v cutVariant) {
	s := r.begin(t, v, false)
	defer s.up.close()
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- r.in.Stop() }()
	resp, answer, err := s.up.answer()
	if err == nil {
		t.Errorf("the 41 upload cut by the shutdown got an answer: %d\n%s; want none (its connection closed)", resp.StatusCode, answer)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("Stop: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the proxy did not stop within 20s")
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("the proxy stopped after %v, before its 1s shutdown timeout, with an upload in flight", d)
	}
	var gone, unclean bool
	for line := range strings.SplitSeq(r.in.Logs.String(), "\n") {
		gone = gone || strings.Contains(line, `"msg":"client went away during the upload"`) &&
			strings.Contains(line, `"status":499`) && strings.Contains(line, `"resource":"`+cutBucket+"/"+s.key+`"`)
		unclean = unclean || strings.Contains(line, `"msg":"fenceproxy stopped"`) && strings.Contains(line, `"clean_stop":false`)
	}
	if !gone || !unclean {
		t.Errorf("the proxy's logs do not show the upload ended as 499 (%v) and an unclean stop (%v):\n%s", gone, unclean, r.in.Logs)
	}
	s.check(t)
}

// stored reads key straight from versitygw: its bytes and whether it exists.
func (r *cutRig) stored(t *testing.T, key string) ([]byte, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := r.backend.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(cutBucket), Key: aws.String(key)})
	var none *s3types.NoSuchKey
	if errors.As(err, &none) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("GetObject %s from versitygw: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("GetObject %s from versitygw: reading: %v", key, err)
	}
	return b, true
}

// metric reads one sample (name and labels as exposed) from the proxy's
// /metrics; -1 when absent.
func (r *cutRig) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get(r.in.ControlURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return -1
}

// cutUpload is a PUT on a raw connection to the proxy, whose body the test
// sends as far as it likes.
type cutUpload struct {
	conn   *net.TCPConn
	body   []byte
	sent   atomic.Int64
	mu     sync.Mutex // serialises writes of the body
	last   time.Time  // when the last write of the body returned; under mu
	stop   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	reader *bufio.Reader
}

// startUpload sends PUT /{bucket}/{key} with token, signed with versitygw's
// credentials for the proxy's Host and UNSIGNED-PAYLOAD, announcing body
// whole, and the first n bytes of it.
func (r *cutRig) startUpload(t *testing.T, key string, token uint64, body []byte, n int) *cutUpload {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, r.in.ProxyURL()+"/"+cutBucket+"/"+key, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("X-Fencing-Token", strconv.FormatUint(token, 10))
	req.Header.Set("X-Amz-Content-Sha256", s3UnsignedPayloadHash)
	creds := aws.Credentials{AccessKeyID: r.backend.AccessKey, SecretAccessKey: r.backend.SecretKey}
	if err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
		creds, req, s3UnsignedPayloadHash, "s3", s3backend.Region, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", req.URL.RequestURI(), req.URL.Host, len(body))
	req.Header.Write(&head)
	head.WriteString("\r\n")

	c, err := net.DialTimeout("tcp", r.in.Proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	u := &cutUpload{conn: c.(*net.TCPConn), body: body, stop: make(chan struct{})}
	u.reader = bufio.NewReader(u.conn)
	if _, err := u.conn.Write(head.Bytes()); err != nil {
		t.Fatalf("sending the upload's header: %v", err)
	}
	if err := u.send(n); err != nil {
		t.Fatalf("sending the first %d bytes of the upload's body: %v", n, err)
	}
	return u
}

// s3UnsignedPayloadHash is x-amz-content-sha256 for a body that is not
// signed (nor checked against any hash).
const s3UnsignedPayloadHash = "UNSIGNED-PAYLOAD"

// send sends the body's next n bytes.
func (u *cutUpload) send(n int) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	from := int(u.sent.Load())
	w, err := u.conn.Write(u.body[from : from+n])
	u.sent.Add(int64(w))
	u.last = time.Now()
	return err
}

// lastSend is when the last write of the body returned.
func (u *cutUpload) lastSend() time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last
}

// trickle keeps sending 256 bytes every 20ms, up to limit bytes of the body
// in all, until the upload is closed or a write fails.
func (u *cutUpload) trickle(limit int) {
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-u.stop:
				return
			case <-tick.C:
			}
			if n := min(256, limit-int(u.sent.Load())); n <= 0 || u.send(n) != nil {
				return
			}
		}
	}()
}

// answer reads the proxy's answer and its body (20s at most).
func (u *cutUpload) answer() (*http.Response, string, error) {
	u.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(u.reader, nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// stopTrickle stops trickle and waits until it sends no more.
func (u *cutUpload) stopTrickle() {
	u.once.Do(func() { close(u.stop) })
	u.wg.Wait()
}

func (u *cutUpload) close() {
	u.once.Do(func() { close(u.stop) })
	u.conn.Close()
	u.wg.Wait()
}

// cutRelay passes TCP connections from the proxy on to versitygw byte for
// byte, counting what versitygw's side got, and passes each end on as it
// came: an orderly close (EOF) as a half-close (FIN), a reset or any other
// failure as a reset (SO_LINGER 0).
type cutRelay struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []*cutRelayConn
	wg     sync.WaitGroup
	sig    servertest.Signal // notified as bytes go to versitygw
}

// cutRelayConn is one relayed connection.
type cutRelayConn struct {
	in, out *net.TCPConn  // from the proxy, to versitygw
	up      atomic.Int64  // bytes of the proxy's written to versitygw's side
	done    chan struct{} // closed when both directions ended and both sides are closed
}

func startCutRelay(t *testing.T, target string) *cutRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &cutRelay{ln: ln, target: target}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.in.Close()
			c.out.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *cutRelay) addr() string { return r.ln.Addr().String() }

func (r *cutRelay) accept() {
	defer r.wg.Done()
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", r.target)
		if err != nil {
			in.(*net.TCPConn).SetLinger(0)
			in.Close()
			continue
		}
		c := &cutRelayConn{in: in.(*net.TCPConn), out: out.(*net.TCPConn), done: make(chan struct{})}
		r.mu.Lock()
		r.conns = append(r.conns, c)
		r.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			var pipes sync.WaitGroup
			pipes.Add(2)
			go func() { defer pipes.Done(); cutPipe(c.out, c.in, &c.up, &r.sig) }()
			go func() { defer pipes.Done(); cutPipe(c.in, c.out, nil, nil) }()
			pipes.Wait()
			c.in.Close()
			c.out.Close()
			close(c.done)
		}()
	}
}

// cutPipe copies src to dst until src ends: at its EOF it half-closes dst
// (a FIN); at a reset, or a failed write to dst, it resets both.
func cutPipe(dst, src *net.TCPConn, count *atomic.Int64, sig *servertest.Signal) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.SetLinger(0)
				src.Close()
				dst.Close()
				return
			}
			if count != nil {
				count.Add(int64(n))
				sig.Notify()
			}
		}
		if errors.Is(err, io.EOF) {
			dst.CloseWrite()
			return
		}
		if err != nil {
			dst.SetLinger(0)
			dst.Close()
			src.Close()
			return
		}
	}
}

// snapshot is each connection's count now.
func (r *cutRelay) snapshot() map[*cutRelayConn]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[*cutRelayConn]int64, len(r.conns))
	for _, c := range r.conns {
		m[c] = c.up.Load()
	}
	return m
}

// total is the bytes of the proxy's that all connections wrote to versitygw.
func (r *cutRelay) total() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, c := range r.conns {
		n += c.up.Load()
	}
	return n
}

// waitCarried waits until one connection wrote at least n bytes to
// versitygw since snap and returns it.
func (r *cutRelay) waitCarried(t *testing.T, snap map[*cutRelayConn]int64, n int64) *cutRelayConn {
	t.Helper()
	var found *cutRelayConn
	if !r.sig.Wait(10*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.conns {
			if c.up.Load()-snap[c] >= n {
				found = c
				return true
			}
		}
		return false
	}) {
		t.Fatalf("timed out after 10s waiting until versitygw's connection gets %d bytes of the upload", n)
	}
	return found
}
