package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/s3"
	"github.com/fenceproxy/fenceproxy/wire"
)

// FuzzResourceKeyAliases: two spellings of one decoded path (some unreserved
// bytes percent-encoded, hex digits in either case) name the same resource,
// through ResourceKey (plain mode: runs of slashes merged), fence.CheckRawPath and the proxy's own derivation from a
// parsed request; and a key never has more than depth segments.
func FuzzResourceKeyAliases(f *testing.F) {
	for _, p := range []string{
		"/bkt/part-0/objA", "/a/./b", "/a/../b", "/.", "/..", "/a b/c", "/a\x00b", "/a\\b", "/ä/ü", "//x", "/x/",
		"/", "/a%2e%2e/b", "/~user/a-b_c.d", "/a#b?c", "/a;b=c/d:e@f", "/\x7f", "/\xff\xfe",
	} {
		for depth, mask := range [][]byte{{0xff, 0x00, 0xa5}, {0x55, 0xaa}, nil} {
			f.Add(p, depth, mask)
		}
	}
	proxies := map[int]*Proxy{} // by depth; a fuzz function runs one call at a time
	f.Fuzz(func(t *testing.T, path string, depth int, mask []byte) {
		if depth < 0 || depth > 64 {
			return
		}
		path = "/" + strings.TrimPrefix(path, "/")
		canon := (&url.URL{Path: path}).EscapedPath()
		alias := aliasEncoding(canon, mask)
		for _, raw := range []string{canon, alias} {
			u, err := url.ParseRequestURI(raw)
			if err != nil || u.Path != path {
				t.Fatalf("%q parses to %q, %v; want path %q", raw, u, err, path)
			}
		}
		key, err := fence.Resolver{Depth: depth, MergeSlashes: true}.Key(path) // plain mode merges slashes
		if err != nil && !errors.Is(err, fence.ErrBadResource) {
			t.Fatalf("ResourceKey(%q, %d): unexpected error %v", path, depth, err)
		}
		if err == nil && depth > 0 && strings.Count(key, "/") >= depth {
			t.Fatalf("key %q of %q has more than %d segments", key, path, depth)
		}
		if cerr, aerr := fence.CheckRawPath(canon), fence.CheckRawPath(alias); (cerr == nil) != (aerr == nil) {
			t.Fatalf("fence.CheckRawPath disagrees: %q: %v; %q: %v", canon, cerr, alias, aerr)
		}
		// The proxy's derivation, from the request as net/http parses it.
		p := proxies[depth]
		if p == nil {
			opts := testOptions(t, "http://backend")
			opts.ResourceDepth = depth
			p, _ = newProxy(t, newMemStore(), opts, fence.Options{DrainTimeout: time.Second})
			proxies[depth] = p
		}
		creq, areq := fuzzRequest(t, canon), fuzzRequest(t, alias)
		ckeys, cerr := p.resources(&exchange{r: creq, path: rawPath(creq)})
		akeys, aerr := p.resources(&exchange{r: areq, path: rawPath(areq)})
		if (cerr == nil) != (aerr == nil) || strings.Join(ckeys, "\n") != strings.Join(akeys, "\n") {
			t.Fatalf("%q gives %q, %v; %q gives %q, %v", canon, ckeys, cerr, alias, akeys, aerr)
		}
		want := []string{key}
		if strings.HasSuffix(key, "/") && len(key) > 1 { // plain mode: P/ is P as well (fence.Resolver.Alias)
			want = append(want, strings.TrimSuffix(key, "/"))
		}
		if cerr == nil && !slices.Equal(ckeys, want) {
			t.Fatalf("%q gives %q; ResourceKey gives %q", canon, ckeys, want)
		}
	})
}

// aliasEncoding respells a percent-encoded path as another encoding of the same
// bytes: each bit of mask, in turn, decides whether an unreserved byte is
// percent-encoded or the hex digits of an escape change case.
func aliasEncoding(raw string, mask []byte) string {
	bit := 0
	next := func() bool {
		if bit >= 8*len(mask) {
			return false
		}
		b := mask[bit/8]&(1<<(bit%8)) != 0
		bit++
		return b
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '%' && i+2 < len(raw):
			b.WriteByte('%')
			for _, h := range []byte{raw[i+1], raw[i+2]} {
				if next() {
					h = swapCase(h)
				}
				b.WriteByte(h)
			}
			i += 2
		case unreserved(c) && next():
			hex := fmt.Sprintf("%%%02X", c)
			if next() {
				hex = strings.ToLower(hex)
			}
			b.WriteString(hex)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0
}

func swapCase(c byte) byte {
	switch {
	case 'a' <= c && c <= 'z':
		return c - 'a' + 'A'
	case 'A' <= c && c <= 'Z':
		return c - 'A' + 'a'
	}
	return c
}

// fuzzRequest parses a PUT to target as net/http's server would.
func fuzzRequest(t *testing.T, target string) *http.Request {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader("PUT " + target + " HTTP/1.1\r\nHost: h\r\n\r\n")))
	if err != nil {
		t.Fatalf("PUT %q does not parse: %v", target, err)
	}
	return r
}

// FuzzProblemWriter: writeProblem and refuse write a body that is one line of
// valid JSON decoding back to the fields given (encoding/json's UTF-8
// coercion aside), a Content-Length equal to the body's length, the problem
// Content-Type, and headers free of control bytes whatever the strings; refuse
// logs one JSON line.
func FuzzProblemWriter(f *testing.F) {
	f.Add(409, "Stale fencing token", "stale", "details", "bkt/obj", "41", uint64(42), uint8(0))
	f.Add(400, "x\r\nSet-Cookie: a=b", "x\r\nY: z", "\r\n\r\n<html>", "a\"b\\c</script>", "1\r\n2", uint64(0), uint8(2))
	f.Add(503, "", "", "\xff\xfe\u2028", "\x00\x1f", "", uint64(1<<63-1), uint8(7))
	f.Add(-1, "t", "r", "d", "", "", uint64(3), uint8(11))
	var logs bytes.Buffer
	opts := testOptions(f, "http://backend")
	opts.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	p, _ := newProxy(f, newMemStore(), opts, fence.Options{DrainTimeout: time.Second})
	f.Fuzz(func(t *testing.T, status int, title, reason, detail, resource, token string, current uint64, kind uint8) {
		// writeProblem on its own, with any problem status.
		pb := wire.Problem{Status: 400 + int(uint(status)%200), Title: title, Detail: detail, Reason: reason,
			Resource: resource, Token: token, CurrentToken: strconv.FormatUint(current, 10)}
		rec := httptest.NewRecorder()
		wire.WriteProblem(rec, pb)
		pb.Type = "about:blank"
		checkProblem(t, rec, pb)

		// refuse, with each class of the proxy's errors.
		logs.Reset() // one call at a time
		c := problemCases[int(kind)%len(problemCases)]
		rerr := c.err(detail, resource, current)
		rec = httptest.NewRecorder()
		p.refuse(&exchange{w: rec, r: httptest.NewRequest(http.MethodPut, "/bkt/obj", nil), resources: []string{resource}, tokenText: token}, rerr)
		want := wire.Problem{Type: "about:blank", Status: c.status, Reason: c.reason, Resource: resource, Token: token, Detail: rerr.Error()}
		if c.detail != nil {
			want.Detail = *c.detail
		}
		got := checkProblem(t, rec, want)
		if got.Title == "" {
			t.Errorf("refusal %s has no title", c.reason)
		}
		if h := rec.Header(); h.Get(wire.HeaderRefused) != c.reason || h.Get(wire.HeaderCurrentToken) != got.CurrentToken ||
			(c.status == http.StatusConflict) != (got.CurrentToken == strconv.FormatUint(current, 10)) ||
			(c.status == http.StatusServiceUnavailable) != (h.Get("Retry-After") != "") {
			t.Errorf("refusal %s: headers %q, current_token %q", c.reason, h, got.CurrentToken)
		}
		line, rest, _ := bytes.Cut(logs.Bytes(), []byte("\n"))
		var entry map[string]any
		if err := json.Unmarshal(line, &entry); err != nil || len(rest) != 0 {
			t.Fatalf("refusal log is not one JSON line: %q, %v", logs.Bytes(), err)
		}
		if entry["reason"] != c.reason || entry["resource"] != jsonText(resource) || entry["token"] != jsonText(token) {
			t.Errorf("refusal log %v; want reason %s, resource %q, token %q", entry, c.reason, resource, token)
		}
	})
}

// problemCases are the classes of errors refuse maps, with the status and
// reason README's refusal table gives each; detail, when set, is the fixed
// detail that replaces an internal cause.
var problemCases = []struct {
	err    func(detail, resource string, current uint64) error
	status int
	reason string
	detail *string
}{
	{func(_, r string, cur uint64) error {
		return &fence.StaleError{Resource: r, Token: cur / 2, Current: cur}
	}, 409, wire.ReasonStale, nil},
	{func(string, string, uint64) error { return fence.ErrTokenMissing }, 428, wire.ReasonMissing, ptr("this method is a fenced write; send the fencing token in the X-Fencing-Token header")},
	{func(d, _ string, _ uint64) error { return fmt.Errorf("%w: %s", fence.ErrTokenMalformed, d) }, 400, wire.ReasonMalformed, nil},
	{func(d, _ string, _ uint64) error { return fmt.Errorf("%w: %s", fence.ErrBadResource, d) }, 400, wire.ReasonBadResource, nil},
	{func(d, _ string, _ uint64) error { return fmt.Errorf("%w: %s", ErrHopByHop, d) }, 400, wire.ReasonHopByHop, nil},
	{func(string, string, uint64) error { return ErrUnsupported }, 400, wire.ReasonUnsupported, nil},
	{func(string, string, uint64) error { return ErrFormUpload }, 400, wire.ReasonUnsupported, nil},
	{func(d, _ string, _ uint64) error { return fmt.Errorf("%w: %s", fence.ErrStore, d) }, 503, wire.ReasonStoreError, ptr("the maximum could not be read or made durable; nothing was forwarded")},
	{func(string, string, uint64) error { return fence.ErrDrainTimeout }, 503, wire.ReasonDrainTimeout, ptr("writes with smaller tokens on this resource did not finish within the drain timeout; nothing was forwarded, retry later")},
	{func(d, _ string, _ uint64) error { return fmt.Errorf("%w: %s", ErrSignature, d) }, 403, wire.ReasonSignature, nil},
	{func(d, _ string, _ uint64) error { return fmt.Errorf("%w: %s", fence.ErrJump, d) }, 403, wire.ReasonJump, nil},
	{func(d, _ string, _ uint64) error { return fmt.Errorf("%w: %s", errBadBody, d) }, 400, wire.ReasonBadBody, nil},
	{func(d, _ string, _ uint64) error { return fmt.Errorf("%w: %s", s3.ErrMalformedDelete, d) }, 400, wire.ReasonMalformedXML, nil},
	{func(string, string, uint64) error { return context.Canceled }, 499, wire.ReasonClientGone, nil},
	{func(d, _ string, _ uint64) error { return errors.New(d) }, 500, "internal", ptr("")},
}

func ptr[T any](v T) *T { return &v }

// checkProblem checks a problem response against want (strings as
// encoding/json writes them) and returns the decoded problem.
func checkProblem(t *testing.T, rec *httptest.ResponseRecorder, want wire.Problem) wire.Problem {
	t.Helper()
	res := rec.Result()
	body := rec.Body.Bytes()
	if res.StatusCode != want.Status {
		t.Fatalf("status %d, want %d", res.StatusCode, want.Status)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q", ct)
	}
	if cl := res.Header.Get("Content-Length"); cl != strconv.Itoa(len(body)) {
		t.Fatalf("Content-Length %s, body %d bytes", cl, len(body))
	}
	for name, values := range res.Header {
		for _, v := range append([]string{name}, values...) {
			if strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
				t.Fatalf("header %s: %q holds a control byte", name, v)
			}
		}
	}
	if bytes.IndexByte(body, '\n') != len(body)-1 {
		t.Fatalf("body is not one line: %q", body)
	}
	var got wire.Problem
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if want.Title == "" {
		want.Title = got.Title // refuse picks the title
	}
	if want.CurrentToken == "" {
		want.CurrentToken = got.CurrentToken // refuse sets it on 409 only; checked by the caller
	}
	for _, s := range []*string{&want.Type, &want.Title, &want.Detail, &want.Reason, &want.Resource, &want.Token, &want.CurrentToken} {
		*s = jsonText(*s)
	}
	if got != want {
		t.Fatalf("body decodes to %+v, want %+v", got, want)
	}
	return got
}

// jsonText is s as encoding/json (and slog's JSON handler) write it: each
// byte that is not part of valid UTF-8 becomes U+FFFD.
func jsonText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
