package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// signPuts writes n raw HTTP/1.1 PUTs of 1 KiB to /bkt/obj-0 .. obj-(n-1)
// at host, each with token and a SigV4 signature (hex payload hash) of the
// key, separated by NUL bytes, for wrk to replay (bench/wrk/put-signed.lua):
// a signature stays valid for the gateway's 15-minute clock skew.
func signPuts(out, host, token, key, secret, region string, n int) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	creds := aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}
	now := time.Now()
	for i := range n {
		path := "/bkt/obj-" + strconv.Itoa(i)
		req, err := http.NewRequest(http.MethodPut, "http://"+host+path, nil)
		if err != nil {
			return err
		}
		req.ContentLength = int64(len(body))
		req.Header.Set("X-Fencing-Token", token)
		req.Header.Set("X-Amz-Content-Sha256", hash)
		if err := signer.SignHTTP(context.Background(), creds, req, hash, "s3", region, now); err != nil {
			return err
		}
		fmt.Fprintf(w, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", path, host, len(body))
		for _, k := range []string{"X-Fencing-Token", "X-Amz-Content-Sha256", "X-Amz-Date", "Authorization"} {
			fmt.Fprintf(w, "%s: %s\r\n", k, req.Header.Get(k))
		}
		fmt.Fprintf(w, "\r\n%s\x00", body)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// signedStream is a STREAMING-AWS4-HMAC-SHA256-PAYLOAD body of n zero bytes
// in chunks of size bytes, each chunk signed as it is produced (never held
// beyond one chunk).
type signedStream struct {
	signer *v4.StreamSigner
	left   int64
	size   int
	at     time.Time
	buf    []byte // framing and data not yet read
	done   bool
	err    error
}

func (s *signedStream) Read(p []byte) (int, error) {
	for len(s.buf) == 0 {
		if s.done || s.err != nil {
			if s.err != nil {
				return 0, s.err
			}
			return 0, io.EOF
		}
		k := int(min(int64(s.size), s.left))
		data := make([]byte, k)
		sig, err := s.signer.GetSignature(context.Background(), nil, data, s.at)
		if err != nil {
			s.err = err
			return 0, err
		}
		s.buf = append(fmt.Appendf(nil, "%x;chunk-signature=%x\r\n", k, sig), data...)
		s.buf = append(s.buf, "\r\n"...)
		if k == 0 {
			s.done = true
		}
		s.left -= int64(k)
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	return n, nil
}

// signedLength is the encoded length of n payload bytes in chunks of size.
func signedLength(n int64, size int) int64 {
	frame := func(k int64) int64 {
		return int64(len(strconv.FormatInt(k, 16))) + int64(len(";chunk-signature=")) + 64 + 2 + k + 2
	}
	full := n / int64(size)
	total := full * frame(int64(size))
	if r := n % int64(size); r > 0 {
		total += frame(r)
	}
	return total + frame(0)
}

// signedUpload sends one PUT of n bytes as a signed stream with the key.
func signedUpload(url, token, key, secret, region string, n int64) error {
	const chunk = 64 << 10
	req, err := http.NewRequest(http.MethodPut, url, nil)
	if err != nil {
		return err
	}
	const form = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	req.Header.Set("X-Fencing-Token", token)
	req.Header.Set("X-Amz-Content-Sha256", form)
	req.Header.Set("Content-Encoding", "aws-chunked")
	req.Header.Set("X-Amz-Decoded-Content-Length", strconv.FormatInt(n, 10))
	req.ContentLength = signedLength(n, chunk)
	creds := aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}
	now := time.Now()
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err := signer.SignHTTP(context.Background(), creds, req, form, "s3", region, now); err != nil {
		return err
	}
	seed, err := hex.DecodeString(req.Header.Get("Authorization")[len(req.Header.Get("Authorization"))-64:])
	if err != nil {
		return err
	}
	req.Body = io.NopCloser(&signedStream{signer: v4.NewStreamSigner(creds, "s3", region, seed), left: n, size: chunk, at: now})
	return send(req, n)
}
