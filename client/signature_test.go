package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// headerRecorder is a backend that records the token and signature headers
// of each request it receives.
type headerRecorder struct {
	mu  sync.Mutex
	got []string // "token|signature"
}

func (h *headerRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	h.mu.Lock()
	h.got = append(h.got, r.Header.Get(DefaultHeader)+"|"+r.Header.Get(HeaderSignature))
	h.mu.Unlock()
}

func (h *headerRecorder) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := h.got
	h.got = nil
	return got
}

func TestTransportSendsSignature(t *testing.T) {
	rec := &headerRecorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	bg := context.Background()
	cases := []struct {
		name string
		tr   *Transport
		ctx  context.Context
		want string
	}{
		{"WithLease", &Transport{}, WithLease(bg, Lease{Token: 7, TokenSignature: "sig7"}), "7|sig7"},
		{"WithSignedToken", &Transport{}, WithSignedToken(bg, 8, "sig8"), "8|sig8"},
		{"WithToken only", &Transport{}, WithToken(bg, 9), "9|"},
		{"lease of an unsigned proxy", &Transport{}, WithLease(bg, Lease{Token: 10}), "10|"},
		{"a later WithToken drops a signature of another token", &Transport{}, WithToken(WithSignedToken(bg, 8, "sig8"), 11), "11|"},
		{"a token function that returns another token", &Transport{Token: func(*http.Request) (uint64, error) { return 12, nil }},
			WithSignedToken(bg, 8, "sig8"), "12|"},
		{"a signature function", &Transport{
			Token:     func(*http.Request) (uint64, error) { return 13, nil },
			Signature: func(_ *http.Request, tok uint64) string { return "fn" + strconv.FormatUint(tok, 10) },
		}, bg, "13|fn13"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(c.ctx, http.MethodPut, srv.URL, strings.NewReader("x"))
			resp, err := (&http.Client{Transport: c.tr}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if len(req.Header) != 0 {
				t.Errorf("the caller's request was modified: %v", req.Header)
			}
			if got := rec.take(); len(got) != 1 || got[0] != c.want {
				t.Errorf("backend saw %q, want [%q]", got, c.want)
			}
		})
	}
}

// The S3 middleware adds the signature in the Build step, so SigV4 covers it.
func TestStackFencingSendsSignature(t *testing.T) {
	var mu sync.Mutex
	var sig, signed string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		sig, signed = r.Header.Get(HeaderSignature), r.Header.Get("Authorization")
		mu.Unlock()
	}))
	defer srv.Close()
	c := s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true, Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
	}, S3Fencing(ContextToken))
	ctx := WithLease(context.Background(), Lease{Token: 5, TokenSignature: "c2lnbmF0dXJl"})
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("k"), Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if sig != "c2lnbmF0dXJl" {
		t.Errorf("signature header %q", sig)
	}
	if !strings.Contains(signed, "x-fencing-token-signature") {
		t.Errorf("SigV4 does not cover the signature header: %s", signed)
	}
}

// A 403 for a bad signature or a token jump is a *RefusedError with its
// reason, never a stale refusal.
func TestCheckResponseForbidden(t *testing.T) {
	for _, reason := range []string{ReasonSignature, ReasonJump} {
		t.Run(reason, func(t *testing.T) {
			resp := &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{HeaderRefused: {reason}},
				Body: io.NopCloser(strings.NewReader(`{"title":"t","status":403,"reason":"` + reason + `","detail":"why"}`))}
			err := CheckResponse(resp)
			var re *RefusedError
			if !errors.As(err, &re) || *re != (RefusedError{Status: http.StatusForbidden, Reason: reason, Detail: "why"}) {
				t.Fatalf("CheckResponse: %v", err)
			}
			if !errors.Is(err, ErrRefused) || errors.Is(err, ErrStale) {
				t.Errorf("errors.Is: refused %v, stale %v", errors.Is(err, ErrRefused), errors.Is(err, ErrStale))
			}
			if _, ok := AsStale(err); ok {
				t.Error("AsStale = true")
			}
		})
	}
}

func TestLeasesSignature(t *testing.T) {
	srv := newControlStandIn(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		body := `{"name":"b/k","holder":"A","token":"3","state":"held","ttl":"1s"`
		switch r.Method {
		case http.MethodPost: // signature in the body (and header)
			w.Header().Set(HeaderSignature, "from-body")
			body += `,"token_signature":"from-body"`
		case http.MethodPut: // a server that only sets the header
			w.Header().Set(HeaderSignature, "from-header")
		}
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, body+"}")
	}))
	defer srv.Close()
	l := &Leases{BaseURL: srv.URL}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		call func() (Lease, error)
		want string
	}{
		{"acquire", func() (Lease, error) { return l.Acquire(ctx, "b/k", "A", 1e9) }, "from-body"},
		{"renew", func() (Lease, error) { return l.Renew(ctx, "b/k", "A", 3) }, "from-header"},
		{"get", func() (Lease, error) { return l.Get(ctx, "b/k") }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.call()
			if err != nil || got.Token != 3 || got.TokenSignature != c.want {
				t.Fatalf("%+v, %v; want token 3 and signature %q", got, err, c.want)
			}
		})
	}
}
