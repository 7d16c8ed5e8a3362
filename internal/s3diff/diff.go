// Package s3diff is the differential test of the proxy's reading of S3
// requests against real stores: it generates spellings of S3 requests
// (path and key encodings, dot segments, runs of slashes, a trailing
// slash, Host forms, repeated and differently spelt headers,
// sub-resources, method overrides, copy sources, DeleteObjects and
// PostObject bodies), sends each through the proxy as the holder, as a
// stale holder or without a token, and compares what the store then
// actually changed, read from the store itself, with the fences the proxy
// holds and, in gateway mode, with the worker's grants.
//
// The invariant: every object (or bucket configuration) the store changed
// was admitted under its own resource with a token at or above its maximum:
// the resource's maximum before the request is at or below the request's
// token, and after it at or above (so the proxy raised that very resource);
// a request without a token changes nothing; and in gateway mode every
// object the store changed or returned for the worker lies inside the
// worker's grants. The resource of a store's object is found here, from the
// store's own name for it, by the documented alias rule (docs/S3.md: a "\"
// is a "/", runs of "/" are one, a leading or trailing "/" goes), not by the
// proxy's code.
package s3diff

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fenceproxy/fenceproxy/client"
	"github.com/fenceproxy/fenceproxy/wire"
)

// Grant is a worker key's grant in gateway mode: the objects of Bucket
// whose keys start with Prefix, read and write.
type Grant struct{ Bucket, Prefix string }

// Config is one run against one store through one proxy.
type Config struct {
	Seed     int64
	Requests int
	// Proxy is the proxy listener's address (host:port); Domain is its S3
	// domain for virtual-hosted style ("" for path style only).
	Proxy, Domain string
	Control       *client.Control // the proxy's control API, with the admin bearer
	// Snapshot reads the store's state from the store itself.
	Snapshot func(testing.TB) Snapshot
	// Direct is an S3 client straight to the store (not through the
	// proxy), for the seed objects and the multipart uploads a request
	// completes or aborts.
	Direct *s3.Client
	// Signer signs what goes through the proxy: the store's key in pass
	// mode (nil when the store checks no signature), the worker's key in
	// gateway mode. Resign: the store reports its canonical request on a
	// signature mismatch (versitygw), and the request is signed again over
	// it once.
	Signer *Signer
	Resign bool
	// Grants, in gateway mode, are the worker's; nil in pass mode.
	Grants []Grant
	// Staging, when set, names where the store keeps an upload of key in
	// progress (a key of bucket), for the writes aimed at it; nil: none.
	Staging func(bucket, key, uploadID string) string
	// BucketWrites is the proxy's FENCEPROXY_S3_BUCKET_WRITES.
	BucketWrites string
	// StopAfter ends the run after that many violations; 0 is 20.
	StopAfter int
}

// Result is what a run saw.
type Result struct {
	Requests   int            // sent through the proxy
	Spellings  int            // distinct combinations of operation and spelling changes
	Applied    int            // answered 2xx (by the store: the proxy forwarded them)
	Refused    map[string]int // by the proxy, by Fencing-Refused reason
	Aliases    map[string]int // spelling changes under which the store changed another object than the literal key
	Violations []string
}

// universe are the objects the generator aims at, by bucket.
var universe = []struct{ bucket, key string }{
	{"bkt", "o"}, {"bkt", "d/x"}, {"bkt", "d/y/z"}, {"bkt", "jobs/a"}, {"bkt", "jobs/b/c"}, {"bkt", "private/p.txt"},
	{"other", "drop/f"}, {"other", "o2"},
}

// Buckets are the buckets a run needs on the store.
var Buckets = []string{"bkt", "other"}

// startToken is the fence every object of the universe has at the start.
const startToken = 1000

type run struct {
	t      testing.TB
	cfg    Config
	rng    *rand.Rand
	res    Result
	token  uint64 // the largest token sent so far
	n      int    // objects written, for unique contents
	combos map[string]bool
}

// Run seeds the store, raises every object's fence to 1000 and sends
// cfg.Requests generated requests, checking each; the violations are in the
// Result, for the caller to judge (none, or, with a protection off, some).
func Run(t testing.TB, cfg Config) Result {
	r := &run{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x53)), token: startToken,
		res: Result{Refused: map[string]int{}, Aliases: map[string]int{}}, combos: map[string]bool{}}
	ctx := context.Background()
	for _, o := range universe {
		r.putDirect(ctx, o.bucket, o.key)
		if _, err := cfg.Control.RaiseFence(ctx, o.bucket+"/"+o.key, startToken); err != nil {
			t.Fatalf("raising %s/%s: %v", o.bucket, o.key, err)
		}
	}
	for _, b := range Buckets {
		if _, err := cfg.Control.RaiseFence(ctx, b, startToken); err != nil {
			t.Fatalf("raising %s: %v", b, err)
		}
	}
	stop := cfg.StopAfter
	if stop == 0 {
		stop = 20
	}
	for i := 0; i < cfg.Requests && len(r.res.Violations) < stop; i++ {
		r.step(ctx, i)
	}
	r.res.Spellings = len(r.combos)
	return r.res
}

func (r *run) marker(bucket, key string) string {
	r.n++
	return fmt.Sprintf("MARK{%s/%s}#%d", bucket, key, r.n)
}

func (r *run) putDirect(ctx context.Context, bucket, key string) {
	_, err := r.cfg.Direct.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
		Body: strings.NewReader(r.marker(bucket, key))})
	if err != nil {
		r.t.Fatalf("seeding %s/%s on the store: %v", bucket, key, err)
	}
}

// fences returns every fence the proxy holds.
func (r *run) fences(ctx context.Context) map[string]uint64 {
	out := map[string]uint64{}
	after := ""
	for {
		page, err := r.cfg.Control.ListFences(ctx, "", after, 10000)
		if err != nil {
			r.t.Fatalf("listing fences: %v", err)
		}
		for _, f := range page.Fences {
			out[f.Resource] = uint64(f.Token)
		}
		if page.Next == "" {
			return out
		}
		after = page.Next
	}
}

// resourceOf is the resource of a store's object under the documented
// alias rule: the bucket, then the key's canon.
func resourceOf(bucket, key string) string {
	if c := canon(key); c != "" {
		return bucket + "/" + c
	}
	return bucket
}

// canon is a key under the documented alias rule, written here apart from
// the proxy's code: a "\" is a "/", runs of "/" are one, no leading or
// trailing "/".
func canon(key string) string {
	var segs []string
	for s := range strings.SplitSeq(strings.ReplaceAll(key, "\\", "/"), "/") {
		if s != "" {
			segs = append(segs, s)
		}
	}
	return strings.Join(segs, "/")
}

// intent is what the generator aimed at: the check needs only the token.
type intent struct {
	op, spelling string
	token        string // "" for none
	tok          uint64
	bucket, key  string // the target, as meant
	literal      string // a single object's key as its path spells it, decoded; "" for others
	read         bool   // a read: checked against the grants only
}

func (r *run) step(ctx context.Context, i int) {
	spec, in := r.generate(ctx, r.fences(ctx))
	before := r.cfg.Snapshot(r.t)
	fb := r.fences(ctx)
	r.combos[in.op+" "+in.spelling] = true
	ans := Do(r.t, r.cfg.Proxy, spec, r.cfg.Signer, r.cfg.Resign)
	r.res.Requests++
	if reason := ans.Header.Get(wire.HeaderRefused); reason != "" {
		r.res.Refused[reason]++
	} else if ans.Status >= 200 && ans.Status < 300 {
		r.res.Applied++
	}
	after := r.cfg.Snapshot(r.t)
	fa := r.fences(ctx)
	r.check(i, spec, in, ans, before, after, fb, fa)
}

// check holds the request's effect against the invariant.
func (r *run) check(i int, spec Spec, in intent, ans Answer, before, after Snapshot, fb, fa map[string]uint64) {
	violate := func(format string, args ...any) {
		msg := fmt.Sprintf("request %d (%s %s, token %q): %s\n\t%s\n\tanswer %d %s %.300s", i, in.op, in.spelling, in.token,
			fmt.Sprintf(format, args...), spec, ans.Status, ans.Header.Get(wire.HeaderRefused), ans.Body)
		r.res.Violations = append(r.res.Violations, msg)
	}
	for _, path := range before.Changed(after) {
		it := item(before, after, path)
		switch it.Kind {
		case Internal:
			// The store's own state of the target's upload: changed only by
			// a write admitted on the target itself.
			if res := resourceOf(in.bucket, in.key); in.token == "" || fb[res] > in.tok || fa[res] < in.tok {
				violate("the store changed its own state %s, for a write not admitted on %s (%d before, %d after)", path, res, fb[res], fa[res])
			}
			continue
		case Bucket:
			res := it.Bucket
			switch {
			case r.cfg.BucketWrites == "pass":
			case in.token == "":
				violate("bucket %s changed by a request without a token", it.Bucket)
			case r.cfg.BucketWrites != "fence":
				violate("bucket %s changed with FENCEPROXY_S3_BUCKET_WRITES=%s", it.Bucket, r.cfg.BucketWrites)
			case fb[res] > in.tok || fa[res] < in.tok:
				violate("bucket %s changed: its fence was %d before and %d after, the token %d", res, fb[res], fa[res], in.tok)
			}
			continue
		}
		res := resourceOf(it.Bucket, it.Key)
		if in.literal != "" && it.Key != in.literal && it.Bucket == in.bucket {
			r.res.Aliases[aliasClass(in.literal, it.Key)]++
		}
		switch {
		case in.token == "":
			violate("object %s (resource %s) changed by a request without a token", path, res)
		case fb[res] > in.tok:
			violate("object %s changed by token %d below its resource %s's maximum %d", path, in.tok, res, fb[res])
		case fa[res] < in.tok:
			violate("object %s changed, but the proxy did not raise its resource %s (%d after) to the token %d: it admitted another resource",
				path, res, fa[res], in.tok)
		}
		if r.cfg.Grants != nil {
			if !r.granted(it.Bucket, it.Key) {
				violate("object %s changed outside the worker's grants", path)
			}
			if m := r.foreignMarker(after, it.Content); m != "" {
				violate("object %s now holds %s, data from outside the worker's grants", path, m)
			}
		}
	}
	if r.cfg.Grants != nil && ans.Status >= 200 && ans.Status < 300 {
		if m := r.foreignMarker(before, ans.Body); m != "" {
			violate("the answer holds %s, from outside the worker's grants", m)
		}
	}
}

// aliasClass names how the store's key differs from the literal one.
func aliasClass(literal, stored string) string {
	norm := strings.ReplaceAll(literal, "\\", "/")
	c := canon(literal)
	switch {
	case strings.HasSuffix(norm, "/") && c != "" && canon(stored) == c+"/"+c[strings.LastIndexByte(c, '/')+1:]:
		return `the data of a directory marker ("a/b/" is a/b/b)`
	case canon(stored) != c:
		return fmt.Sprintf("%q stored as %q", literal, stored)
	case norm != literal:
		return `a \ is a / ("a\b" is a/b)`
	case strings.HasSuffix(literal, "/") && !strings.HasSuffix(stored, "/"):
		return `a trailing / ("k/" is k)`
	case strings.HasPrefix(literal, "/"):
		return `a leading / ("/k" is k)`
	}
	return `runs of / ("a//b" is a/b)`
}

// literalKey is the key a request's path spells, decoded, as a store that
// splits the bucket off first and merges nothing reads it; "" when the path
// does not decode or names another bucket.
func literalKey(s Spec, bucket string) string {
	p := s.Path
	if !strings.HasPrefix(strings.ToLower(s.Host), bucket+".") {
		var ok bool
		if p, ok = strings.CutPrefix(p, "/"+bucket+"/"); !ok {
			return ""
		}
	} else {
		p = strings.TrimPrefix(p, "/")
	}
	k, err := url.PathUnescape(p)
	if err != nil {
		return ""
	}
	return k
}

// granted reports whether the worker's grants cover key of bucket, as the
// store names it.
func (r *run) granted(bucket, key string) bool {
	for _, g := range r.cfg.Grants {
		if g.Bucket == bucket && strings.HasPrefix(key, g.Prefix) {
			return true
		}
	}
	return false
}

// foreignMarker returns the first marker or listed key in data of an object
// of snap outside the worker's grants, "" if none.
func (r *run) foreignMarker(snap Snapshot, data []byte) string {
	if len(data) == 0 {
		return ""
	}
	for _, o := range universe {
		if r.granted(o.bucket, o.key) {
			continue
		}
		for _, s := range []string{"MARK{" + o.bucket + "/" + o.key + "}", "<Key>" + o.key + "</Key>", "<Prefix>" + firstSegment(o.key)} {
			if bytes.Contains(data, []byte(s)) {
				return s
			}
		}
	}
	return ""
}

func firstSegment(key string) string {
	s, _, _ := strings.Cut(key, "/")
	return s + "/"
}

// The generator.

// ops are the operations generated, with their weights.
var ops = []struct {
	name   string
	weight int
}{
	{"put", 14}, {"copy", 10}, {"tag", 8}, {"untag", 5}, {"delete", 8}, {"complete", 5}, {"abort", 3},
	{"formobject", 3}, {"rename", 3}, {"extract", 3}, {"staging", 3},
	{"deleteobjects", 8}, {"postobject", 5}, {"buckettag", 4}, {"get", 6}, {"list", 5}, {"canonical", 12},
}

func (r *run) pickOp() string {
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	n := r.rng.IntN(total)
	for _, o := range ops {
		if n < o.weight {
			return o.name
		}
		n -= o.weight
	}
	return "put"
}

func (r *run) chance(p float64) bool { return r.rng.Float64() < p }

// generate returns the next request and what it aims at.
func (r *run) generate(ctx context.Context, fences map[string]uint64) (Spec, intent) {
	op := r.pickOp()
	target := universe[r.rng.IntN(len(universe))]
	if r.cfg.Grants != nil && r.chance(0.6) {
		// Gateway mode: mostly inside the grants, where the proxy admits.
		for !r.granted(target.bucket, target.key) {
			target = universe[r.rng.IntN(len(universe))]
		}
	}
	in := intent{op: op, bucket: target.bucket, key: target.key}
	m := &mutations{}
	if op != "canonical" {
		m = r.mutations()
	}
	// The token: the holder's (above every token so far), a stale one, the
	// current maximum itself, or none.
	cur := fences[resourceOf(target.bucket, target.key)]
	switch n := r.rng.IntN(20); {
	case op == "canonical" || n < 7:
		r.token += uint64(1 + r.rng.IntN(3))
		in.tok = r.token
	case n < 15 && cur > 1:
		in.tok = cur - uint64(1+r.rng.IntN(int(min(cur-1, 5))))
	case n < 17 && cur > 0:
		in.tok = cur
	default:
		in.tok = 0
	}
	if in.tok > 0 {
		in.token = strconv.FormatUint(in.tok, 10)
	}
	if op == "canonical" {
		op = "put"
	}
	s := Spec{Method: "PUT"}
	var query []string
	objectPath := func() {
		s.Host, s.Path = r.spellPath(m, target.bucket, target.key)
	}
	bucketPath := func() {
		s.Host, s.Path = r.spellPath(m, target.bucket, "")
	}
	switch op {
	case "put":
		objectPath()
		s.Body = []byte(r.marker(target.bucket, target.key))
		if m.big {
			s.Body = append(s.Body, bytes.Repeat([]byte{'.'}, 2000)...)
		}
	case "copy":
		objectPath()
		src := universe[r.rng.IntN(len(universe))]
		s.Header = append(s.Header, [2]string{"X-Amz-Copy-Source", r.spellSource(m, src.bucket, src.key)})
		switch r.rng.IntN(3) {
		case 0:
			s.Header = append(s.Header, [2]string{"X-Amz-Metadata-Directive", "REPLACE"})
		case 1:
			s.Header = append(s.Header, [2]string{"X-Amz-Metadata-Directive", "COPY"})
		}
	case "tag":
		objectPath()
		query = append(query, m.param("tagging", ""))
		s.Body = []byte(`<Tagging><TagSet><Tag><Key>w</Key><Value>` + strconv.Itoa(r.n) + `</Value></Tag></TagSet></Tagging>`)
		r.n++
	case "untag":
		s.Method = "DELETE"
		objectPath()
		query = append(query, m.param("tagging", ""))
	case "delete":
		s.Method = "DELETE"
		objectPath()
	case "complete", "abort":
		id, etag := r.upload(ctx, target.bucket, target.key, op == "complete")
		objectPath()
		query = append(query, m.param("uploadId", id))
		if op == "complete" {
			s.Method = "POST"
			s.Body = []byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>` + etag + `</ETag></Part></CompleteMultipartUpload>`)
		} else {
			s.Method = "DELETE"
		}
	case "deleteobjects":
		s.Method = "POST"
		bucketPath()
		query = append(query, m.param("delete", ""))
		var b strings.Builder
		b.WriteString("<Delete>")
		for range 1 + r.rng.IntN(2) {
			k := target.key
			if r.chance(0.5) {
				k = universe[r.rng.IntN(len(universe))].key
			}
			fmt.Fprintf(&b, "<Object><Key>%s</Key></Object>", xmlEscape(r.spellKeyText(m, k)))
		}
		b.WriteString("</Delete>")
		s.Body = []byte(b.String())
		sum := md5.Sum(s.Body)
		s.Header = append(s.Header, [2]string{"Content-Md5", base64.StdEncoding.EncodeToString(sum[:])})
	case "postobject":
		s.Method = "POST"
		bucketPath()
		const boundary = "fenceproxydiff"
		var b strings.Builder
		for _, f := range [][2]string{{"key", r.spellKeyText(m, target.key)}, {"Content-Type", "text/plain"}} {
			fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=%q\r\n\r\n%s\r\n", boundary, f[0], f[1])
		}
		fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\nContent-Type: text/plain\r\n\r\n%s\r\n--%s--\r\n",
			boundary, r.marker(target.bucket, target.key), boundary)
		s.Body = []byte(b.String())
		ct := "multipart/form-data; boundary=" + boundary
		switch r.rng.IntN(4) {
		case 0: // Go reads the first, a store the last
			s.Header = append(s.Header, [2]string{"Content-Type", "text/plain"}, [2]string{"Content-Type", ct})
			m.labels = append(m.labels, "content-type twice")
		case 1:
			s.Header = append(s.Header, [2]string{"Content_Type", ct})
			m.labels = append(m.labels, "content_type")
		default:
			s.Header = append(s.Header, [2]string{"Content-Type", ct})
		}
	case "formobject":
		// A form POSTed to an object's path, naming the target in its key
		// field (SeaweedFS routes it by its Content-Type).
		s.Method = "POST"
		other := universe[r.rng.IntN(len(universe))]
		s.Host, s.Path = r.spellPath(m, target.bucket, other.key)
		const boundary = "fenceproxydiff"
		s.Body = []byte(fmt.Sprintf("--%s\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\n%s\r\n--%s\r\n"+
			"Content-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n%s\r\n--%s--\r\n",
			boundary, target.key, boundary, r.marker(target.bucket, target.key), boundary))
		s.Header = append(s.Header, [2]string{"Content-Type", "multipart/form-data; boundary=" + boundary})
	case "rename":
		// RenameObject of the target to a new key, the source a bare key of
		// the bucket or {bucket}/{key}.
		s.Host, s.Path = r.spellPath(m, target.bucket, "renamed/"+strconv.Itoa(r.n))
		r.n++
		query = append(query, m.param("renameObject", ""))
		src := []string{target.key, target.bucket + "/" + target.key, "/" + target.bucket + "/" + target.key}[r.rng.IntN(3)]
		s.Header = append(s.Header, [2]string{"X-Amz-Rename-Source", src})
	case "extract":
		// An archive the store extracts beside its key, one member the
		// target's last segment.
		dir, base := "", target.key
		if i := strings.LastIndexByte(target.key, '/'); i >= 0 {
			dir, base = target.key[:i+1], target.key[i+1:]
		}
		s.Host, s.Path = r.spellPath(m, target.bucket, dir+"archive.zip")
		var zb bytes.Buffer
		zw := zip.NewWriter(&zb)
		f, _ := zw.Create(base)
		_, _ = f.Write([]byte(r.marker(target.bucket, target.key)))
		_ = zw.Close()
		s.Body = zb.Bytes()
		switch r.rng.IntN(3) {
		case 0:
			query = append(query, "extract=zip")
		case 1:
			s.Header = append(s.Header, [2]string{"X-Seaweedfs-Extract", "zip"})
		default:
			s.Header = append(s.Header, [2]string{"X-Amz-Meta-Snowball-Auto-Extract", "true"})
		}
	case "staging":
		// A write to where the store keeps the target's multipart upload.
		if r.cfg.Staging == nil { // a read of the target instead
			s.Method = "GET"
			s.Host, s.Path = r.spellPath(m, target.bucket, target.key)
			in.read = true
			break
		}
		id, _ := r.upload(ctx, target.bucket, target.key, true)
		staged := r.cfg.Staging(target.bucket, target.key, id)
		s.Host, s.Path = r.spellPath(&mutations{}, target.bucket, staged)
		switch r.rng.IntN(3) {
		case 0:
			s.Method = "DELETE"
		case 1: // metadata only: a store refuses data for a directory's key
			s.Header = append(s.Header, [2]string{"X-Amz-Meta-Owner", "stale"})
		default:
			s.Body = []byte(r.marker(target.bucket, target.key))
			s.Header = append(s.Header, [2]string{"X-Amz-Meta-Owner", "stale"})
		}
	case "buckettag":
		bucketPath()
		query = append(query, m.param("tagging", ""))
		s.Body = []byte(`<Tagging><TagSet><Tag><Key>b</Key><Value>` + strconv.Itoa(r.n) + `</Value></Tag></TagSet></Tagging>`)
		r.n++
	case "get":
		s.Method = "GET"
		objectPath()
		in.read = true
	case "list":
		s.Method = "GET"
		bucketPath()
		query = append(query, "list-type=2", "prefix="+url.QueryEscape(r.spellPrefix(m, target.key)))
		in.read = true
	}
	query = append(query, m.extraQuery...)
	if in.token != "" {
		s.Header = append(s.Header, [2]string{"X-Fencing-Token", in.token})
	}
	s.Header = append(s.Header, m.headers...)
	if len(query) > 0 {
		s.Query = strings.Join(query, m.sep)
	}
	if m.fragment {
		s.Query += "#x"
	}
	in.spelling = strings.Join(m.labels, ",")
	switch op {
	case "put", "copy", "tag", "untag", "delete", "complete":
		in.literal = literalKey(s, target.bucket)
	}
	return s, in
}

// upload creates a multipart upload of bucket/key on the store directly,
// with one part when complete is set, and returns its ID and the part's
// ETag.
func (r *run) upload(ctx context.Context, bucket, key string, complete bool) (string, string) {
	out, err := r.cfg.Direct.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		r.t.Fatalf("creating an upload of %s/%s on the store: %v", bucket, key, err)
	}
	if !complete {
		return aws.ToString(out.UploadId), ""
	}
	part, err := r.cfg.Direct.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key),
		UploadId: out.UploadId, PartNumber: aws.Int32(1), Body: strings.NewReader(r.marker(bucket, key))})
	if err != nil {
		r.t.Fatalf("uploading a part of %s/%s on the store: %v", bucket, key, err)
	}
	return aws.ToString(out.UploadId), aws.ToString(part.ETag)
}

// mutations are the spelling changes of one request.
type mutations struct {
	labels     []string
	bucketPct  bool // an encoded byte in the bucket
	bucketSep  bool // %2F between the bucket and the key
	encSlash   bool // a key's "/" as %2F
	backslash  bool // a key's "/" as %5C (SeaweedFS splits keys on it)
	big        bool // a body over 1 KiB (SeaweedFS keeps smaller markers' data inline)
	double     bool // a run of "/" inside the key
	leading    bool // the key starts with "/"
	trailing   string
	dot        bool // a dot segment
	encode     bool // unreserved bytes percent-encoded
	vhost      bool
	hostForm   string
	paramCase  bool // a sub-resource in another case
	sep        string
	fragment   bool
	extraQuery []string
	headers    [][2]string
	srcForm    int
}

func (r *run) mutations() *mutations {
	m := &mutations{sep: "&"}
	add := func(p float64, label string) bool {
		if r.chance(p) {
			m.labels = append(m.labels, label)
			return true
		}
		return false
	}
	m.bucketPct = add(0.03, "bucket %XX")
	m.bucketSep = add(0.07, "bucket%2Fkey")
	m.encSlash = add(0.10, "key %2F")
	m.backslash = add(0.06, "key %5C")
	m.big = add(0.3, "body over 1 KiB")
	m.double = add(0.08, "key //")
	m.leading = add(0.05, "leading /")
	if add(0.10, "trailing /") {
		m.trailing = "/"
	} else if add(0.04, "trailing %2F") {
		m.trailing = "%2F"
	}
	m.dot = add(0.03, "dot segment")
	m.encode = add(0.15, "%XX")
	m.vhost = r.cfg.Domain != "" && add(0.15, "virtual-hosted")
	switch {
	case add(0.04, "host upper case"):
		m.hostForm = "upper"
	case add(0.03, "host trailing dot"):
		m.hostForm = "dot"
	}
	m.paramCase = add(0.08, "sub-resource case")
	if add(0.02, "query ;") {
		m.sep = ";"
	}
	m.fragment = add(0.02, "query #")
	if add(0.08, "unknown parameter") {
		m.extraQuery = append(m.extraQuery, "foo=1")
	}
	if add(0.04, "x-id") {
		m.extraQuery = append(m.extraQuery, "x-id=PutObject")
	}
	if add(0.03, "method override") {
		m.headers = append(m.headers, [2]string{[]string{"X-Http-Method-Override", "X-Method-Override", "X-Http-Method"}[r.rng.IntN(3)],
			[]string{"DELETE", "PUT", "POST"}[r.rng.IntN(3)]})
	}
	if add(0.02, "x-forwarded-host") {
		m.headers = append(m.headers, [2]string{"X-Forwarded-Host", "other." + r.cfg.Domain})
	}
	if add(0.03, "copy-source twice") {
		m.headers = append(m.headers, [2]string{"X-Amz-Copy-Source", "bkt/private/p.txt"})
	}
	if add(0.03, "x_amz_copy_source") {
		m.headers = append(m.headers, [2]string{"X_Amz_Copy_Source", "bkt/private/p.txt"})
	}
	if add(0.02, "x-amz-meta-fencing-token") {
		m.headers = append(m.headers, [2]string{"X-Amz-Meta-Fencing-Token", "999"})
	}
	m.srcForm = r.rng.IntN(10)
	return m
}

// param spells a sub-resource parameter.
func (m *mutations) param(name, value string) string {
	if m.paramCase {
		name = strings.ToUpper(name[:1]) + name[1:]
	}
	if value == "" {
		return name
	}
	return name + "=" + url.QueryEscape(value)
}

// spellPath returns the Host and the raw path of bucket/key (key "" for
// the bucket itself) under m.
func (r *run) spellPath(m *mutations, bucket, key string) (string, string) {
	_, port, _ := strings.Cut(r.cfg.Proxy, ":")
	domain := r.cfg.Domain
	if domain == "" {
		domain = "127.0.0.1"
	}
	host := domain
	switch m.hostForm {
	case "upper":
		host = strings.ToUpper(host)
	case "dot":
		host += "."
	}
	keyPath := r.spellKeyPath(m, key)
	if m.vhost {
		return bucket + "." + host + ":" + port, "/" + keyPath
	}
	b := bucket
	if m.bucketPct {
		i := r.rng.IntN(len(b))
		b = b[:i] + fmt.Sprintf("%%%02X", b[i]) + b[i+1:]
	}
	if key == "" {
		if m.trailing != "" {
			return host + ":" + port, "/" + b + m.trailing
		}
		return host + ":" + port, "/" + b
	}
	sep := "/"
	if m.bucketSep {
		sep = "%2F"
	}
	return host + ":" + port, "/" + b + sep + keyPath
}

// spellKeyPath spells a key for a path under m.
func (r *run) spellKeyPath(m *mutations, key string) string {
	if key == "" {
		return ""
	}
	segs := strings.Split(key, "/")
	for i, s := range segs {
		s = url.PathEscape(s)
		if m.encode {
			s = r.encodeSome(s)
		}
		segs[i] = s
	}
	if m.dot {
		i := r.rng.IntN(len(segs))
		ins := []string{".", "zz/.."}[r.rng.IntN(2)]
		segs = slices.Insert(segs, i, ins)
	}
	sep := "/"
	if m.encSlash {
		sep = []string{"%2F", "%2f"}[r.rng.IntN(2)]
	}
	if m.backslash {
		sep = "%5C"
	}
	if m.double {
		sep += sep
	}
	p := strings.Join(segs, sep)
	if m.leading {
		p = "/" + p
	}
	trailing := m.trailing
	if trailing != "" && m.backslash {
		trailing = "%5C"
	}
	return p + trailing
}

// spellKeyText spells a key as a form field or DeleteObjects key (text,
// not a path) under m.
func (r *run) spellKeyText(m *mutations, key string) string {
	if m.double {
		key = strings.Replace(key, "/", "//", 1)
	}
	if m.backslash {
		key = strings.ReplaceAll(key, "/", "\\")
	}
	if m.leading {
		key = "/" + key
	}
	if m.trailing != "" {
		key += "/"
	}
	if m.dot {
		key = "zz/../" + key
	}
	return key
}

// spellPrefix spells a listing prefix under m.
func (r *run) spellPrefix(m *mutations, key string) string {
	p := firstSegment(key)
	switch {
	case m.dot:
		return "jobs/../" + p
	case m.double:
		return p + "/"
	case m.trailing != "":
		return strings.TrimSuffix(p, "/")
	}
	return p
}

// spellSource spells an x-amz-copy-source under m.srcForm.
func (r *run) spellSource(m *mutations, bucket, key string) string {
	esc := url.PathEscape(bucket) + "/" + strings.ReplaceAll(url.PathEscape(key), "%2F", "/")
	var s string
	switch m.srcForm {
	case 0:
		s = "/" + esc
	case 1:
		s = bucket + "%2F" + url.PathEscape(key)
	case 2:
		s = "bkt/jobs/?/../../" + key // a raw "?": cut at it by one store, decoded past by another
	case 3:
		s = "bkt/jobs/../" + key
	case 4:
		s = esc + "?versionId=null"
	case 5:
		s = strings.ReplaceAll(esc, "/", "//")
	case 6:
		s = esc + "/"
	case 7:
		s = "bkt/jobs/%3F/../../" + key
	default:
		s = esc
	}
	m.labels = append(m.labels, "source form "+strconv.Itoa(m.srcForm))
	return s
}

// encodeSome percent-encodes some unreserved bytes of a path segment, in
// either case of hex digits.
func (r *run) encodeSome(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' && r.chance(0.3) {
			h := fmt.Sprintf("%%%02X", c)
			if r.chance(0.5) {
				h = strings.ToLower(h)
			}
			b.WriteString(h)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
