package server_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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
// reached.
type catTarget struct{ host, path, bucket, evil string }

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
	return rows
}

// TestBadInputCatalogue sends each bad input of the catalogue as raw bytes to
// a running fenceproxy and checks that it is refused (by the proxy with a
// problem body and Fencing-Refused, or by net/http before any handler) and
// that no backend received anything. Control rows check that valid writes do
// reach the recorder.
func TestBadInputCatalogue(t *testing.T) {
	upstream, evil := newCatRecorder(t), newCatRecorder(t)
	in := servertest.Start(t, map[string]string{
		"FENCEPROXY_UPSTREAM": upstream.srv.URL,
		"FENCEPROXY_DATA_DIR": t.TempDir(),
	})
	rows := catRows()
	for i, row := range rows {
		c := catTarget{host: in.Proxy, path: fmt.Sprintf("/cat/r%03d", i), bucket: fmt.Sprintf("/cat-r%03d", i), evil: strings.TrimPrefix(evil.srv.URL, "http://")}
		t.Run(row.name, func(t *testing.T) {
			// Checked also when the row fails early, so arrivals are never
			// blamed on the next row.
			defer func() {
				got := upstream.take()
				if len(got) != row.forwarded {
					t.Errorf("upstream got %d requests, want %d: %+v", len(got), row.forwarded, got)
				} else if row.check != nil && len(got) > 0 {
					row.check(t, c, got)
				}
				if e := evil.take(); len(e) != 0 {
					t.Errorf("the other host got %d requests: %+v", len(e), e)
				}
			}()
			if row.seed != "" {
				catSeedWrite(t, in, upstream, c.path, row.seed)
			}
			method := "GET"
			if row.head {
				method = "HEAD"
			}
			conn, br := catDial(t, in.Proxy)
			defer conn.Close()
			raw := row.raw(c)
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
				catCheckNoTunnel(t, conn, br, c)
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
	time.Sleep(100 * time.Millisecond)
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
		if refused != "" || string(body) != "backend" {
			t.Fatalf("control row: Fencing-Refused %q, body %q; want the backend's answer", refused, body)
		}
	case row.early:
		if _, ok := resp.Header["Fencing-Refused"]; ok {
			t.Fatalf("net/http's own refusal carries Fencing-Refused %q", refused)
		}
	default:
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Fatalf("Content-Type %q, want application/problem+json", ct)
		}
		if refused != row.reason {
			t.Fatalf("Fencing-Refused %q, want %q", refused, row.reason)
		}
		if row.status == http.StatusConflict && resp.Header.Get("Fencing-Current-Token") != row.seed {
			t.Fatalf("Fencing-Current-Token %q, want %s", resp.Header.Get("Fencing-Current-Token"), row.seed)
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

// catSeedWrite writes token to path through the proxy and checks that it was
// forwarded, so later rows on path have a maximum to be stale against.
func catSeedWrite(t *testing.T, in *servertest.Instance, upstream *catRecorder, path, token string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, in.ProxyURL()+path, strings.NewReader("seed"))
	if err != nil {
		t.Fatal(err)
	}
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
