package awschunked

import (
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
)

// Encoder chunk sizes, in bytes.
const (
	// DefaultEncodeChunkSize is the Encoder's chunk size when none is given.
	DefaultEncodeChunkSize = 1 << 20
	// MinEncodeChunkSize is the least chunk size S3 takes for every chunk
	// but the last.
	MinEncodeChunkSize = 8 << 10
)

// ErrPayloadLength: an Encoder's payload ended before, or went on after,
// its declared length.
var ErrPayloadLength = errors.New("awschunked: payload length is not the declared length")

// Encoder frames a payload as a STREAMING-UNSIGNED-PAYLOAD-TRAILER body with
// a checksum trailer computed as the payload streams; see
// NewUnsignedTrailerEncoder. It holds no chunk: memory is constant.
type Encoder struct {
	payload  io.Reader
	length   int64 // the payload's declared length
	chunk    int64
	trailer  string
	sum      hash.Hash
	left     int64  // payload bytes not yet in a chunk
	inChunk  int64  // bytes of the current chunk still to copy
	frame    []byte // framing bytes not yet returned
	frameBuf [96]byte
	done     bool // the final chunk is framed
	err      error
}

// NewUnsignedTrailerEncoder returns an Encoder of the length bytes of
// payload (bytes, at least 0) in chunks of chunkSize bytes (0 is
// DefaultEncodeChunkSize, else at least MinEncodeChunkSize), the last
// smaller, then the final chunk and the checksum trailer named trailer
// (x-amz-checksum-crc32, -crc32c, -crc64nvme, -sha1 or -sha256). The caller
// sends it with the headers of Header and a Content-Length of ContentLength,
// signed with x-amz-content-sha256 STREAMING-UNSIGNED-PAYLOAD-TRAILER (over
// HTTPS: nothing signs the bytes; the trailer checks them).
//
// The final chunk and trailer are framed only after payload returned
// io.EOF right after length bytes: a payload that is a Reader returns it
// only once the client's body verified, so a store never receives a whole
// body whose client body failed. A payload that ends early or goes on is
// ErrPayloadLength; payload's own errors are returned as they are.
func NewUnsignedTrailerEncoder(payload io.Reader, length int64, trailer string, chunkSize int) (*Encoder, error) {
	newSum := checksums[trailer]
	switch {
	case newSum == nil:
		return nil, fmt.Errorf("awschunked: %q is not a checksum trailer", trailer)
	case length < 0:
		return nil, fmt.Errorf("awschunked: payload length %d", length)
	case chunkSize == 0:
		chunkSize = DefaultEncodeChunkSize
	case chunkSize < MinEncodeChunkSize:
		return nil, fmt.Errorf("awschunked: chunk size %d, at least %d", chunkSize, MinEncodeChunkSize)
	}
	return &Encoder{payload: payload, length: length, chunk: int64(chunkSize), trailer: trailer, sum: newSum(), left: length}, nil
}

// Header returns the headers the request must carry: Content-Encoding
// aws-chunked, X-Amz-Content-Sha256 STREAMING-UNSIGNED-PAYLOAD-TRAILER,
// X-Amz-Decoded-Content-Length and X-Amz-Trailer. (Content-Length is
// ContentLength, for http.Request.ContentLength.)
func (e *Encoder) Header() http.Header {
	return http.Header{
		"Content-Encoding":             {"aws-chunked"},
		"X-Amz-Content-Sha256":         {string(UnsignedPayloadTrailer)},
		"X-Amz-Decoded-Content-Length": {strconv.FormatInt(e.length, 10)},
		"X-Amz-Trailer":                {e.trailer},
	}
}

// ContentLength is the encoded body's length in bytes.
func (e *Encoder) ContentLength() int64 {
	frame := func(size int64) int64 { return int64(len(strconv.FormatInt(size, 16))) + 2 + size + 2 }
	n := e.length / e.chunk * frame(e.chunk)
	if r := e.length % e.chunk; r > 0 {
		n += frame(r)
	}
	// 0\r\n name:value\r\n \r\n
	return n + 3 + int64(len(e.trailer)) + 1 + int64(base64.StdEncoding.EncodedLen(e.sum.Size())) + 2 + 2
}

// Read reads the encoded body.
func (e *Encoder) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(e.frame) > 0 {
			n := copy(p, e.frame)
			e.frame = e.frame[n:]
			return n, nil
		}
		if e.err != nil {
			return 0, e.err
		}
		if e.inChunk > 0 {
			n, err := e.payload.Read(p[:min(int64(len(p)), e.inChunk)])
			e.sum.Write(p[:n])
			e.inChunk -= int64(n)
			if e.inChunk == 0 {
				e.frame = append(e.frameBuf[:0], "\r\n"...)
			}
			switch {
			case err == io.EOF && e.inChunk > 0:
				e.err = fmt.Errorf("%w: payload ended %d bytes short of %d", ErrPayloadLength, e.left+e.inChunk, e.length)
			case err != nil && err != io.EOF:
				e.err = err
			}
			if e.err != nil {
				e.frame = nil // no CRLF that would close a chunk cut short
			}
			if n > 0 {
				return n, nil
			}
			continue
		}
		if e.done {
			return 0, io.EOF
		}
		if e.left > 0 {
			e.inChunk = min(e.chunk, e.left)
			e.left -= e.inChunk
			e.frame = append(strconv.AppendInt(e.frameBuf[:0], e.inChunk, 16), "\r\n"...)
			continue
		}
		if err := e.atEnd(); err != nil {
			e.err = err
			continue
		}
		e.done = true
		f := append(e.frameBuf[:0], "0\r\n"...)
		f = append(f, e.trailer...)
		f = append(f, ':')
		f = base64.StdEncoding.AppendEncode(f, e.sum.Sum(nil))
		e.frame = append(f, "\r\n\r\n"...)
	}
}

// atEnd reads payload once more after its length: it must end there.
func (e *Encoder) atEnd() error {
	var b [1]byte
	for range 100 {
		n, err := e.payload.Read(b[:])
		switch {
		case n > 0:
			return fmt.Errorf("%w: payload goes on after %d bytes", ErrPayloadLength, e.length)
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
	return io.ErrNoProgress
}
