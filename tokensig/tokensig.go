// Package tokensig signs and verifies fencing tokens for fenceproxy's
// signed-token mode (FENCEPROXY_TOKEN_KEY). In that mode the proxy forwards a
// fenced write only when its X-Fencing-Token-Signature header signs the
// write's token for the write's resource, so a buggy or hostile worker cannot
// invent a token (2^63-1, say) and fence a resource off for good: tokens come
// from the lease API, or from an issuer that holds a key.
//
// # Signature
//
// A signature is HMAC-SHA256 (RFC 2104, FIPS 198-1) under a key of at least
// 32 bytes over this message:
//
//	uint64 big-endian  len(resource)  (8 bytes: the key's length in bytes)
//	resource           the resource key's bytes (UTF-8, as the proxy decodes
//	                   it from the path: "bkt/report.txt" for PUT /bkt/report.txt)
//	uint64 big-endian  token          (8 bytes)
//
// The length prefix makes the message unambiguous: no two (resource, token)
// pairs give the same bytes. The 32-byte MAC is written as unpadded base64url
// (RFC 4648 section 5, no "="): 43 characters, nothing before or after.
//
// Worked example (the package's Example runs it): key bytes 0x00, 0x01, ...,
// 0x1f (FENCEPROXY_TOKEN_KEY=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=),
// resource "bkt/report.txt", token 42. The message is, in hex,
//
//	000000000000000e 626b742f7265706f72742e747874 000000000000002a
//
// its HMAC-SHA256 is f61c535d028c5a404b7d0c4056c69a14cfddd9d879b31aafc10e226257c262a3,
// and the signature is 9hxTXQKMWkBLfQxAVsaaFM_d2dh5sxqvwQ4iYlfCYqM. With a shell:
//
//	printf '000000000000000e%s000000000000002a' "$(printf 'bkt/report.txt' | xxd -p)" | xxd -r -p |
//	  openssl dgst -sha256 -mac HMAC -macopt hexkey:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f -binary |
//	  basenc --base64url | tr -d '='
//
// # Keys
//
// Keys holds one or more keys so they can rotate: the first signs, every one
// verifies. Rotate by starting with "new,old" (new signatures, old ones still
// accepted), waiting until every holder has a signature under the new key
// (lease renewals re-sign), then dropping the old key.
package tokensig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
)

// MinKeyBytes is the shortest key accepted: RFC 2104 advises keys at least as
// long as the hash output.
const MinKeyBytes = 32

// SignatureLen is the length in characters of a signature (32 bytes as
// unpadded base64url).
const SignatureLen = 43

// Verify errors. ErrInvalid covers a signature that is not 43 characters of
// base64url, and one that no key produced for this resource and token.
var (
	ErrMissing = errors.New("tokensig: no fencing token signature")
	ErrInvalid = errors.New("tokensig: fencing token signature does not match")
)

// encoding is unpadded base64url that refuses non-zero trailing bits, so each
// MAC has exactly one accepted text.
var encoding = base64.RawURLEncoding.Strict()

// Keys signs with its first key and verifies with all of them. It is safe for
// concurrent use.
type Keys struct {
	keys [][]byte
}

// New returns Keys over keys (raw bytes, not base64), in order: keys[0] signs.
// It fails when keys is empty or a key is shorter than MinKeyBytes. The keys
// are copied.
func New(keys [][]byte) (*Keys, error) {
	if len(keys) == 0 {
		return nil, errors.New("tokensig: no keys")
	}
	k := &Keys{keys: make([][]byte, len(keys))}
	for i, key := range keys {
		if len(key) < MinKeyBytes {
			return nil, fmt.Errorf("tokensig: key %d has %d bytes; want at least %d", i+1, len(key), MinKeyBytes)
		}
		k.keys[i] = append([]byte(nil), key...)
	}
	return k, nil
}

// Message returns the bytes that are signed for token on resource: the 8-byte
// big-endian length of resource, resource, the 8-byte big-endian token.
func Message(resource string, token uint64) []byte {
	msg := make([]byte, 0, 16+len(resource))
	msg = binary.BigEndian.AppendUint64(msg, uint64(len(resource)))
	msg = append(msg, resource...)
	return binary.BigEndian.AppendUint64(msg, token)
}

func mac(key []byte, resource string, token uint64) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(Message(resource, token))
	return h.Sum(nil)
}

// Sign returns the signature of token for resource under the first key:
// 43 characters of unpadded base64url.
func (k *Keys) Sign(resource string, token uint64) string {
	return encoding.EncodeToString(mac(k.keys[0], resource, token))
}

// Verify returns nil when signature, as sent in X-Fencing-Token-Signature,
// signs token for resource under one of the keys; ErrMissing when signature
// is empty; ErrInvalid otherwise. MACs are compared in constant time, and
// every key is tried, so the time taken does not tell which key matched.
func (k *Keys) Verify(resource string, token uint64, signature string) error {
	if signature == "" {
		return ErrMissing
	}
	if len(signature) != SignatureLen {
		return fmt.Errorf("%w: want %d characters of unpadded base64url, got %d characters", ErrInvalid, SignatureLen, len(signature))
	}
	got, err := encoding.DecodeString(signature)
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%w: not unpadded base64url", ErrInvalid)
	}
	ok := false
	for _, key := range k.keys {
		if hmac.Equal(got, mac(key, resource, token)) {
			ok = true
		}
	}
	if !ok {
		return ErrInvalid
	}
	return nil
}
