package tokensig_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/tokensig"
)

// The package documentation's worked example. The expected output was
// computed with openssl (the shell lines in the package documentation), not
// with this package.
func Example() {
	key, _ := base64.StdEncoding.DecodeString("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=") // bytes 0x00..0x1f
	keys, err := tokensig.New([][]byte{key})
	if err != nil {
		panic(err)
	}
	fmt.Printf("% x\n", tokensig.Message("bkt/report.txt", 42))
	sig := keys.Sign("bkt/report.txt", 42)
	fmt.Println(sig)
	fmt.Println(keys.Verify("bkt/report.txt", 42, sig))
	fmt.Println(keys.Verify("bkt/report.txt", 43, sig))
	// Output:
	// 00 00 00 00 00 00 00 0e 62 6b 74 2f 72 65 70 6f 72 74 2e 74 78 74 00 00 00 00 00 00 00 2a
	// 9hxTXQKMWkBLfQxAVsaaFM_d2dh5sxqvwQ4iYlfCYqM
	// <nil>
	// tokensig: fencing token signature does not match
}

// refSign is a second, deliberately plain implementation of the documented
// scheme: shifts instead of encoding/binary, padded base64url with the "="
// trimmed instead of the raw encoding.
func refSign(key []byte, resource string, token uint64) string {
	var msg []byte
	n := uint64(len(resource))
	for shift := 56; shift >= 0; shift -= 8 {
		msg = append(msg, byte(n>>shift))
	}
	msg = append(msg, []byte(resource)...)
	for shift := 56; shift >= 0; shift -= 8 {
		msg = append(msg, byte(token>>shift))
	}
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return strings.TrimRight(base64.URLEncoding.EncodeToString(h.Sum(nil)), "=")
}

func randKey(r *rand.Rand) []byte {
	k := make([]byte, tokensig.MinKeyBytes+r.IntN(64))
	for i := range k {
		k[i] = byte(r.UintN(256))
	}
	return k
}

func mustKeys(t testing.TB, keys ...[]byte) *tokensig.Keys {
	t.Helper()
	k, err := tokensig.New(keys)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSignMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	resources := []string{"", "a", "bkt/report.txt", "bkt/part-0/objA", "ключ/データ", strings.Repeat("k/", 2048)}
	tokens := []uint64{0, 1, 42, math.MaxInt64, math.MaxUint64}
	for range 20 {
		key := randKey(r)
		keys := mustKeys(t, key)
		for _, res := range resources {
			for _, tok := range append(tokens, r.Uint64()) {
				got, want := keys.Sign(res, tok), refSign(key, res, tok)
				if got != want {
					t.Fatalf("Sign(%q, %d) = %s, reference %s", res, tok, got, want)
				}
				if len(got) != tokensig.SignatureLen {
					t.Fatalf("signature %q has %d characters, want %d", got, len(got), tokensig.SignatureLen)
				}
				if err := keys.Verify(res, tok, want); err != nil {
					t.Fatalf("Verify(%q, %d) of the reference signature: %v", res, tok, err)
				}
			}
		}
	}
}

func TestVerifyRefuses(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	keys := mustKeys(t, key)
	const res, tok = "bkt/obj", 42
	good := keys.Sign(res, tok)
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, good[len(good)-1])
	// The last character carries 4 bits of the MAC and 2 zero bits: flipping
	// the lowest bit decodes to the same MAC with a lenient decoder.
	nonCanonical := good[:len(good)-1] + string(alphabet[last^1])
	flipped := []byte(good)
	flipped[5] = alphabet[(strings.IndexByte(alphabet, flipped[5])+1)%64]
	std := strings.NewReplacer("-", "+", "_", "/").Replace(good)

	cases := []struct {
		name, resource string
		token          uint64
		sig            string
		want           error
	}{
		{"empty", res, tok, "", tokensig.ErrMissing},
		{"other resource", "bkt/obj2", tok, good, tokensig.ErrInvalid},
		{"other token", res, tok + 1, good, tokensig.ErrInvalid},
		{"largest token, unsigned", res, math.MaxInt64, good, tokensig.ErrInvalid},
		{"one character changed", res, tok, string(flipped), tokensig.ErrInvalid},
		{"padded", res, tok, good + "=", tokensig.ErrInvalid},
		{"truncated", res, tok, good[:len(good)-1], tokensig.ErrInvalid},
		{"surrounded by spaces", res, tok, " " + good + " ", tokensig.ErrInvalid},
		{"non-canonical last character", res, tok, nonCanonical, tokensig.ErrInvalid},
		{"garbage", res, tok, strings.Repeat("!", tokensig.SignatureLen), tokensig.ErrInvalid},
		{"hex MAC", res, tok, strings.Repeat("ab", 32), tokensig.ErrInvalid},
		{"another key's", res, tok, refSign(bytes.Repeat([]byte{8}, 32), res, tok), tokensig.ErrInvalid},
	}
	if std != good { // only when the signature has a - or _
		cases = append(cases, struct {
			name, resource string
			token          uint64
			sig            string
			want           error
		}{"standard base64 alphabet", res, tok, std, tokensig.ErrInvalid})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := keys.Verify(c.resource, c.token, c.sig); !errors.Is(err, c.want) {
				t.Fatalf("Verify(%q, %d, %q) = %v, want %v", c.resource, c.token, c.sig, err, c.want)
			}
		})
	}
	if err := keys.Verify(res, tok, good); err != nil {
		t.Fatalf("the good signature: %v", err)
	}
}

// The length prefix: a resource that ends in what looks like a token, and a
// shorter one followed by that token, sign different messages.
func TestMessageIsUnambiguous(t *testing.T) {
	a := tokensig.Message("a", 0x6262626262626262)
	b := tokensig.Message("a"+strings.Repeat("b", 8), 0)
	if bytes.Equal(a, b) {
		t.Fatal("two (resource, token) pairs give one message")
	}
	keys := mustKeys(t, bytes.Repeat([]byte{1}, 32))
	if keys.Verify("a"+strings.Repeat("b", 8), 0, keys.Sign("a", 0x6262626262626262)) == nil {
		t.Fatal("a signature verified for another resource and token")
	}
}

func TestRotation(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	oldKey, newKey := randKey(r), randKey(r)
	before := mustKeys(t, oldKey)         // KEY=old
	during := mustKeys(t, newKey, oldKey) // KEY=new,old
	after := mustKeys(t, newKey)          // KEY=new
	oldSig := before.Sign("bkt/obj", 5)   // issued before the rotation
	newSig := during.Sign("bkt/obj", 6)   // issued during it
	if err := during.Verify("bkt/obj", 5, oldSig); err != nil {
		t.Errorf("during the rotation, an old signature: %v", err)
	}
	if newSig != refSign(newKey, "bkt/obj", 6) {
		t.Error("during the rotation, Sign does not use the first (new) key")
	}
	if err := after.Verify("bkt/obj", 6, newSig); err != nil {
		t.Errorf("after the rotation, a new signature: %v", err)
	}
	if err := after.Verify("bkt/obj", 5, oldSig); !errors.Is(err, tokensig.ErrInvalid) {
		t.Errorf("after the rotation, an old signature: %v, want ErrInvalid", err)
	}
	if err := before.Verify("bkt/obj", 6, newSig); !errors.Is(err, tokensig.ErrInvalid) {
		t.Errorf("the old key set accepts a new-key signature: %v", err)
	}
}

func TestNew(t *testing.T) {
	for _, c := range []struct {
		name string
		keys [][]byte
	}{
		{"no keys", nil},
		{"short key", [][]byte{make([]byte, tokensig.MinKeyBytes-1)}},
		{"second key short", [][]byte{make([]byte, 32), make([]byte, 31)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if k, err := tokensig.New(c.keys); err == nil {
				t.Fatalf("New accepted %d keys: %v", len(c.keys), k)
			}
		})
	}
	// The keys are copied: changing the caller's slice changes nothing.
	key := bytes.Repeat([]byte{9}, 32)
	keys := mustKeys(t, key)
	want := refSign(bytes.Repeat([]byte{9}, 32), "r", 1)
	key[0] = 0
	if got := keys.Sign("r", 1); got != want {
		t.Fatalf("after the caller changed its key: %s, want %s", got, want)
	}
}

// FuzzVerify: Verify never panics, never accepts a signature made for another
// resource or token, and accepts only the one signature Sign makes.
func FuzzVerify(f *testing.F) {
	f.Add("bkt/obj", uint64(42), "bkt/obj", uint64(43), "")
	f.Add("a", uint64(0x6262626262626262), "abbbbbbbb", uint64(0), "9hxTXQKMWkBLfQxAVsaaFM_d2dh5sxqvwQ4iYlfCYqM")
	f.Add("", uint64(0), "", uint64(math.MaxInt64), "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("x/y", uint64(math.MaxUint64), "x/y", uint64(math.MaxUint64), "!!!!")
	keys := mustKeys(f, bytes.Repeat([]byte{0x5a}, 32), bytes.Repeat([]byte{0xa5}, 40))
	f.Fuzz(func(t *testing.T, res string, tok uint64, res2 string, tok2 uint64, sig string) {
		good := keys.Sign(res, tok)
		if err := keys.Verify(res, tok, good); err != nil {
			t.Fatalf("own signature refused: %v", err)
		}
		err := keys.Verify(res2, tok2, good)
		if same := res == res2 && tok == tok2; same != (err == nil) {
			t.Fatalf("Verify(%q, %d) of the signature for (%q, %d): %v", res2, tok2, res, tok, err)
		}
		err = keys.Verify(res2, tok2, sig)
		switch {
		case err == nil && sig != keys.Sign(res2, tok2) && sig != refSign(bytes.Repeat([]byte{0xa5}, 40), res2, tok2):
			t.Fatalf("accepted %q for (%q, %d), which no key made", sig, res2, tok2)
		case err != nil && !errors.Is(err, tokensig.ErrInvalid) && !errors.Is(err, tokensig.ErrMissing):
			t.Fatalf("unexpected error %v", err)
		}
	})
}

// TestVerifyRefusesEveryChange: a change at any place of a signature is
// refused, at every character of its text and every byte of its MAC, so
// that a compare that stops early (a prefix of the MAC) fails here.
func TestVerifyRefusesEveryChange(t *testing.T) {
	keys := mustKeys(t, bytes.Repeat([]byte{7}, 32), bytes.Repeat([]byte{8}, 40))
	const res, tok = "bkt/obj", 42
	for _, good := range []string{keys.Sign(res, tok), refSign(bytes.Repeat([]byte{8}, 40), res, tok)} {
		if err := keys.Verify(res, tok, good); err != nil {
			t.Fatalf("the good signature %s: %v", good, err)
		}
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		for i := range len(good) {
			for _, step := range []int{1, 31} {
				// The last character carries 4 bits and 2 zero bits: change
				// its top bits so that the text stays canonical.
				if i == len(good)-1 {
					step *= 4
				}
				b := []byte(good)
				b[i] = alphabet[(strings.IndexByte(alphabet, b[i])+step)%64]
				if err := keys.Verify(res, tok, string(b)); !errors.Is(err, tokensig.ErrInvalid) {
					t.Errorf("character %d of %s changed (%s): %v, want ErrInvalid", i, good, b, err)
				}
			}
		}
		mac, err := base64.RawURLEncoding.DecodeString(good)
		if err != nil {
			t.Fatal(err)
		}
		for i := range mac {
			for _, flip := range []byte{0x01, 0x80, 0xff} {
				m := bytes.Clone(mac)
				m[i] ^= flip
				sig := base64.RawURLEncoding.EncodeToString(m)
				if err := keys.Verify(res, tok, sig); !errors.Is(err, tokensig.ErrInvalid) {
					t.Errorf("byte %d of the MAC ^%#02x (%s): %v, want ErrInvalid", i, flip, sig, err)
				}
			}
		}
	}
}
