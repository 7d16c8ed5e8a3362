package server_test

import (
	"bufio"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/servertest"
)

// catArrival is one request as a catalogue backend received it.
type catArrival struct {
	Method, Target, Host string
	Header               http.Header
	Body                 string
}

// catRecorder is a backend that records every request reaching it whole. A
// request whose body breaks off is never applied (no backend applies a body
// it did not get whole); it is only counted in broken.
type catRecorder struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []catArrival
	broken int
}

func newCatRecorder(t *testing.T) *catRecorder {
	t.Helper()
	b := &catRecorder{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		b.mu.Lock()
		if err != nil {
			b.broken++
			b.mu.Unlock()
			return
		}
		b.got = append(b.got, catArrival{Method: r.Method, Target: r.RequestURI, Host: r.Host, Header: r.Header.Clone(), Body: string(body)})
		b.mu.Unlock()
		io.WriteString(w, "backend")
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// take returns the requests received since the last take.
func (b *catRecorder) take() []catArrival {
	b.mu.Lock()
	defer b.mu.Unlock()
	got := b.got
	b.got = nil
	return got
}

// catTarget names what one catalogue row may use: the proxy's host, a path and
// a bucket no other row uses, and the address of a host that must never be
// reached. In S3 mode host is localhost:PORT (path style), path the object
// /{bucket}/o/k, vhost the row's bucket as a host below localhost (virtual-
// hosted style) and name the bucket's name.
type catTarget struct{ host, path, bucket, evil, vhost, name string }

// virtual returns c in virtual-hosted style: Host names the bucket, the
// bucket's path is / and the object's /o/k.
func (c catTarget) virtual() catTarget {
	c.host, c.path, c.bucket = c.vhost, strings.TrimPrefix(c.path, c.bucket), "/"
	return c
}

// rq builds a raw HTTP/1.1 request: the request line (method and target), a
// Host header, the given header lines and the blank line; a body is appended
// by the caller.
func (c catTarget) rq(line string, hdr ...string) string {
	var b strings.Builder
	b.WriteString(line + " HTTP/1.1\r\nHost: " + c.host + "\r\n")
	for _, h := range hdr {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// catRow is one bad input: the raw request and what must come back.
type catRow struct {
	name string
	raw  func(c catTarget) string
	// seed, when set, is first written (and forwarded) as the token of
	// c.path, so the row's smaller token is stale.
	seed   string
	status int
	// reason is the Fencing-Refused header and the problem's "reason"; empty
	// when net/http refuses the request before any handler runs (early).
	reason string
	early  bool
	token  string // the problem's "token" member, when the row checks it
	// forwarded counts the requests the upstream must get (control rows);
	// every other row must reach no backend at all.
	forwarded int
	check     func(t *testing.T, c catTarget, got []catArrival) // more checks on forwarded requests
	head      bool                                              // the answer to a HEAD has no body
	// then: after the answer, a fenced write without a token is sent on the
	// same connection; it must be refused (428) or find the connection closed,
	// never be tunnelled to the backend.
	then bool
	// closes: the answer says Connection: close and the proxy reads nothing
	// more from the connection (what follows is never a request).
	closes bool
	// halfClose: the client closes its side of the connection (TCP FIN)
	// once the request is written; it still reads the answer.
	halfClose bool

	// s3, when set, runs the row in S3 mode (FENCEPROXY_S3=pass,
	// S3_DOMAINS=localhost) with FENCEPROXY_S3_BUCKET_WRITES set to it
	// ("default": unset). A refusal then carries an S3 <Error> body whose
	// Code is code.
	s3   string
	code string
	vh   bool // virtual-hosted style: raw gets c.virtual()
	// seedAt is the path the seed is written to, in path style; nil: c.path.
	seedAt func(c catTarget) string
	// sent: the one forwarded request reaches the backend as it was sent:
	// method, target, Host, every header field and the body, nothing added.
	sent bool
	// fences are resources and their maxima after the row (the control
	// API's), "" for a resource without a fence.
	fences func(c catTarget) map[string]string
	// defect names a known defect that makes the row fail today: the row
	// is skipped, saying so, until the defect is fixed and this is removed.
	defect string
}

const (
	catTok  = "X-Fencing-Token: 7" // a valid token on a fresh resource
	catSeed = "10"                 // the maximum of seeded resources
)

// catTokenShapes are the values ParseToken refuses (copied from proxy's
// TestParseToken table) that travel in a header field unchanged; they must
// come back 400 malformed. The table's other shapes (" 1", "1 ", "\t1", "1\n",
// "1\x00") change or are refused on the wire and have rows of their own.
var catTokenShapes = []string{
	"", "-1", "+1", "007", "00", "0x10", "1_0", "1e3", "1.0", "1 2",
	"5, 99", "5,99", "9223372036854775808", "18446744073709551615", "18446744073709551616",
	"99999999999999999999999", "١٢", "abc", "0b1",
}

func catRows() []catRow {
	put := func(hdr ...string) func(c catTarget) string {
		return func(c catTarget) string { return c.rq("PUT "+c.path, append([]string{"Content-Length: 0"}, hdr...)...) }
	}
	// putAt sends a valid write to the row's path with suffix appended raw.
	putAt := func(suffix string, hdr ...string) func(c catTarget) string {
		return func(c catTarget) string {
			return c.rq("PUT "+c.path+suffix, append([]string{catTok, "Content-Length: 0"}, hdr...)...)
		}
	}
	one := func(method string) func(t *testing.T, c catTarget, got []catArrival) {
		return func(t *testing.T, c catTarget, got []catArrival) {
			if got[0].Method != method || got[0].Target != c.path || got[0].Host != c.host {
				t.Errorf("backend got %s %s Host %s; want %s %s Host %s", got[0].Method, got[0].Target, got[0].Host, method, c.path, c.host)
			}
		}
	}
	rows := []catRow{
		// Controls: the recorder sees what is forwarded.
		{name: "control/valid PUT is forwarded", raw: put(catTok), status: 200, forwarded: 1, check: one("PUT")},
		{name: "control/GET passes unfenced", raw: func(c catTarget) string { return c.rq("GET " + c.path) }, status: 200, forwarded: 1, check: one("GET")},
		{name: "control/60 KiB of headers, below the limit, is forwarded", raw: put(catTok, "X-Pad: "+strings.Repeat("p", 60<<10)), status: 200, forwarded: 1, check: one("PUT")},
		{name: "control/GET overriding to GET passes unfenced", raw: func(c catTarget) string { return c.rq("GET "+c.path, "X-HTTP-Method-Override: GET") }, status: 200, forwarded: 1, check: one("GET")},
		{name: "control/GET overriding to DELETE with a token is fenced and forwarded", raw: func(c catTarget) string {
			return c.rq("GET "+c.path, "X-HTTP-Method-Override: DELETE", catTok)
		}, status: 200, forwarded: 1, check: one("GET")},
		{name: "control/equal token passes", raw: put("X-Fencing-Token: " + catSeed), seed: catSeed, status: 200, forwarded: 1, check: one("PUT")},
	}

	// Token shapes.
	for _, v := range catTokenShapes {
		rows = append(rows, catRow{name: "token/" + strconv.Quote(v), raw: put("X-Fencing-Token: " + v), status: 400, reason: "malformed"})
	}
	rows = append(rows,
		// Leading and trailing whitespace is not part of a field value (RFC 9110
		// 5.5): " 1" arrives as "1", which is then stale below the seed.
		catRow{name: `token/" 1" is trimmed to 1`, raw: put("X-Fencing-Token:  1"), seed: catSeed, status: 409, reason: "stale", token: "1"},
		catRow{name: `token/"1 " is trimmed to 1`, raw: put("X-Fencing-Token: 1 "), seed: catSeed, status: 409, reason: "stale", token: "1"},
		catRow{name: `token/"\t1" is trimmed to 1`, raw: put("X-Fencing-Token:\t1"), seed: catSeed, status: 409, reason: "stale", token: "1"},
		// A line feed ends the field line: "1\n" arrives as "1".
		catRow{name: `token/"1\n" ends the line`, raw: func(c catTarget) string {
			return "PUT " + c.path + " HTTP/1.1\r\nHost: " + c.host + "\r\nX-Fencing-Token: 1\nContent-Length: 0\r\n\r\n"
		}, seed: catSeed, status: 409, reason: "stale", token: "1"},
		catRow{name: `token/"1\x00" is refused by net/http`, raw: put("X-Fencing-Token: 1\x00"), status: 400, early: true},
		catRow{name: "token/empty with spaces", raw: put("X-Fencing-Token:   "), status: 400, reason: "malformed"},
		catRow{name: "token/twice, same value", raw: put("X-Fencing-Token: 7", "X-Fencing-Token: 7"), status: 400, reason: "malformed"},
		catRow{name: "token/twice, different values", raw: put("X-Fencing-Token: 5", "X-Fencing-Token: 99"), status: 400, reason: "malformed"},
		catRow{name: "token/twice, name spelled differently", raw: put("x-fencing-token: 7", "X-FENCING-TOKEN: 7"), status: 400, reason: "malformed"},
		catRow{name: "token/twice, one empty", raw: put("X-Fencing-Token: 7", "X-Fencing-Token:"), status: 400, reason: "malformed"},
		catRow{name: "token/missing", raw: put(), status: 428, reason: "missing"},
		catRow{name: "token/stale", raw: put("X-Fencing-Token: 9"), seed: catSeed, status: 409, reason: "stale", token: "9"},
		catRow{name: "token/stale zero", raw: put("X-Fencing-Token: 0"), seed: catSeed, status: 409, reason: "stale", token: "0"},
	)

	// Framing and header syntax (request smuggling).
	chunked := "5\r\nhello\r\n0\r\n\r\n"
	rows = append(rows,
		// Transfer-Encoding wins and net/http drops Content-Length (RFC 9112
		// 6.3); the request is then fenced like any other.
		catRow{name: "smuggling/Content-Length with chunked, no token", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, "Content-Length: 3", "Transfer-Encoding: chunked") + chunked + c.rq("DELETE "+c.path+"/smuggled")
		}, status: 428, reason: "missing", closes: true},
		catRow{name: "smuggling/Content-Length with chunked, stale token", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, "X-Fencing-Token: 3", "Content-Length: 3", "Transfer-Encoding: chunked") + chunked
		}, seed: catSeed, status: 409, reason: "stale", token: "3"},
		catRow{name: "smuggling/chunked after Content-Length, no token", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, "Transfer-Encoding: chunked", "Content-Length: 100") + chunked
		}, status: 428, reason: "missing"},
		// With a valid token it is forwarded once, reframed: the chunked body
		// and no Content-Length. The connection closes after the answer (RFC
		// 9112 6.3), so the bytes after the last chunk, which the
		// Content-Length covers, are never read as a request of their own.
		catRow{name: "smuggling/Content-Length with chunked, valid token, reframed", raw: func(c catTarget) string {
			smuggled := c.rq("DELETE " + c.path + "/smuggled")
			return c.rq("PUT "+c.path, catTok, "Content-Length: "+strconv.Itoa(len(chunked)+len(smuggled)), "Transfer-Encoding: chunked") + chunked
		}, status: 200, forwarded: 1, closes: true, check: func(t *testing.T, c catTarget, got []catArrival) {
			if got[0].Body != "hello" || got[0].Header.Get("Content-Length") != "" {
				t.Errorf("backend got body %q, Content-Length %q; want hello and none", got[0].Body, got[0].Header.Get("Content-Length"))
			}
		}},
		catRow{name: "smuggling/two different Content-Lengths", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, catTok, "Content-Length: 5", "Content-Length: 6") + "hello!"
		}, status: 400, early: true},
		catRow{name: "smuggling/Content-Length list", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, catTok, "Content-Length: 5, 6") + "hello!"
		}, status: 400, early: true},
		catRow{name: "smuggling/signed Content-Length", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, catTok, "Content-Length: +5") + "hello"
		}, status: 400, early: true},
		// net/http answers a transfer coding other than one "chunked" with 501
		// (RFC 9112 6.1: "SHOULD respond with 501"), before any handler.
		catRow{name: "smuggling/Transfer-Encoding gzip", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, catTok, "Transfer-Encoding: gzip") + chunked
		}, status: 501, early: true},
		catRow{name: "smuggling/Transfer-Encoding gzip, chunked", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, catTok, "Transfer-Encoding: gzip, chunked") + chunked
		}, status: 501, early: true},
		catRow{name: "smuggling/Transfer-Encoding identity", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, catTok, "Transfer-Encoding: identity", "Content-Length: 5") + "hello"
		}, status: 501, early: true},
		catRow{name: "smuggling/Transfer-Encoding chunked twice", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, catTok, "Transfer-Encoding: chunked", "Transfer-Encoding: chunked") + chunked
		}, status: 501, early: true},
		catRow{name: "smuggling/Transfer-Encoding xchunked", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, catTok, "Transfer-Encoding: xchunked") + chunked
		}, status: 501, early: true},
		catRow{name: "smuggling/whitespace before colon in token header", raw: put("X-Fencing-Token : 7"), status: 400, early: true},
		catRow{name: "smuggling/whitespace before colon in Transfer-Encoding", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, catTok, "Transfer-Encoding : chunked") + chunked
		}, status: 400, early: true},
		catRow{name: "smuggling/whitespace before colon in Content-Length", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, catTok, "Content-Length : 5") + "hello"
		}, status: 400, early: true},
		// obs-fold (RFC 9112 5.2): net/http joins the lines, so the token is "5 99".
		catRow{name: "smuggling/obs-fold in the token header", raw: put("X-Fencing-Token: 5", " 99"), status: 400, reason: "malformed"},
		catRow{name: "smuggling/obs-fold before the first header", raw: func(c catTarget) string {
			return "PUT " + c.path + " HTTP/1.1\r\n X-Fencing-Token: 7\r\nHost: " + c.host + "\r\nContent-Length: 0\r\n\r\n"
		}, status: 400, early: true},
		catRow{name: "smuggling/obs-fold Transfer-Encoding", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, catTok, "Transfer-Encoding: gzip,", " chunked") + chunked
		}, status: 501, early: true},
		catRow{name: "smuggling/HTTP/1.0 with chunked, no token", raw: func(c catTarget) string {
			return "PUT " + c.path + " HTTP/1.0\r\nHost: " + c.host + "\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
		}, status: 428, reason: "missing"},
	)

	// Bodies that break off: never applied, never answered 2xx. The backend
	// may get the start of a streamed upload, never its end.
	withBody := func(method string, hdr []string, body string) func(c catTarget) string {
		return func(c catTarget) string { return c.rq(method+" "+c.path, hdr...) + body }
	}
	te := "Transfer-Encoding: chunked"
	rows = append(rows,
		catRow{name: "body/bad chunk size", raw: withBody("PUT", []string{catTok, te}, "3\r\nabc\r\nZZ\r\n"), status: 400, reason: "bad_body", closes: true},
		catRow{name: "body/chunk longer than its size", raw: withBody("PUT", []string{catTok, te}, "3\r\nabcdef\r\n0\r\n\r\n"), status: 400, reason: "bad_body", closes: true},
		catRow{name: "body/chunk size overflowing 64 bits", raw: withBody("PUT", []string{catTok, te}, "fffffffffffffffff\r\nabc\r\n0\r\n\r\n"), status: 400, reason: "bad_body", closes: true},
		catRow{name: "body/chunk size with a sign", raw: withBody("PUT", []string{catTok, te}, "-3\r\nabc\r\n0\r\n\r\n"), status: 400, reason: "bad_body", closes: true},
		catRow{name: "body/chunked cut short, half-close", raw: withBody("PUT", []string{catTok, te}, "5\r\nab"), status: 400, reason: "bad_body", closes: true, halfClose: true},
		catRow{name: "body/last chunk without its end, half-close", raw: withBody("PUT", []string{catTok, te}, "3\r\nabc\r\n0\r\n"), status: 400, reason: "bad_body", closes: true, halfClose: true},
		catRow{name: "body/Content-Length cut short, half-close", raw: withBody("PUT", []string{catTok, "Content-Length: 10"}, "abc"), status: 400, reason: "bad_body", closes: true, halfClose: true},
		catRow{name: "body/large Content-Length cut short, half-close", raw: withBody("PUT", []string{catTok, "Content-Length: 100000"}, strings.Repeat("x", 1000)), status: 400, reason: "bad_body", closes: true, halfClose: true},
		catRow{name: "body/bad chunk on an unfenced GET", raw: withBody("GET", []string{te}, "3\r\nabc\r\nZZ\r\n"), status: 400, reason: "bad_body", closes: true},
		catRow{name: "body/Content-Length cut short on a write without a token, half-close", raw: withBody("PUT", []string{"Content-Length: 10"}, "abc"), status: 428, reason: "missing", halfClose: true},
	)

	// Other hosts: the proxy refuses or forwards to its upstream, nowhere else.
	absolute := func(c catTarget) string { return "http://" + c.evil + c.path }
	toUpstream := func(host func(c catTarget) string) func(t *testing.T, c catTarget, got []catArrival) {
		return func(t *testing.T, c catTarget, got []catArrival) {
			if got[0].Target != c.path || got[0].Host != host(c) {
				t.Errorf("upstream got %s Host %s; want %s Host %s", got[0].Target, got[0].Host, c.path, host(c))
			}
		}
	}
	evilHost := func(c catTarget) string { return c.evil }
	rows = append(rows,
		// Absolute-form targets are for forward proxies; the proxy refuses
		// them rather than send them upstream under the named host.
		catRow{name: "host/absolute-form to another host, valid token", raw: func(c catTarget) string {
			return c.rq("PUT "+absolute(c), catTok, "Content-Length: 0")
		}, status: 400, reason: "bad_resource"},
		catRow{name: "host/absolute-form GET to another host", raw: func(c catTarget) string {
			return c.rq("GET " + absolute(c))
		}, status: 400, reason: "bad_resource"},
		catRow{name: "host/absolute-form https to another host, valid token", raw: func(c catTarget) string {
			return c.rq("PUT https://"+c.evil+c.path, catTok, "Content-Length: 0")
		}, status: 400, reason: "bad_resource"},
		catRow{name: "host/absolute-form naming the proxy itself", raw: func(c catTarget) string {
			return c.rq("PUT http://"+c.host+c.path, catTok, "Content-Length: 0")
		}, status: 400, reason: "bad_resource"},
		catRow{name: "host/absolute-form, no token", raw: func(c catTarget) string {
			return c.rq("PUT "+absolute(c), "Content-Length: 0")
		}, status: 400, reason: "bad_resource"},
		catRow{name: "host/absolute-form, stale token", raw: func(c catTarget) string {
			return c.rq("PUT "+absolute(c), "X-Fencing-Token: 9", "Content-Length: 0")
		}, seed: catSeed, status: 400, reason: "bad_resource"},
		catRow{name: "host/absolute-form with a dot segment", raw: func(c catTarget) string {
			return c.rq("PUT "+absolute(c)+"/../x", catTok, "Content-Length: 0")
		}, status: 400, reason: "bad_resource"},
		catRow{name: "host/Host header naming another host goes to the upstream only", raw: func(c catTarget) string {
			return "PUT " + c.path + " HTTP/1.1\r\nHost: " + c.evil + "\r\n" + catTok + "\r\nContent-Length: 0\r\n\r\n"
		}, status: 200, forwarded: 1, check: toUpstream(evilHost)},
		catRow{name: "host/target starting with // goes to the upstream only", raw: func(c catTarget) string {
			return c.rq("PUT //"+c.evil+c.path, catTok, "Content-Length: 0")
		}, status: 200, forwarded: 1, check: func(t *testing.T, c catTarget, got []catArrival) {
			if want := "//" + c.evil + c.path; got[0].Target != want {
				t.Errorf("upstream got target %s; want %s", got[0].Target, want)
			}
		}},
		catRow{name: "host/CONNECT to another host, no token", raw: func(c catTarget) string { return c.rq("CONNECT " + c.evil) }, status: 400, reason: "bad_resource"},
		catRow{name: "host/CONNECT to another host, valid token", raw: func(c catTarget) string { return c.rq("CONNECT "+c.evil, catTok) }, status: 400, reason: "bad_resource"},
		// The asterisk-form is only for OPTIONS (RFC 9112 3.2.4).
		catRow{name: "host/PUT * without a token", raw: func(c catTarget) string { return c.rq("PUT *", "Content-Length: 0") }, status: 400, reason: "bad_resource"},
		catRow{name: "host/PUT * with a token", raw: func(c catTarget) string {
			return c.rq("PUT *", catTok, "Content-Length: 0")
		}, status: 400, reason: "bad_resource"},
		catRow{name: "host/PRI * HTTP/2.0 with headers and a token", raw: func(c catTarget) string {
			return "PRI * HTTP/2.0\r\nHost: " + c.host + "\r\n" + catTok + "\r\n\r\n"
		}, status: 400, reason: "bad_resource", closes: true},
		catRow{name: "host/no Host header", raw: func(c catTarget) string {
			return "PUT " + c.path + " HTTP/1.1\r\n" + catTok + "\r\nContent-Length: 0\r\n\r\n"
		}, status: 400, early: true},
		catRow{name: "host/two Host headers", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, "Host: "+c.evil, catTok, "Content-Length: 0")
		}, status: 400, early: true},
	)

	// Oversized headers: the documented 64 KiB limit (net/http allows 4 KiB of slack on top).
	const maxHeaderBytes = 64 << 10
	rows = append(rows,
		catRow{name: "size/one header over 64 KiB", raw: put(catTok, "X-Pad: "+strings.Repeat("p", maxHeaderBytes+8<<10)), status: 431, early: true},
		catRow{name: "size/many headers over 64 KiB", raw: func(c catTarget) string {
			hdr := []string{catTok, "Content-Length: 0"}
			for i := range 200 {
				hdr = append(hdr, fmt.Sprintf("X-Pad-%d: %s", i, strings.Repeat("p", 400)))
			}
			return c.rq("PUT "+c.path, hdr...)
		}, status: 431, early: true},
		catRow{name: "size/token header over 64 KiB", raw: put("X-Fencing-Token: " + strings.Repeat("7", maxHeaderBytes+8<<10)), status: 431, early: true},
	)

	// Paths the fence cannot name, or that backends read differently.
	for _, suffix := range []string{
		"/./x", "/../x", "/.", "/..", "/%2e/x", "/%2E/x", "/%2e%2e/x", "/%2E%2e/x", "/%2e%2E", "/.%2e/x", "/%2e./x",
		"/%2e%2e%2fx", "/%2E%2E%2Fx", "/..%2fx", "/..%2Fx", "/.%2E%2fx", "/x/%2e%2e%2f%2e%2e%2fy", "%2f..%2fx", "%2F%2E%2E",
		"\\..\\x", "\\x", "%00", "%0a", "%0D%0A", "%1f", "%7F", "%7f", "#frag", "/x#",
		// Path parameters: servlet backends strip ";params" and read "..;" as "..".
		";x=1", "/..;/x", ";/x", "/x;", ";",
		// Not UTF-8: backends that decode paths as UTF-8 read each bad byte as U+FFFD.
		"/%FF1", "/%C3", "/%C3%28", "/%ED%A0%80", "/%C0%AF",
	} {
		rows = append(rows, catRow{name: "path/" + strconv.Quote(suffix), raw: putAt(suffix), status: 400, reason: "bad_resource"})
	}
	rows = append(rows,
		catRow{name: "path/root", raw: func(c catTarget) string { return c.rq("PUT /", catTok, "Content-Length: 0") }, status: 400, reason: "bad_resource"},
		catRow{name: "path/raw control byte, refused by net/http", raw: putAt("\x01"), status: 400, early: true},
		catRow{name: "path/raw DEL, refused by net/http", raw: putAt("\x7f"), status: 400, early: true},
		catRow{name: "path/dot segment via Destination", raw: put(catTok, "Destination: http://h/cat/%2e%2e/x"), status: 400, reason: "bad_resource"},
		catRow{name: "path/Destination with backslash", raw: put(catTok, `Destination: http://h/cat\..\x`), status: 400, reason: "bad_resource"},
		catRow{name: "path/relative Destination", raw: put(catTok, "Destination: zz"), status: 400, reason: "bad_resource"},
		catRow{name: "path/relative Destination with dots", raw: put(catTok, "Destination: ../other/x"), status: 400, reason: "bad_resource"},
		catRow{name: "path/Destination with a path parameter", raw: put(catTok, "Destination: http://h/cat/..;/x"), status: 400, reason: "bad_resource"},
		catRow{name: "path/Destination not UTF-8", raw: put(catTok, "Destination: /cat/%FF"), status: 400, reason: "bad_resource"},
	)

	// Hop-by-hop: a header the fence relies on must reach the backend.
	for _, name := range []string{
		"X-Fencing-Token", "x-fencing-token", "keep-alive, X-Fencing-Token", "X-Fencing-Token-Signature", "Host",
		"Destination", "X-HTTP-Method-Override", "X-Http-Method", "x-method-override",
	} {
		rows = append(rows, catRow{name: "hop-by-hop/Connection: " + name, raw: put(catTok, "Connection: "+name), status: 400, reason: "hop_by_hop"})
	}
	rows = append(rows,
		catRow{name: "hop-by-hop/second Connection header names the token", raw: put(catTok, "Connection: keep-alive", "Connection: X-Fencing-Token"), status: 400, reason: "hop_by_hop"},
		catRow{name: "hop-by-hop/on an unfenced GET", raw: func(c catTarget) string {
			return c.rq("GET "+c.path, "Connection: X-Fencing-Token")
		}, status: 400, reason: "hop_by_hop"},
	)

	// Upgrades: refused, and the connection does not become a tunnel.
	rows = append(rows,
		catRow{name: "upgrade/websocket on GET", raw: func(c catTarget) string {
			return c.rq("GET "+c.path, "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")
		}, status: 400, reason: "hop_by_hop", then: true},
		catRow{name: "upgrade/websocket on PUT with a token", raw: func(c catTarget) string {
			return c.rq("PUT "+c.path, catTok, "Content-Length: 0", "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")
		}, status: 400, reason: "hop_by_hop", then: true},
		catRow{name: "upgrade/h2c on GET", raw: func(c catTarget) string {
			return c.rq("GET "+c.path, "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA")
		}, status: 400, reason: "hop_by_hop", then: true},
		catRow{name: "upgrade/h2c on OPTIONS", raw: func(c catTarget) string {
			return c.rq("OPTIONS "+c.path, "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA")
		}, status: 400, reason: "hop_by_hop", then: true},
		catRow{name: "upgrade/Upgrade without Connection", raw: func(c catTarget) string {
			return c.rq("GET "+c.path, "Upgrade: websocket")
		}, status: 400, reason: "hop_by_hop", then: true},
		catRow{name: "upgrade/HTTP/2 preface", raw: func(c catTarget) string {
			return "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
		}, status: 400, reason: "bad_resource", then: true, closes: true},
	)

	// Method override headers: fenced like the method they ask for.
	get := func(method, target string, hdr ...string) func(c catTarget) string {
		return func(c catTarget) string { return c.rq(method+" "+c.path+target, hdr...) }
	}
	rows = append(rows,
		catRow{name: "override/GET as DELETE, no token", raw: get("GET", "", "X-HTTP-Method-Override: DELETE"), status: 428, reason: "missing"},
		catRow{name: "override/GET as PUT via X-HTTP-Method", raw: get("GET", "", "X-HTTP-Method: PUT"), status: 428, reason: "missing"},
		catRow{name: "override/GET as delete via X-Method-Override, lower case", raw: get("GET", "", "X-Method-Override: delete"), status: 428, reason: "missing"},
		catRow{name: "override/GET as put, lower-case header name", raw: get("GET", "", "x-http-method-override: put"), status: 428, reason: "missing"},
		catRow{name: "override/GET as GET, DELETE", raw: get("GET", "", "X-HTTP-Method-Override: GET, DELETE"), status: 428, reason: "missing"},
		catRow{name: "override/GET with two override headers", raw: get("GET", "", "X-HTTP-Method-Override: GET", "X-HTTP-Method-Override: DELETE"), status: 428, reason: "missing"},
		catRow{name: "override/HEAD as DELETE, no token", raw: get("HEAD", "", "X-HTTP-Method-Override: DELETE"), status: 428, reason: "missing", head: true},
		catRow{name: "override/OPTIONS as PATCH, no token", raw: get("OPTIONS", "", "X-HTTP-Method: PATCH"), status: 428, reason: "missing"},
		catRow{name: "override/GET as DELETE, stale token", raw: get("GET", "", "X-HTTP-Method-Override: DELETE", "X-Fencing-Token: 9"), seed: catSeed, status: 409, reason: "stale", token: "9"},
		catRow{name: "override/HEAD as put, stale token", raw: get("HEAD", "", "X-Method-Override: put", "X-Fencing-Token: 9"), seed: catSeed, status: 409, reason: "stale", head: true},
		catRow{name: "override/GET as DELETE, malformed token", raw: get("GET", "", "X-HTTP-Method-Override: DELETE", "X-Fencing-Token: 07"), status: 400, reason: "malformed"},
		catRow{name: "override/GET as POST with ?delete", raw: get("GET", "?delete", "X-HTTP-Method-Override: POST", catTok), status: 400, reason: "unsupported"},
		catRow{name: "override/GET as post with ?delete", raw: get("GET", "?delete", "X-HTTP-Method: post", catTok), status: 400, reason: "unsupported"},
	)

	// S3 writes whose keys are in the body.
	bulk := func(query string, hdr ...string) func(c catTarget) string {
		return func(c catTarget) string {
			body := "<Delete><Object><Key>k</Key></Object></Delete>"
			return c.rq("POST "+c.bucket+query, append(hdr, "Content-Type: application/xml", "Content-Length: "+strconv.Itoa(len(body)))...) + body
		}
	}
	for _, q := range []string{"?delete", "?delete=", "?delete=1", "?x=1&delete", "?x=1;delete", "?%64elete", "?delete&x-id=DeleteObjects"} {
		rows = append(rows, catRow{name: "s3/bulk delete POST " + q, raw: bulk(q, catTok), status: 400, reason: "unsupported"})
	}
	form := func(ct, suffix string) func(c catTarget) string {
		return func(c catTarget) string {
			body := "--b\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nother/obj\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\ndata\r\n--b--\r\n"
			return c.rq("POST "+c.bucket+suffix, catTok, "Content-Type: "+ct, "Content-Length: "+strconv.Itoa(len(body))) + body
		}
	}
	rows = append(rows,
		catRow{name: "s3/bulk delete POST on a key", raw: func(c catTarget) string { return c.rq("POST "+c.path+"?delete", catTok, "Content-Length: 0") }, status: 400, reason: "unsupported"},
		catRow{name: "s3/bulk delete without a token", raw: bulk("?delete"), status: 428, reason: "missing"},
		// S3 subresource names are case-sensitive, but other backends may not be.
		catRow{name: "s3/bulk delete POST ?Delete", raw: bulk("?Delete", catTok), status: 400, reason: "unsupported"},
		catRow{name: "s3/bulk delete POST ?DELETE", raw: bulk("?DELETE", catTok), status: 400, reason: "unsupported"},
		catRow{name: "s3/form upload POST to a bucket", raw: form("multipart/form-data; boundary=b", ""), status: 400, reason: "unsupported"},
		catRow{name: "s3/form upload POST to a bucket with a slash", raw: form("multipart/form-data; boundary=b", "/"), status: 400, reason: "unsupported"},
		catRow{name: "s3/form upload, content type in capitals", raw: form("Multipart/Form-Data; boundary=b", ""), status: 400, reason: "unsupported"},
		catRow{name: "control/s3 multipart POST to a key is forwarded", raw: form("multipart/form-data; boundary=b", "/key"), status: 200, forwarded: 1},
	)
	return append(rows, catS3Rows()...)
}

// catS3Rows run in S3 mode: rows for every class of the S3 operation
// catalogue (s3.Catalogue; docs/S3.md), in path and virtual-hosted style,
// under each FENCEPROXY_S3_BUCKET_WRITES where it matters. The object of a
// row is c.path, /{bucket}/o/k; a forwarded request must reach the backend
// as it was sent, and the resources' maxima after the row are checked.
func catS3Rows() []catRow {
	const (
		dflt  = "default"            // FENCEPROXY_S3_BUCKET_WRITES unset: refuse
		stale = "X-Fencing-Token: 9" // below catSeed
	)
	type style struct {
		name string
		vh   bool
	}
	styles := []style{{"path style", false}, {"virtual-hosted", true}}
	// req builds a request to the row's object, or with bucket to its
	// bucket, with query appended; a body, and every PUT and POST, get a
	// Content-Length. "{bucket}" in a header line is the bucket's name.
	req := func(method string, bucket bool, query, body string, hdr ...string) func(c catTarget) string {
		return func(c catTarget) string {
			target := c.path
			if bucket {
				target = c.bucket
			}
			lines := make([]string, 0, len(hdr)+1)
			for _, h := range hdr {
				lines = append(lines, strings.ReplaceAll(h, "{bucket}", c.name))
			}
			if body != "" || method == http.MethodPut || method == http.MethodPost {
				lines = append(lines, "Content-Length: "+strconv.Itoa(len(body)))
			}
			return c.rq(method+" "+target+query, lines...) + body
		}
	}
	bucketRes := func(c catTarget) string { return strings.TrimPrefix(c.bucket, "/") }
	objRes := func(c catTarget) string { return strings.TrimPrefix(c.path, "/") }
	bucketAt := func(token string) func(c catTarget) map[string]string {
		return func(c catTarget) map[string]string { return map[string]string{bucketRes(c): token} }
	}
	objAt := func(token string) func(c catTarget) map[string]string {
		return func(c catTarget) map[string]string { return map[string]string{objRes(c): token, bucketRes(c): ""} }
	}
	bucketPath := func(c catTarget) string { return c.bucket }
	var rows []catRow

	// Reads: forwarded unfenced. A token is neither checked (9, below the
	// object's maximum) nor raises anything (99).
	for _, op := range []struct {
		name, method string
		bucket       bool
		query        string
		hdr          []string
	}{
		{"ListObjects", "GET", true, "", nil},
		{"ListObjectsV2", "GET", true, "?list-type=2&prefix=o%2F", nil},
		{"ListObjectVersions", "GET", true, "?versions", nil},
		{"ListMultipartUploads", "GET", true, "?uploads", nil},
		{"GetBucketPolicy", "GET", true, "?policy", nil},
		{"GetBucketLifecycleConfiguration", "GET", true, "?lifecycle", nil},
		{"HeadBucket", "HEAD", true, "", nil},
		{"GetObject", "GET", false, "?x-id=GetObject", []string{"Range: bytes=0-1"}},
		{"HeadObject", "HEAD", false, "", nil},
		{"ListParts", "GET", false, "?uploadId=u1", nil},
		{"GetObjectAcl", "GET", false, "?acl", nil},
		{"GetObjectTagging", "GET", false, "?tagging", nil},
		{"GetObjectAttributes", "GET", false, "?attributes", []string{"X-Amz-Object-Attributes: ETag"}},
		{"a CORS preflight (OPTIONS)", "OPTIONS", false, "", []string{"Origin: http://app.example", "Access-Control-Request-Method: PUT"}},
	} {
		for _, st := range styles {
			token := stale
			if st.vh {
				token = "X-Fencing-Token: 99"
			}
			rows = append(rows, catRow{name: "s3 read/" + op.name + ", " + st.name + ", with " + token, s3: dflt, vh: st.vh,
				raw: req(op.method, op.bucket, op.query, "", append([]string{token}, op.hdr...)...), seed: catSeed, head: op.method == "HEAD",
				status: 200, forwarded: 1, sent: true, fences: objAt(catSeed)})
		}
	}

	// CreateBucket writes no object: forwarded unfenced, unless fence.
	create := `<CreateBucketConfiguration><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>`
	for _, st := range styles {
		rows = append(rows,
			catRow{name: "s3 CreateBucket/" + st.name + ", not fenced by default", s3: dflt, vh: st.vh, raw: req("PUT", true, "", create, catTok),
				status: 200, forwarded: 1, sent: true, fences: bucketAt("")},
			catRow{name: "s3 CreateBucket/" + st.name + ", not fenced with pass", s3: "pass", vh: st.vh, raw: req("PUT", true, "", "", catTok),
				status: 200, forwarded: 1, sent: true, fences: bucketAt("")},
			catRow{name: "s3 CreateBucket/" + st.name + ", fenced on the bucket with fence", s3: "fence", vh: st.vh, raw: req("PUT", true, "", create, catTok),
				status: 200, forwarded: 1, sent: true, fences: bucketAt("7")},
			catRow{name: "s3 CreateBucket/" + st.name + ", stale with fence", s3: "fence", vh: st.vh, raw: req("PUT", true, "", create, stale),
				seed: catSeed, seedAt: bucketPath, status: 409, reason: "stale", code: "StaleFencingToken", token: "9", fences: bucketAt(catSeed)},
		)
	}
	rows = append(rows,
		catRow{name: "s3 CreateBucket/without a token, not fenced by default", s3: dflt, raw: req("PUT", true, "", ""),
			status: 200, forwarded: 1, sent: true, fences: bucketAt("")},
		catRow{name: "s3 CreateBucket/slash after the bucket, not fenced by default", s3: dflt, raw: func(c catTarget) string { return req("PUT", true, "/", "", catTok)(c) },
			status: 200, forwarded: 1, sent: true, fences: bucketAt("")},
		catRow{name: "s3 CreateBucket/without a token, with fence", s3: "fence", raw: req("PUT", true, "", ""),
			status: 428, reason: "missing", code: "MissingFencingToken", fences: bucketAt("")},
	)

	// A bucket's configuration: refused by default (before the token is
	// read), forwarded unfenced with pass, fenced on the bucket with fence.
	// The sub-resources of the S3 API (aws-sdk-go-v2 1.114), each with PUT
	// and DELETE, the styles alternating.
	config := `<Configuration/>`
	for i, q := range []string{
		"abac", "accelerate", "acl", "analytics&id=a", "cors", "encryption", "intelligent-tiering&id=a", "inventory&id=a",
		"lifecycle", "logging", "metadataAnnotationTable", "metadataConfiguration", "metadataInventoryTable",
		"metadataJournalTable", "metadataTable", "metrics&id=a", "notification", "object-lock", "ownershipControls",
		"policy", "publicAccessBlock", "replication", "requestPayment", "tagging", "versioning", "website",
	} {
		st, other := styles[i%2], styles[(i+1)%2]
		rows = append(rows,
			catRow{name: "s3 bucket configuration/PUT ?" + q + ", " + st.name + ", refused by default", s3: dflt, vh: st.vh,
				raw: req("PUT", true, "?"+q, config, catTok), status: 400, reason: "unsupported", code: "NotImplemented", fences: bucketAt("")},
			catRow{name: "s3 bucket configuration/DELETE ?" + q + ", " + other.name + ", refused with refuse", s3: "refuse", vh: other.vh,
				raw: req("DELETE", true, "?"+q, "", catTok), status: 400, reason: "unsupported", code: "NotImplemented", fences: bucketAt("")},
			catRow{name: "s3 bucket configuration/PUT ?" + q + ", " + other.name + ", forwarded unfenced with pass", s3: "pass", vh: other.vh,
				raw: req("PUT", true, "?"+q, config, catTok), status: 200, forwarded: 1, sent: true, fences: bucketAt("")},
			catRow{name: "s3 bucket configuration/PUT ?" + q + ", " + st.name + ", fenced on the bucket with fence", s3: "fence", vh: st.vh,
				raw: req("PUT", true, "?"+q, config, catTok), status: 200, forwarded: 1, sent: true, fences: bucketAt("7")},
		)
	}
	rows = append(rows,
		catRow{name: "s3 bucket configuration/POST ?metadataTable, refused by default", s3: dflt,
			raw: req("POST", true, "?metadataTable", config, catTok), status: 400, reason: "unsupported", code: "NotImplemented"},
		catRow{name: "s3 bucket configuration/POST ?metadataConfiguration, refused by default", s3: dflt, vh: true,
			raw: req("POST", true, "?metadataConfiguration", config, catTok), status: 400, reason: "unsupported", code: "NotImplemented"},
		catRow{name: "s3 bucket configuration/without a token, refused by default", s3: dflt,
			raw: req("PUT", true, "?policy", config), status: 400, reason: "unsupported", code: "NotImplemented"},
		catRow{name: "s3 bucket configuration/without a token, forwarded with pass", s3: "pass",
			raw: req("PUT", true, "?policy", config), status: 200, forwarded: 1, sent: true, fences: bucketAt("")},
		catRow{name: "s3 bucket configuration/without a token, with fence", s3: "fence",
			raw: req("PUT", true, "?policy", config), status: 428, reason: "missing", code: "MissingFencingToken"},
		catRow{name: "s3 bucket configuration/stale with fence", s3: "fence", vh: true, raw: req("PUT", true, "?lifecycle", config, stale),
			seed: catSeed, seedAt: bucketPath, status: 409, reason: "stale", code: "StaleFencingToken", token: "9", fences: bucketAt(catSeed)},
		catRow{name: "s3 bucket configuration/sub-resource after x-id, refused by default", s3: dflt,
			raw: req("PUT", true, "?x-id=PutBucketPolicy&policy", config, catTok), status: 400, reason: "unsupported", code: "NotImplemented"},
		catRow{name: "s3 bucket configuration/sub-resource with a value, refused by default", s3: dflt,
			raw: req("PUT", true, "?policy=", config, catTok), status: 400, reason: "unsupported", code: "NotImplemented"},
	)
	// DeleteBucket, and writes to a bucket that the catalogue does not know:
	// a bucket's configuration too.
	for i, op := range []struct{ name, method, query, body string }{
		{"DeleteBucket", "DELETE", "", ""},
		{"DeleteBucket with a slash", "DELETE", "/", ""},
		{"PATCH", "PATCH", "", "x"},
		{"an unknown method", "FROB", "", ""},
		{"PUT with an unknown sub-resource", "PUT", "?frobnicate", "<x/>"},
		{"PUT with an unknown sub-resource and a value", "PUT", "?frobnicate=1", "<x/>"},
		{"DELETE with an unknown sub-resource", "DELETE", "?frobnicate", ""},
	} {
		st := styles[i%2]
		if op.query == "/" && st.vh {
			st = styles[0]
		}
		rows = append(rows,
			catRow{name: "s3 bucket write/" + op.name + ", " + st.name + ", refused by default", s3: dflt, vh: st.vh,
				raw: req(op.method, true, op.query, op.body, catTok), status: 400, reason: "unsupported", code: "NotImplemented", fences: bucketAt("")},
			catRow{name: "s3 bucket write/" + op.name + ", " + st.name + ", forwarded unfenced with pass", s3: "pass", vh: st.vh,
				raw: req(op.method, true, op.query, op.body, catTok), status: 200, forwarded: 1, sent: true, fences: bucketAt("")},
			catRow{name: "s3 bucket write/" + op.name + ", " + st.name + ", fenced on the bucket with fence", s3: "fence", vh: st.vh,
				raw: req(op.method, true, op.query, op.body, catTok), status: 200, forwarded: 1, sent: true, fences: bucketAt("7")},
		)
	}

	// DeleteObjects: fenced on every key, all or nothing, the body forwarded
	// byte for byte (its Content-MD5 stays valid); the bucket is not fenced.
	deleteBody := func(keys ...string) string {
		var b strings.Builder
		b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`)
		for _, k := range keys {
			b.WriteString("<Object><Key>" + k + "</Key></Object>")
		}
		b.WriteString("<Quiet>true</Quiet></Delete>")
		return b.String()
	}
	two := deleteBody("o/k", "p/q")
	sum := md5.Sum([]byte(two))
	deleteHdr := []string{"Content-Type: application/xml", "Content-MD5: " + base64.StdEncoding.EncodeToString(sum[:])}
	keysAt := func(ok, pq string) func(c catTarget) map[string]string {
		return func(c catTarget) map[string]string {
			return map[string]string{objRes(c): ok, bucketRes(c) + "/p/q": pq, bucketRes(c): ""}
		}
	}
	for _, st := range styles {
		rows = append(rows,
			catRow{name: "s3 DeleteObjects/" + st.name + ", fenced on each key", s3: dflt, vh: st.vh,
				raw: req("POST", true, "?delete", two, append([]string{catTok}, deleteHdr...)...), status: 200, forwarded: 1, sent: true, fences: keysAt("7", "7")},
			catRow{name: "s3 DeleteObjects/" + st.name + ", one stale key refuses the batch", s3: dflt, vh: st.vh,
				raw: req("POST", true, "?delete&x-id=DeleteObjects", two, append([]string{stale}, deleteHdr...)...), seed: catSeed,
				status: 409, reason: "stale", code: "StaleFencingToken", token: "9", fences: keysAt(catSeed, "")},
		)
	}
	rows = append(rows,
		catRow{name: "s3 DeleteObjects/fenced on each key with fence too", s3: "fence",
			raw: req("POST", true, "?delete", two, append([]string{catTok}, deleteHdr...)...), status: 200, forwarded: 1, sent: true, fences: keysAt("7", "7")},
		catRow{name: "s3 DeleteObjects/one stale key refuses the batch with pass too", s3: "pass", vh: true,
			raw: req("POST", true, "?delete", two, append([]string{stale}, deleteHdr...)...), seed: catSeed,
			status: 409, reason: "stale", code: "StaleFencingToken", token: "9", fences: keysAt(catSeed, "")},
		catRow{name: "s3 DeleteObjects/without a token", s3: dflt, raw: req("POST", true, "?delete", two, deleteHdr...),
			status: 428, reason: "missing", code: "MissingFencingToken", fences: keysAt("", "")},
		catRow{name: "s3 DeleteObjects/malformed XML", s3: dflt, raw: req("POST", true, "?delete", "<Delete><Object><Key>o/k</Key>", catTok),
			status: 400, reason: "malformed_xml", code: "MalformedXML", fences: keysAt("", "")},
		catRow{name: "s3 DeleteObjects/1,001 keys", s3: dflt, vh: true, raw: func(c catTarget) string {
			keys := make([]string, 1001)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%d", i)
			}
			return req("POST", true, "?delete", deleteBody(keys...), catTok)(c)
		}, status: 400, reason: "malformed_xml", code: "MalformedXML"},
		catRow{name: "s3 DeleteObjects/sent to an object", s3: dflt, raw: req("POST", false, "?delete", two, catTok),
			status: 400, reason: "unsupported", code: "NotImplemented", fences: keysAt("", "")},
	)

	// PostObject: the key is in a form field; refused whatever the setting.
	form := "--b\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\no/k\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\ndata\r\n--b--\r\n"
	for _, s3 := range []string{dflt, "pass", "fence"} {
		for _, st := range styles {
			rows = append(rows, catRow{name: "s3 PostObject/" + st.name + ", with " + s3, s3: s3, vh: st.vh,
				raw:    req("POST", true, "", form, catTok, "Content-Type: multipart/form-data; boundary=b"),
				status: 400, reason: "unsupported", code: "NotImplemented", fences: objAt("")})
		}
	}

	// Object writes: fenced on {bucket}/{key} in both styles, so a stale
	// token is refused whichever style wrote the maximum (the seed: path
	// style). Operations the catalogue does not know are object writes too.
	for _, op := range []struct {
		name, method, query, body string
		hdr                       []string
	}{
		{"PutObject", "PUT", "", "data", []string{"Content-MD5: jXd/OF09/siBXSD3SWAm3A=="}},
		{"PutObject with x-id", "PUT", "?x-id=PutObject", "data", []string{"X-Amz-Content-Sha256: UNSIGNED-PAYLOAD"}},
		{"CopyObject", "PUT", "?x-id=CopyObject", "", []string{"X-Amz-Copy-Source: /{bucket}/src"}},
		{"UploadPart", "PUT", "?partNumber=1&uploadId=u1&x-id=UploadPart", "part", nil},
		{"UploadPartCopy", "PUT", "?partNumber=2&uploadId=u1&x-id=UploadPartCopy", "", []string{"X-Amz-Copy-Source: /{bucket}/src", "X-Amz-Copy-Source-Range: bytes=0-3"}},
		{"PutObjectAcl", "PUT", "?acl", "", []string{"X-Amz-Acl: private"}},
		{"PutObjectTagging", "PUT", "?tagging", "<Tagging><TagSet/></Tagging>", nil},
		{"PutObjectRetention", "PUT", "?retention", "<Retention/>", nil},
		{"PutObjectLegalHold", "PUT", "?legal-hold", "<LegalHold/>", nil},
		{"DeleteObject", "DELETE", "?x-id=DeleteObject", "", nil},
		{"DeleteObjectTagging", "DELETE", "?tagging", "", nil},
		{"CreateMultipartUpload", "POST", "?uploads&x-id=CreateMultipartUpload", "", nil},
		{"CompleteMultipartUpload", "POST", "?uploadId=u1", `<CompleteMultipartUpload><Part><ETag>"e"</ETag><PartNumber>1</PartNumber></Part></CompleteMultipartUpload>`, nil},
		{"RestoreObject", "POST", "?restore", "<RestoreRequest/>", nil},
		{"SelectObjectContent", "POST", "?select&select-type=2", "<SelectObjectContentRequest/>", nil},
		{"an unknown sub-resource", "PUT", "?frobnicate", "", nil},
		{"an unknown POST", "POST", "", "x", nil},
		{"PATCH", "PATCH", "", "data", nil},
		{"an unknown method", "FROB", "", "", nil},
	} {
		for _, st := range styles {
			rows = append(rows,
				catRow{name: "s3 object write/" + op.name + ", " + st.name + ", current token", s3: dflt, vh: st.vh,
					raw: req(op.method, false, op.query, op.body, append([]string{catTok}, op.hdr...)...), status: 200, forwarded: 1, sent: true, fences: objAt("7")},
				catRow{name: "s3 object write/" + op.name + ", " + st.name + ", stale token", s3: dflt, vh: st.vh,
					raw: req(op.method, false, op.query, op.body, append([]string{stale}, op.hdr...)...), seed: catSeed,
					status: 409, reason: "stale", code: "StaleFencingToken", token: "9", fences: objAt(catSeed)},
			)
		}
		rows = append(rows, catRow{name: "s3 object write/" + op.name + ", without a token", s3: "fence",
			raw: req(op.method, false, op.query, op.body, op.hdr...), status: 428, reason: "missing", code: "MissingFencingToken", fences: objAt("")})
	}
	// A copy reads its source: a larger maximum there refuses nothing.
	for _, q := range []string{"", "?partNumber=1&uploadId=u1"} {
		rows = append(rows, catRow{name: "s3 object write/copy " + q + " reads its source", s3: dflt,
			raw: req("PUT", false, q, "", catTok, "X-Amz-Copy-Source: /{bucket}/src"), seed: catSeed, seedAt: func(c catTarget) string { return c.bucket + "/src" },
			status: 200, forwarded: 1, sent: true, fences: func(c catTarget) map[string]string {
				return map[string]string{objRes(c): "7", bucketRes(c) + "/src": catSeed}
			}})
	}
	// AbortMultipartUpload, the plain case: the current token is forwarded.
	for _, st := range styles {
		rows = append(rows, catRow{name: "s3 AbortMultipartUpload/" + st.name + ", current token", s3: dflt, vh: st.vh,
			raw: req("DELETE", false, "?uploadId=u1&x-id=AbortMultipartUpload", "", catTok), status: 200, forwarded: 1, sent: true})
	}

	// Hosts: one that is no S3 domain of the proxy, nor a bucket below one,
	// is refused, reads too; the name is matched without regard to case, a
	// port or a trailing dot.
	withHost := func(method, host string, hdr ...string) func(c catTarget) string {
		return func(c catTarget) string {
			_, port, _ := net.SplitHostPort(c.host)
			host := strings.NewReplacer("{port}", port, "{bucket}", c.name, "{evil}", c.evil).Replace(host)
			return req(method, false, "", "", hdr...)(catTarget{host: host, path: c.path})
		}
	}
	for _, h := range []struct{ name, host string }{
		{"the proxy's IP address", "127.0.0.1:{port}"},
		{"another name", "other.example:{port}"},
		{"the other backend", "{evil}"},
		{"a name ending in the domain", "notlocalhost:{port}"},
		{"a bucket below another domain", "{bucket}.localhost.example:{port}"},
		{"a virtual-hosted bucket with an underscore", "cat_bucket.localhost:{port}"},
		{"a virtual-hosted bucket of two bytes", "ab.localhost:{port}"},
		{"an empty label", "{bucket}..localhost:{port}"},
	} {
		rows = append(rows,
			catRow{name: "s3 host/GET with Host " + h.name, s3: dflt, raw: withHost("GET", h.host), status: 400, reason: "bad_resource", code: "InvalidURI"},
			catRow{name: "s3 host/HEAD with Host " + h.name, s3: dflt, raw: withHost("HEAD", h.host), head: true, status: 400, reason: "bad_resource", code: "InvalidURI"},
			catRow{name: "s3 host/PUT with Host " + h.name, s3: dflt, raw: withHost("PUT", h.host, catTok), status: 400, reason: "bad_resource", code: "InvalidURI", fences: objAt("")},
		)
	}
	rows = append(rows,
		catRow{name: "s3 host/HTTP/1.0 GET without a Host", s3: dflt, raw: func(c catTarget) string { return "GET " + c.path + " HTTP/1.0\r\n\r\n" },
			status: 400, reason: "bad_resource", code: "InvalidURI"},
		catRow{name: "s3 host/PUT to the S3 domain itself names no bucket", s3: "pass", raw: func(c catTarget) string {
			return c.rq("PUT /", catTok, "Content-Length: 0")
		}, status: 400, reason: "bad_resource", code: "InvalidURI"},
		catRow{name: "s3 host/control: the domain in capitals", s3: dflt, raw: withHost("PUT", "LOCALHOST:{port}", catTok),
			status: 200, forwarded: 1, sent: true, fences: objAt("7")},
		catRow{name: "s3 host/control: the domain with a trailing dot, no port", s3: dflt, raw: withHost("PUT", "localhost.", catTok),
			status: 200, forwarded: 1, sent: true, fences: objAt("7")},
		catRow{name: "s3 host/control: a virtual-hosted bucket in capitals", s3: dflt, vh: true, raw: func(c catTarget) string {
			return req("PUT", false, "", "", catTok)(catTarget{host: strings.ToUpper(c.host), path: c.path})
		}, status: 200, forwarded: 1, sent: true, fences: objAt("7")},
	)

	// Method-override headers: S3 stores run the request line's method, some
	// frameworks another; the proxy reads the request one way only, so it
	// refuses them in S3 mode, reads too (400 ambiguous), under every
	// S3_BUCKET_WRITES value.
	for _, c := range []struct {
		name, method string
		bucket       bool
		query, body  string
		vh           bool
		header       []string
	}{
		{"GET as DELETE, no token", "GET", false, "", "", false, []string{"X-HTTP-Method-Override: DELETE"}},
		{"HEAD as PUT, virtual-hosted, no token", "HEAD", false, "", "", true, []string{"X-Method-Override: PUT"}},
		{"GET as PUT, virtual-hosted, stale token", "GET", false, "", "", true, []string{"X-HTTP-Method: PUT", stale}},
		{"GET as DELETE, current token", "GET", false, "", "", false, []string{"X-HTTP-Method-Override: DELETE", catTok}},
		{"PUT ?policy overriding to PUT", "PUT", true, "?policy", config, false, []string{"X-HTTP-Method-Override: PUT", catTok}},
		{"PUT ?lifecycle overriding to GET, virtual-hosted", "PUT", true, "?lifecycle", config, true, []string{"X-HTTP-Method-Override: GET", catTok}},
		{"GET as DELETE on a bucket", "GET", true, "", "", true, []string{"X-Http-Method: DELETE", catTok}},
		{"GET ?delete as POST", "GET", true, "?delete", two, false, append([]string{"X-HTTP-Method-Override: POST", catTok}, deleteHdr...)},
		{"GET as POST of a form", "GET", true, "", form, false, []string{"X-HTTP-Method-Override: POST", catTok, "Content-Type: multipart/form-data; boundary=b"}},
		{"an override spelt with underscores", "GET", false, "", "", false, []string{"X_HTTP_Method_Override: DELETE", catTok}},
	} {
		for _, bw := range []string{dflt, "pass", "fence"} {
			rows = append(rows, catRow{name: "s3 override/" + c.name + ", " + bw, s3: bw, vh: c.vh, head: c.method == "HEAD",
				raw: req(c.method, c.bucket, c.query, c.body, c.header...), status: 400, reason: "ambiguous", code: "InvalidRequest",
				fences: objAt("")})
		}
	}
	// Every POST to a bucket but a DeleteObjects is a form upload to the
	// store (versitygw routes it so, whatever its Content-Type and query):
	// refused under every S3_BUCKET_WRITES value, with a token or without.
	for i, c := range []struct{ name, query, body string }{
		{"no Content-Type", "", "<x/>"},
		{"?uploads", "?uploads", ""},
		{"?policy", "?policy", config},
	} {
		st := styles[i%2]
		for _, bw := range []string{dflt, "pass", "fence"} {
			rows = append(rows,
				catRow{name: "s3 form upload/POST " + c.name + ", " + st.name + ", " + bw, s3: bw, vh: st.vh,
					raw: req("POST", true, c.query, c.body, catTok), status: 400, reason: "unsupported", code: "NotImplemented", fences: bucketAt("")},
				catRow{name: "s3 form upload/POST " + c.name + ", " + st.name + ", " + bw + ", no token", s3: bw, vh: st.vh,
					raw: req("POST", true, c.query, c.body), status: 428, reason: "missing", code: "MissingFencingToken", fences: bucketAt("")},
			)
		}
	}
	// Two Content-Types: Go reads the first, a store the last (the issue's
	// third bypass: a form that overwrote the holder's object).
	for _, bw := range []string{dflt, "pass", "fence"} {
		rows = append(rows, catRow{name: "s3 form upload/two Content-Types, " + bw, s3: bw,
			raw:    req("POST", true, "", form, catTok, "Content-Type: text/plain", "Content-Type: multipart/form-data; boundary=b"),
			status: 400, reason: "ambiguous", code: "InvalidRequest", fences: bucketAt("")})
	}
	return rows
}

// TestBadInputCatalogue sends each bad input of the catalogue as raw bytes to
// a running fenceproxy and checks that it is refused (by the proxy with a
// problem body and Fencing-Refused, or by net/http before any handler) and
// that no backend received anything. Control rows check that valid writes do
// reach the recorder.
func TestBadInputCatalogue(t *testing.T) {
	upstream, evil := newCatRecorder(t), newCatRecorder(t)
	// One fenceproxy per mode: off, and S3 mode with each FENCEPROXY_S3_BUCKET_WRITES.
	servers := map[string]*servertest.Instance{}
	server := func(s3 string) *servertest.Instance {
		if in := servers[s3]; in != nil {
			return in
		}
		env := map[string]string{"FENCEPROXY_UPSTREAM": upstream.srv.URL, "FENCEPROXY_DATA_DIR": t.TempDir()}
		if s3 != "" {
			env["FENCEPROXY_S3"], env["FENCEPROXY_S3_DOMAINS"] = "pass", "localhost"
			if s3 != "default" {
				env["FENCEPROXY_S3_BUCKET_WRITES"] = s3
			}
		}
		servers[s3] = servertest.Start(t, env)
		return servers[s3]
	}
	rows := catRows()
	for i, row := range rows {
		in := server(row.s3)
		c := catTarget{host: in.Proxy, path: fmt.Sprintf("/cat/r%03d", i), bucket: fmt.Sprintf("/cat-r%03d", i), evil: strings.TrimPrefix(evil.srv.URL, "http://")}
		if row.s3 != "" {
			_, port, _ := net.SplitHostPort(in.Proxy)
			c.name = fmt.Sprintf("cat-r%03d", i)
			c.host, c.vhost, c.path = "localhost:"+port, c.name+".localhost:"+port, c.bucket+"/o/k"
		}
		rc := c // the row's request's
		if row.vh {
			rc = c.virtual()
		}
		t.Run(row.name, func(t *testing.T) {
			if row.defect != "" {
				t.Skip("known defect: " + row.defect)
			}
			raw := row.raw(rc)
			// Checked also when the row fails early, so arrivals are never
			// blamed on the next row.
			defer func() {
				got := upstream.take()
				if len(got) != row.forwarded {
					t.Errorf("upstream got %d requests, want %d: %+v", len(got), row.forwarded, got)
				} else if row.check != nil && len(got) > 0 {
					row.check(t, c, got)
				} else if row.sent && len(got) == 1 {
					catCheckSent(t, raw, got[0])
				}
				if e := evil.take(); len(e) != 0 {
					t.Errorf("the other host got %d requests: %+v", len(e), e)
				}
				if row.fences != nil {
					for res, want := range row.fences(c) {
						if got, status := s3FenceOf(t, in, res); got != want || (want == "" && status != http.StatusNotFound) {
							t.Errorf("fence of %s: %q (%d), want %q", res, got, status, want)
						}
					}
				}
			}()
			if row.seed != "" {
				at := c.path
				if row.seedAt != nil {
					at = row.seedAt(c)
				}
				catSeedWrite(t, in, upstream, c.host, at, row.seed)
			}
			method := "GET"
			if row.head {
				method = "HEAD"
			}
			conn, br := catDial(t, in.Proxy)
			defer conn.Close()
			if row.halfClose {
				if _, err := io.WriteString(conn, raw); err != nil {
					t.Fatal(err)
				}
				if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
				raw = ""
			}
			resp, body, err := catExchange(conn, br, raw, method)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			catCheckAnswer(t, row, resp, body)
			if row.then {
				catCheckNoTunnel(t, conn, br, rc)
			}
			if row.closes {
				if !resp.Close {
					t.Errorf("answer without Connection: close: %v", resp.Header)
				}
				if extra, err := io.ReadAll(br); err != nil || len(extra) != 0 {
					t.Errorf("after the answer: %q, %v; want the connection closed", extra, err)
				}
			}
		})
	}
	// Stray arrivals after the last row.
	time.Sleep(100 * time.Millisecond) // asserting nothing happens: no stray request arrives
	if got := upstream.take(); len(got) != 0 {
		t.Errorf("upstream got %d requests after the last row: %+v", len(got), got)
	}
	if got := evil.take(); len(got) != 0 {
		t.Errorf("the other host got %d requests after the last row: %+v", len(got), got)
	}
	upstream.mu.Lock()
	t.Logf("%d catalogue rows; the upstream got the start of %d requests whose body broke off", len(rows), upstream.broken)
	upstream.mu.Unlock()
}

func catDial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	return conn, bufio.NewReader(conn)
}

// catExchange writes raw and reads one response to a request of method. A
// failed write is ignored when an answer still comes (net/http answers an
// oversized header block before reading all of it).
func catExchange(conn net.Conn, br *bufio.Reader, raw, method string) (*http.Response, []byte, error) {
	_, werr := io.WriteString(conn, raw)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return nil, nil, errors.Join(err, werr)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

func catCheckAnswer(t *testing.T, row catRow, resp *http.Response, body []byte) {
	t.Helper()
	if resp.StatusCode != row.status {
		t.Fatalf("status %d, want %d; Fencing-Refused %q; body %s", resp.StatusCode, row.status, resp.Header.Get("Fencing-Refused"), body)
	}
	refused := resp.Header.Get("Fencing-Refused")
	switch {
	case row.forwarded > 0:
		want := "backend"
		if row.head {
			want = ""
		}
		if refused != "" || string(body) != want {
			t.Fatalf("control row: Fencing-Refused %q, body %q; want the backend's answer", refused, body)
		}
	case row.early:
		if _, ok := resp.Header["Fencing-Refused"]; ok {
			t.Fatalf("net/http's own refusal carries Fencing-Refused %q", refused)
		}
	default:
		if refused != row.reason {
			t.Fatalf("Fencing-Refused %q, want %q; body %s", refused, row.reason, body)
		}
		if row.status == http.StatusConflict && resp.Header.Get("Fencing-Current-Token") != row.seed {
			t.Fatalf("Fencing-Current-Token %q, want %s", resp.Header.Get("Fencing-Current-Token"), row.seed)
		}
		if row.s3 != "" {
			catCheckS3Error(t, row, resp, body)
			return
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Fatalf("Content-Type %q, want application/problem+json", ct)
		}
		if row.head {
			return // no body
		}
		var pb struct {
			Status int    `json:"status"`
			Reason string `json:"reason"`
			Token  string `json:"token"`
		}
		if err := json.Unmarshal(body, &pb); err != nil {
			t.Fatalf("problem body %q: %v", body, err)
		}
		if pb.Status != row.status || pb.Reason != row.reason || pb.Token != row.token && row.token != "" {
			t.Fatalf("problem %+v; want status %d, reason %s, token %q", pb, row.status, row.reason, row.token)
		}
	}
}

// catCheckS3Error checks an S3 mode refusal: an S3 <Error> body with the
// row's code, the request id also in X-Amz-Request-Id, and for a stale
// token the token in the message.
func catCheckS3Error(t *testing.T, row catRow, resp *http.Response, body []byte) {
	t.Helper()
	if row.code == "" {
		t.Fatalf("the row names no S3 error code")
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/xml" {
		t.Fatalf("Content-Type %q, want application/xml; body %s", ct, body)
	}
	if row.head {
		return // no body
	}
	var e s3ErrorBody
	if err := xml.Unmarshal(body, &e); err != nil {
		t.Fatalf("S3 error body %q: %v", body, err)
	}
	if e.Code != row.code || e.RequestID == "" || e.RequestID != resp.Header.Get("X-Amz-Request-Id") || e.Resource == "" {
		t.Fatalf("S3 error %+v, X-Amz-Request-Id %q; want Code %s, a Resource, the request id in both", e, resp.Header.Get("X-Amz-Request-Id"), row.code)
	}
	if row.token != "" && !strings.Contains(e.Message, " "+row.token+" ") {
		t.Fatalf("S3 error message %q does not name the token %s", e.Message, row.token)
	}
}

// catCheckSent checks that the backend got the request raw as it was sent:
// its method, target, Host, header fields and body, and no header field more.
func catCheckSent(t *testing.T, raw string, got catArrival) {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatalf("reading the row's own request: %v", err)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatalf("reading the row's own request body: %v", err)
	}
	if got.Method != req.Method || got.Target != req.RequestURI || got.Host != req.Host || got.Body != string(body) {
		t.Errorf("backend got %s %s Host %s body %q; want %s %s Host %s body %q",
			got.Method, got.Target, got.Host, got.Body, req.Method, req.RequestURI, req.Host, body)
	}
	if !maps.EqualFunc(got.Header, req.Header, slices.Equal) {
		t.Errorf("backend got header %q; want %q", got.Header, req.Header)
	}
}

// catCheckNoTunnel sends a write without a token on a connection whose upgrade
// was refused: it must be refused as missing, or the connection be closed.
func catCheckNoTunnel(t *testing.T, conn net.Conn, br *bufio.Reader, c catTarget) {
	t.Helper()
	resp, body, err := catExchange(conn, br, c.rq("PUT "+c.path+"/after", "Content-Length: 0"), "PUT")
	if err != nil {
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "connection reset") {
			t.Fatalf("second request on the connection: %v", err)
		}
		return // closed
	}
	if resp.StatusCode != http.StatusPreconditionRequired || resp.Header.Get("Fencing-Refused") != "missing" {
		t.Fatalf("second request on the connection: %d, Fencing-Refused %q, body %s; want 428 missing", resp.StatusCode, resp.Header.Get("Fencing-Refused"), body)
	}
}

// catSeedWrite writes token to path through the proxy, with Host host, and
// checks that it was forwarded, so later rows on path have a maximum to be stale against.
func catSeedWrite(t *testing.T, in *servertest.Instance, upstream *catRecorder, host, path, token string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, in.ProxyURL()+path, strings.NewReader("seed"))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("X-Fencing-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := upstream.take(); resp.StatusCode != http.StatusOK || len(got) != 1 || got[0].Target != path {
		t.Fatalf("seed write: status %d, upstream got %+v", resp.StatusCode, got)
	}
}
