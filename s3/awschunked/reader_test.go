package awschunked

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// TestAWSExamples decodes the two worked examples of the AWS docs
// ("Signature calculations for the Authorization header: transferring
// payload in multiple chunks", and its trailing-header variant): 65,536 and
// 1,024 bytes of 'a', the documented seed and chunk signatures, and the
// documented crc32c trailer and trailer signature. No code of ours signed
// them.
func TestAWSExamples(t *testing.T) {
	const secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	cases := []struct {
		form    Form
		seed    string
		sigs    [3]string
		trailer string
		length  int
	}{
		{SignedPayload, "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9", [3]string{
			"ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
			"0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
			"b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
		}, "", 66824},
		{SignedPayloadTrailer, "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e", [3]string{
			"b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
			"1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
			"2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
		}, "x-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435\r\n", 0},
	}
	for _, c := range cases {
		t.Run(string(c.form), func(t *testing.T) {
			var b bytes.Buffer
			fmt.Fprintf(&b, "10000;chunk-signature=%s\r\n%s\r\n", c.sigs[0], strings.Repeat("a", 65536))
			fmt.Fprintf(&b, "400;chunk-signature=%s\r\n%s\r\n", c.sigs[1], strings.Repeat("a", 1024))
			fmt.Fprintf(&b, "0;chunk-signature=%s\r\n%s\r\n", c.sigs[2], c.trailer)
			if c.length != 0 && b.Len() != c.length {
				t.Fatalf("encoded length %d, the docs' Content-Length is %d", b.Len(), c.length)
			}
			o := Options{
				Form: c.form, SigningKey: SigningKey(secret, "20130524", "us-east-1"),
				Date: "20130524T000000Z", Scope: "20130524/us-east-1/s3/aws4_request",
				Seed: c.seed, DecodedLength: 66560,
			}
			if c.trailer != "" {
				o.Trailers = []string{"x-amz-checksum-crc32c"}
			}
			got, tr, err := decode(b.Bytes(), o)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, bytes.Repeat([]byte("a"), 66560)) {
				t.Fatalf("decoded %d bytes, not the 66,560 'a's", len(got))
			}
			if c.trailer != "" && tr["x-amz-checksum-crc32c"] != "sOO8/Q==" {
				t.Fatalf("trailers %v", tr)
			}
			// One flipped byte in the second chunk's data: the first chunk
			// is returned, the second not.
			enc := bytes.Clone(b.Bytes())
			enc[88+65538+86+500] = 'b'
			got, _, err = decode(enc, o)
			if !errors.Is(err, ErrChunkSignature) || len(got) != 65536 {
				t.Fatalf("a changed byte in chunk 2: %d bytes, %v; want 65536 and ErrChunkSignature", len(got), err)
			}
		})
	}
}

// TestRoundTrip decodes bodies of each form and checksum, through readers
// that split the body anywhere and callers with small buffers.
func TestRoundTrip(t *testing.T) {
	chunks := [][]byte{pattern(9000, 1), pattern(8192, 2), pattern(17, 3)}
	want := bytes.Join(chunks, nil)
	for _, form := range allForms {
		for name := range checksums {
			if form == SignedPayload && name != "x-amz-checksum-crc32" {
				continue
			}
			b := newBody(form, name)
			enc := b.encode(t, chunks, "")
			for _, wrap := range []func(io.Reader) io.Reader{
				func(r io.Reader) io.Reader { return r },
				iotest.OneByteReader, iotest.HalfReader, iotest.DataErrReader,
			} {
				r := NewReader(wrap(bytes.NewReader(enc)), b.options(int64(len(want))))
				var got []byte
				buf := make([]byte, 777)
				for {
					n, err := r.Read(buf)
					got = append(got, buf[:n]...)
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatalf("%s %s: %v", form, name, err)
					}
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s %s: decoded %d bytes, want %d", form, name, len(got), len(want))
				}
				if tr := r.Trailers(); b.trailer != "" && tr[name] != checksumOf(t, name, want) {
					t.Fatalf("%s: trailers %v", form, tr)
				}
				if n, err := r.Read(buf); n != 0 || err != io.EOF {
					t.Fatalf("a Read after the end: %d, %v", n, err)
				}
			}
		}
	}
	// An empty payload is the final chunk alone.
	for _, form := range allForms {
		b := newBody(form, "x-amz-checksum-sha256")
		if got, _, err := decode(b.encode(t, nil, ""), b.options(0)); err != nil || len(got) != 0 {
			t.Fatalf("%s, empty: %q, %v", form, got, err)
		}
	}
}

// smallBodies are the bodies the exhaustive tests change, one of each form.
func smallBodies(t *testing.T) map[Form][]byte {
	chunks := [][]byte{[]byte("hello, "), []byte("fenced "), []byte("world")}
	m := map[Form][]byte{}
	for _, form := range allForms {
		m[form] = newBody(form, "x-amz-checksum-crc32").encode(t, chunks, "")
	}
	return m
}

// TestEverySingleChangeFails changes every byte of a small body of each form
// in several ways (flip its low bit, its case bit, its high bit; delete it;
// insert a byte before it) and checks that decoding fails: a data byte, a
// chunk size, a signature, a CRLF, the trailer name or value, the trailer
// signature, each is caught.
func TestEverySingleChangeFails(t *testing.T) {
	const n = int64(len("hello, fenced world"))
	for form, enc := range smallBodies(t) {
		o := newBody(form, "x-amz-checksum-crc32").options(n)
		if _, _, err := decode(enc, o); err != nil {
			t.Fatalf("%s unchanged: %v", form, err)
		}
		tries := 0
		for i := range enc {
			var variants [][]byte
			for _, x := range []byte{0x01, 0x20, 0x80} {
				c := bytes.Clone(enc)
				c[i] ^= x
				variants = append(variants, c)
			}
			variants = append(variants,
				append(bytes.Clone(enc[:i]), enc[i+1:]...),
				append(append(bytes.Clone(enc[:i]), '0'), enc[i:]...),
				append(append(bytes.Clone(enc[:i]), 'a'), enc[i:]...))
			for _, c := range variants {
				tries++
				if got, _, err := decode(c, o); err == nil {
					t.Fatalf("%s: a change at byte %d (%q) decoded cleanly to %q:\n%q", form, i, enc[i], got, c)
				}
			}
		}
		t.Logf("%s: %d changes of a %d-byte body, each refused", form, tries, len(enc))
	}
}

// TestStructuralChanges: dropped, reordered and repeated chunks, a missing
// final chunk, a trailer missing or repeated or undeclared, a decoded length
// off by one either way.
func TestStructuralChanges(t *testing.T) {
	chunks := [][]byte{pattern(100, 1), pattern(100, 2), pattern(50, 3)}
	for _, form := range allForms {
		b := newBody(form, "x-amz-checksum-crc32")
		enc := b.encode(t, chunks, "")
		frames := splitFrames(enc, form)
		if len(frames) != 4 {
			t.Fatalf("%s: %d frames", form, len(frames))
		}
		o := b.options(250)
		cases := map[string]struct {
			body []byte
			want error
			opts Options
		}{
			"chunk dropped":        {join(frames[0], frames[2], frames[3]), nil, b.options(150)},
			"chunks reordered":     {join(frames[1], frames[0], frames[2], frames[3]), nil, o},
			"chunk repeated":       {join(frames[0], frames[0], frames[1], frames[2], frames[3]), nil, b.options(350)},
			"final chunk missing":  {join(frames[0], frames[1], frames[2]), io.ErrUnexpectedEOF, o},
			"declared length + 1":  {enc, ErrDecodedLength, b.options(251)},
			"declared length - 1":  {enc, ErrDecodedLength, b.options(249)},
			"bytes after the end":  {join(enc, []byte("\r\n")), ErrMalformed, o},
			"wrong trailer value":  {b.encode(t, chunks, "AAAAAA=="), nil, o},
			"checksum of another":  {b.encode(t, chunks, checksumOf(t, "x-amz-checksum-crc32", []byte("x"))), nil, o},
			"undeclared trailer":   {bytes.Replace(enc, []byte("x-amz-checksum-crc32:"), []byte("x-amz-checksum-crc33:"), 1), ErrMalformed, o},
			"trailer repeated":     {bytes.Replace(enc, []byte("\r\nx-amz-checksum-crc32:"), []byte("\r\nx-amz-checksum-crc32:AAAAAA==\r\nx-amz-checksum-crc32:"), 1), ErrMalformed, o},
			"another seed":         {enc, nil, func() Options { o := o; o.Seed = strings.Repeat("0", 64); return o }()},
			"another signing date": {enc, nil, func() Options { o := o; o.Date = "20260501T123001Z"; return o }()},
		}
		if form == SignedPayload {
			delete(cases, "wrong trailer value")
			delete(cases, "checksum of another")
			delete(cases, "undeclared trailer")
			delete(cases, "trailer repeated")
		}
		if form == UnsignedPayloadTrailer {
			delete(cases, "another seed")
			delete(cases, "another signing date")
		}
		for name, c := range cases {
			got, _, err := decode(c.body, c.opts)
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
				t.Errorf("%s, %s: %d bytes, %v; want the error %v", form, name, len(got), err, c.want)
			}
		}
	}
	// The trailer signature signs the trailer's value: a value changed and
	// re-checksummed payload is still refused by its signature.
	b := newBody(SignedPayloadTrailer, "x-amz-checksum-crc32")
	enc := b.encode(t, chunks, "")
	sigAt := bytes.Index(enc, []byte("x-amz-trailer-signature:")) + 24
	enc[sigAt] ^= 1
	if _, _, err := decode(enc, b.options(250)); !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTrailerSignature) {
		t.Fatalf("a changed trailer signature: %v", err)
	}
	enc = b.encode(t, chunks, "")
	copy(enc[sigAt:], strings.Repeat("0", 64))
	if _, _, err := decode(enc, b.options(250)); !errors.Is(err, ErrTrailerSignature) {
		t.Fatalf("a zero trailer signature: %v, want ErrTrailerSignature", err)
	}
}

// splitFrames splits an encoded body into its chunks' frames, the last
// being the final chunk with the trailers.
func splitFrames(enc []byte, form Form) [][]byte {
	var frames [][]byte
	for len(enc) > 0 {
		eol := bytes.Index(enc, []byte("\r\n"))
		hexSize, _, _ := strings.Cut(string(enc[:eol]), ";")
		size, _ := parseSize(hexSize)
		if size == 0 {
			return append(frames, enc)
		}
		end := eol + 2 + int(size) + 2
		frames = append(frames, enc[:end])
		enc = enc[end:]
	}
	return frames
}

func join(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestTruncatedAnywhere cuts a small body of each form at every length and
// checks each ends in an error (ErrMalformed, io.ErrUnexpectedEOF), never
// a clean io.EOF, whatever bytes came before.
func TestTruncatedAnywhere(t *testing.T) {
	const n = int64(len("hello, fenced world"))
	for form, enc := range smallBodies(t) {
		o := newBody(form, "x-amz-checksum-crc32").options(n)
		for k := range len(enc) {
			for _, wrap := range []func(io.Reader) io.Reader{
				func(r io.Reader) io.Reader { return r }, iotest.OneByteReader,
			} {
				got, err := io.ReadAll(NewReader(wrap(bytes.NewReader(enc[:k])), o))
				if !errors.Is(err, ErrMalformed) || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("%s cut at %d of %d: %q, %v; want ErrMalformed and io.ErrUnexpectedEOF", form, k, len(enc), got, err)
				}
			}
		}
	}
}

// recorder records every byte a Reader returned.
type recorder struct {
	r   io.Reader
	got []byte
}

func (rec *recorder) Read(p []byte) (int, error) {
	n, err := rec.r.Read(p)
	rec.got = append(rec.got, p[:n]...)
	return n, err
}

// TestNoByteOfABadChunk: a chunk whose data or signature is changed yields
// no byte of it, whatever the caller's buffer size, and the error is sticky.
func TestNoByteOfABadChunk(t *testing.T) {
	chunks := [][]byte{pattern(10000, 1), pattern(9000, 2), pattern(300, 3)}
	for _, form := range []Form{SignedPayload, SignedPayloadTrailer} {
		b := newBody(form, "x-amz-checksum-crc32")
		frames := splitFrames(b.encode(t, chunks, ""), form)
		for _, what := range []string{"data", "signature"} {
			f := bytes.Clone(frames[1])
			if what == "data" {
				f[len(f)-100] ^= 0x40
			} else {
				at := bytes.IndexByte(f, '=') + 5
				f[at] = map[bool]byte{true: '1', false: '0'}[f[at] == '0'] // another hex digit
			}
			enc := join(frames[0], f, frames[2], frames[3])
			for _, size := range []int{1, 7, 4096, 1 << 20} {
				rec := &recorder{r: NewReader(bytes.NewReader(enc), b.options(19300))}
				buf := make([]byte, size)
				var err error
				for err == nil {
					_, err = rec.Read(buf)
				}
				if !errors.Is(err, ErrChunkSignature) || !bytes.Equal(rec.got, chunks[0]) {
					t.Fatalf("%s, %s of chunk 2 changed, reads of %d: got %d bytes, %v; want chunk 1's %d and ErrChunkSignature",
						form, what, size, len(rec.got), err, len(chunks[0]))
				}
				if n, again := rec.Read(buf); n != 0 || again != err {
					t.Fatalf("a Read after the error: %d, %v", n, again)
				}
			}
		}
	}
}

// TestLimits: a signed chunk over MaxChunkSize, a size line or trailer
// section over its bound, and the size spellings no signer writes are
// refused as ErrMalformed, before any byte of them is buffered.
func TestLimits(t *testing.T) {
	b := newBody(SignedPayload, "")
	o := b.options(1 << 40)
	o.MaxChunkSize = 1024
	sig := strings.Repeat("a", 64)
	for name, enc := range map[string]string{
		"signed chunk over the maximum": "401;chunk-signature=" + sig + "\r\n",
		"size line too long":            "400;chunk-signature=" + sig + strings.Repeat(" ", 40) + "\r\n",
		"size line over the buffer":     strings.Repeat("4", 5000),
		"upper-case hex":                "4A;chunk-signature=" + sig + "\r\n",
		"leading zero":                  "04;chunk-signature=" + sig + "\r\n",
		"16 hex digits":                 "1000000000000000;chunk-signature=" + sig + "\r\n",
		"negative":                      "-4;chunk-signature=" + sig + "\r\n",
		"space":                         "4 ;chunk-signature=" + sig + "\r\n",
		"bare LF":                       "4;chunk-signature=" + sig + "\n",
		"CR inside":                     "4\r;chunk-signature=" + sig + "\r\n",
		"upper-case signature":          "4;chunk-signature=" + strings.Repeat("A", 64) + "\r\n",
		"short signature":               "4;chunk-signature=" + sig[:63] + "\r\n",
		"extension":                     "4;chunk-signature=" + sig + ";x=y\r\n",
	} {
		_, _, err := decode([]byte(enc), o)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	// An unsigned chunk streams: no maximum but the decoded length.
	u := newBody(UnsignedPayloadTrailer, "x-amz-checksum-crc32")
	uo := u.options(10)
	if _, _, err := decode([]byte("b\r\n"), uo); !errors.Is(err, ErrDecodedLength) {
		t.Errorf("an unsigned chunk past the decoded length: %v", err)
	}
	big := u.encode(t, [][]byte{pattern(3<<20, 1)}, "")
	uo = u.options(3 << 20)
	uo.MaxChunkSize = 1024
	if _, _, err := decode(big, uo); err != nil {
		t.Errorf("a 3 MiB unsigned chunk: %v", err)
	}
	// The trailer section is bounded.
	long := bytes.Replace(u.encode(t, [][]byte{[]byte("x")}, ""), []byte("\r\n\r\n"), []byte("\r\n"+strings.Repeat("y", 2000)+"\r\n\r\n"), 1)
	if _, _, err := decode(long, u.options(1)); !errors.Is(err, ErrMalformed) {
		t.Errorf("a long trailer section: %v", err)
	}
}

// TestOptions: options that cannot describe a body fail every Read with
// ErrOptions.
func TestOptions(t *testing.T) {
	good := newBody(SignedPayloadTrailer, "x-amz-checksum-crc32").options(3)
	for name, change := range map[string]func(*Options){
		"unknown form":          func(o *Options) { o.Form = "UNSIGNED-PAYLOAD" },
		"negative length":       func(o *Options) { o.DecodedLength = -1 },
		"no trailer":            func(o *Options) { o.Trailers = nil },
		"two trailers":          func(o *Options) { o.Trailers = []string{"x-amz-checksum-crc32", "x-amz-checksum-sha1"} },
		"unknown trailer":       func(o *Options) { o.Trailers = []string{"x-amz-checksum-md5"} },
		"trailer on plain form": func(o *Options) { o.Form = SignedPayload },
		"no key":                func(o *Options) { o.SigningKey = nil },
		"no scope":              func(o *Options) { o.Scope = "" },
		"bad date":              func(o *Options) { o.Date = "2026-05-01" },
		"bad seed":              func(o *Options) { o.Seed = "abc" },
		"negative maximum":      func(o *Options) { o.MaxChunkSize = -1 },
	} {
		o := good
		change(&o)
		r := NewReader(strings.NewReader("0\r\n\r\n"), o)
		for range 2 {
			if _, err := r.Read(make([]byte, 10)); !errors.Is(err, ErrOptions) {
				t.Errorf("%s: %v, want ErrOptions", name, err)
			}
		}
	}
}

// TestReadErrorPassesThrough: body's own read error (a client timeout) is
// returned as it is, not as ErrMalformed.
func TestReadErrorPassesThrough(t *testing.T) {
	b := newBody(UnsignedPayloadTrailer, "x-amz-checksum-crc32")
	enc := b.encode(t, [][]byte{pattern(100, 1)}, "")
	boom := errors.New("client timed out")
	for k := range len(enc) {
		r := NewReader(io.MultiReader(bytes.NewReader(enc[:k]), iotest.ErrReader(boom)), b.options(100))
		if _, err := io.ReadAll(r); !errors.Is(err, boom) || errors.Is(err, ErrMalformed) {
			t.Fatalf("body failing after %d bytes: %v", k, err)
		}
	}
}

// endless is a body of n chunks of the same data, generated as it is read,
// so that only the Reader's memory is measured.
type endless struct {
	b      body
	data   []byte
	hash   string // hex SHA-256 of data
	left   int
	frame  []byte
	buf    []byte // frame's storage, reused
	prev   string
	key    []byte
	tail   string // the unsigned form's trailer line
	ended  bool
	signed bool
}

func (e *endless) Read(p []byte) (int, error) {
	if len(e.frame) == 0 {
		switch {
		case e.ended:
			return 0, io.EOF
		case e.left == 0:
			e.ended = true
			e.frame = []byte(e.line(0, emptySHA256) + e.tail + "\r\n")
		default:
			e.left--
			e.buf = append(append(e.buf[:0], e.line(len(e.data), e.hash)...), e.data...)
			e.frame = append(e.buf, "\r\n"...)
		}
	}
	n := copy(p, e.frame)
	e.frame = e.frame[n:]
	return n, nil
}

func (e *endless) line(size int, hash string) string {
	if !e.signed {
		return fmt.Sprintf("%x\r\n", size)
	}
	o := e.b.options(0)
	m := hmac.New(sha256.New, e.key)
	m.Write([]byte("AWS4-HMAC-SHA256-PAYLOAD\n" + o.Date + "\n" + o.Scope + "\n" + e.prev + "\n" + emptySHA256 + "\n" + hash))
	e.prev = hex.EncodeToString(m.Sum(nil))
	return fmt.Sprintf("%x;chunk-signature=%s\r\n", size, e.prev)
}

// TestStreamsInBoundedMemory decodes 256 MiB bodies (1 MiB chunks) and
// checks that the bytes allocated meanwhile, generator included, stay far
// below the body's size.
func TestStreamsInBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("256 MiB")
	}
	const chunk, chunks = 1 << 20, 256
	data := pattern(chunk, 9)
	sum := sha256.Sum256(data)
	for _, form := range []Form{SignedPayload, UnsignedPayloadTrailer} {
		b := newBody(form, "x-amz-checksum-crc32")
		o := b.options(chunk * chunks)
		e := &endless{b: b, data: data, left: chunks, signed: form == SignedPayload, prev: b.seed, key: o.SigningKey,
			hash: hex.EncodeToString(sum[:]), buf: make([]byte, 0, chunk+128)}
		if form == UnsignedPayloadTrailer {
			h := crc32.NewIEEE()
			for range chunks {
				h.Write(data)
			}
			e.tail = "x-amz-checksum-crc32:" + base64.StdEncoding.EncodeToString(h.Sum(nil)) + "\r\n"
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		n, err := io.CopyBuffer(io.Discard, NewReader(e, o), make([]byte, 32<<10))
		runtime.ReadMemStats(&after)
		if err != nil || n != chunk*chunks {
			t.Fatalf("%s: %d bytes, %v", form, n, err)
		}
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: 256 MiB decoded in %v, %d KiB allocated", form, time.Since(start).Round(time.Millisecond), alloc>>10)
		if alloc > 4<<20 {
			t.Fatalf("%s: %d bytes allocated decoding 256 MiB, want at most 4 MiB (one 1 MiB chunk and small change)", form, alloc)
		}
	}
}

// TestTrailerEndingInLF: minio-go ends a signed trailer's line with "\n"
// and an empty CRLF line ("name:value\n\r\nx-amz-trailer-signature:..."). The
// signed trailer form takes that shape, since what is signed is the same;
// the unsigned trailer form, a bare LF without the empty line, and one
// before the signature or the end are refused.
func TestTrailerEndingInLF(t *testing.T) {
	chunks := [][]byte{pattern(100, 1), pattern(50, 2)}
	const name = "x-amz-checksum-crc32"
	b := newBody(SignedPayloadTrailer, name)
	enc := b.encode(t, chunks, "")
	minio := bytes.Replace(enc, []byte("\r\nx-amz-trailer-signature:"), []byte("\n\r\nx-amz-trailer-signature:"), 1)
	got, trailers, err := decode(minio, b.options(150))
	if err != nil || !bytes.Equal(got, join(chunks...)) || trailers[name] == "" {
		t.Fatalf("minio-go's trailer shape: %d bytes, trailers %v, %v; want the payload", len(got), trailers, err)
	}
	at := bytes.Index(minio, []byte("x-amz-trailer-signature:")) + 24
	changed := bytes.Clone(minio)
	changed[at] ^= 1
	if _, _, err := decode(changed, b.options(150)); err == nil {
		t.Errorf("minio-go's shape with a changed trailer signature: accepted")
	}
	for what, body := range map[string][]byte{
		"bare LF, no empty line": bytes.Replace(enc, []byte("\r\nx-amz-trailer-signature:"), []byte("\nx-amz-trailer-signature:"), 1),
		"signature ending in LF": bytes.Replace(minio, []byte("\r\n\r\n"), []byte("\n\r\n"), 1),
		"end ending in LF":       append(bytes.Clone(minio[:len(minio)-2]), '\n'),
	} {
		if _, _, err := decode(body, b.options(150)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v; want ErrMalformed", what, err)
		}
	}
	u := newBody(UnsignedPayloadTrailer, name)
	uenc := u.encode(t, chunks, "")
	ushape := bytes.Replace(uenc, []byte("\r\n\r\n"), []byte("\n\r\n\r\n"), 1)
	if _, _, err := decode(ushape, u.options(150)); !errors.Is(err, ErrMalformed) {
		t.Errorf("the unsigned trailer form in minio-go's shape: %v; want ErrMalformed", err)
	}
}
