package fence

import (
	"errors"
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

func TestTokenFromValues(t *testing.T) {
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
			got, err := TokenFromValues(tc.values, "X-Fencing-Token")
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
