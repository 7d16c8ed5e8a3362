package awschunked

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReader decodes arbitrary bytes in each form: it never panics, never
// returns more bytes than the declared decoded length or the input holds,
// returns exactly the declared length when it ends cleanly, and a signed
// body never decodes cleanly unless its signatures verify (the seeds are
// valid bodies; the fuzzer cannot forge a signature, so a clean end of a
// signed form must be one of the seeds' own payloads).
func FuzzReader(f *testing.F) {
	chunks := [][]byte{[]byte("hello, "), []byte("fenced "), []byte("world")}
	for i, form := range allForms {
		f.Add(newBody(form, "x-amz-checksum-crc32").encode(f, chunks, ""), uint8(i), uint16(19))
		f.Add(newBody(form, "x-amz-checksum-crc32").encode(f, nil, ""), uint8(i), uint16(0))
	}
	f.Add([]byte("5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n\r\n"), uint8(2), uint16(5))
	f.Fuzz(func(t *testing.T, enc []byte, formIndex uint8, length uint16) {
		b := newBody(allForms[int(formIndex)%len(allForms)], "x-amz-checksum-crc32")
		r := NewReader(bytes.NewReader(enc), b.options(int64(length)))
		var got []byte
		buf := make([]byte, 5)
		var err error
		for err == nil {
			var n int
			n, err = r.Read(buf)
			if n < 0 || n > len(buf) {
				t.Fatalf("Read returned %d", n)
			}
			got = append(got, buf[:n]...)
		}
		if len(got) > int(length) || len(got) > len(enc) {
			t.Fatalf("%d bytes from %d of input, %d declared", len(got), len(enc), length)
		}
		if err == io.EOF {
			if len(got) != int(length) {
				t.Fatalf("a clean end after %d bytes, %d declared", len(got), length)
			}
			if b.form != UnsignedPayloadTrailer && len(got) > 0 && string(got) != "hello, fenced world" {
				t.Fatalf("a signed body decoded cleanly to %q", got)
			}
			return
		}
		if errors.Is(err, ErrOptions) {
			t.Fatalf("options refused: %v", err)
		}
	})
}
