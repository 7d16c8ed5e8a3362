package proxy

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

func TestParseToken(t *testing.T) {
	ok := []struct {
		in   string
		want uint64
	}{
		{"0", 0}, {"1", 1}, {"41", 41}, {"10", 10},
		{"9223372036854775807", 1<<63 - 1},
	}
	for _, tc := range ok {
		t.Run("ok/"+tc.in, func(t *testing.T) {
			got, err := ParseToken(tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("ParseToken(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
	bad := []string{
		"", "-1", "+1", "007", "00", "0x10", "1_0", "1e3", "1.0", " 1", "1 ", "1 2", "\t1",
		"5, 99", "5,99", "9223372036854775808", "18446744073709551615", "18446744073709551616",
		"99999999999999999999999", "١٢", "1\x00", "abc", "0b1", "1\n",
	}
	for _, in := range bad {
		t.Run("bad/"+strconv.Quote(in), func(t *testing.T) {
			got, err := ParseToken(in)
			if !errors.Is(err, ErrTokenMalformed) {
				t.Fatalf("ParseToken(%q) = %d, %v; want ErrTokenMalformed", in, got, err)
			}
		})
	}
}

func TestTokenFromHeader(t *testing.T) {
	cases := []struct {
		name   string
		values []string
		want   uint64
		err    error
	}{
		{"one", []string{"42"}, 42, nil},
		{"absent", nil, 0, ErrTokenMissing},
		{"empty", []string{""}, 0, ErrTokenMalformed},
		{"twice same", []string{"42", "42"}, 0, ErrTokenMalformed},
		{"twice different", []string{"5", "99"}, 0, ErrTokenMalformed},
		{"list in one", []string{"5, 99"}, 0, ErrTokenMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.values {
				h.Add("x-fencing-token", v) // any spelling of the name counts
			}
			got, err := TokenFromHeader(h, "X-Fencing-Token")
			if !errors.Is(err, tc.err) || (tc.err == nil && got != tc.want) {
				t.Fatalf("got %d, %v; want %d, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// FuzzParseToken: accepted exactly when the input is the canonical decimal
// form of a value <= 2^63-1, and then it round-trips.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"0", "41", "007", "-1", "+1", "0x10", "1e3", "9223372036854775807", "9223372036854775808", "5, 99", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseToken(s)
		canonical := false
		if v, perr := strconv.ParseUint(s, 10, 64); perr == nil && v <= MaxToken && strconv.FormatUint(v, 10) == s {
			canonical = true
		}
		if canonical != (err == nil) {
			t.Fatalf("ParseToken(%q) = %d, %v; canonical=%v", s, got, err, canonical)
		}
		if err == nil && strconv.FormatUint(got, 10) != s {
			t.Fatalf("ParseToken(%q) = %d does not round-trip", s, got)
		}
		if err != nil && !errors.Is(err, ErrTokenMalformed) {
			t.Fatalf("ParseToken(%q): error %v is not ErrTokenMalformed", s, err)
		}
	})
}

func TestLogTargetRedactsCredentials(t *testing.T) {
	for _, tc := range []struct{ target, want string }{
		{"/bkt/k", "/bkt/k"},
		{"/bkt/k?uploadId=7&partNumber=2", "/bkt/k?uploadId=7&partNumber=2"},
		{"/bkt/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F2026&X-Amz-Signature=abc123&X-Amz-Security-Token=tok",
			"/bkt/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED&X-Amz-Security-Token=REDACTED"},
		{"/bkt/k?AWSAccessKeyId=AKIA&Signature=s%2Bg&Expires=1", "/bkt/k?AWSAccessKeyId=REDACTED&Signature=REDACTED&Expires=1"},
		{"/bkt/k?x-amz-signature=abc", "/bkt/k?x-amz-signature=REDACTED"},
		{"/bkt/k?X%2DAmz%2DSignature=abc", "/bkt/k?X%2DAmz%2DSignature=REDACTED"},
		{"/bkt/k?Signature", "/bkt/k?Signature"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPut, tc.target, nil)
			if got := logTarget(r); got != tc.want {
				t.Fatalf("logTarget(%q) = %q, want %q", tc.target, got, tc.want)
			}
		})
	}
}
