package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/fenceproxy/fenceproxy/s3"
)

// MultipartRecords is the durable store of S3 multipart upload records: which
// fencing token created each upload (every store under store/ is one). Records are
// keyed by the upload's resource and ID; see store/storetest for the
// semantics.
type MultipartRecords interface {
	// PutUpload records, durably, that token created resource's upload
	// uploadID, until expires.
	PutUpload(resource, uploadID string, token uint64, expires time.Time) error
	// Upload returns the token that created the upload, found=false without
	// a record or after its expiry.
	Upload(resource, uploadID string) (token uint64, found bool, err error)
	// DeleteUpload removes the record; none is no error.
	DeleteUpload(resource, uploadID string) error
}

// creatorAbort reports whether an AbortMultipartUpload that the fence would
// refuse (its token is below the resource's maximum: a takeover happened)
// carries a token at or above the one that created the upload, by the
// upload's record. Such an abort applies no data and cannot undo a later
// holder's write, so it is forwarded outside the barrier: a holder that lost
// its resource can still clean up its own upload. An abort the fence admits
// anyway, one below its creator's token, one with a body and one without a
// record go through the barrier as any write.
func (p *Proxy) creatorAbort(ex *exchange) bool {
	if p.opts.MultipartRecords == nil || hasBody(ex.r) {
		return false
	}
	resource := ex.resource()
	creator, found, err := p.opts.MultipartRecords.Upload(resource, ex.s3.UploadID)
	if err != nil {
		p.log.LogAttrs(ex.client, slog.LevelWarn, "reading a multipart upload's record failed; the abort is fenced as any write",
			slog.String("resource", resource), slog.String("upload_id", ex.s3.UploadID), slog.String("error", err.Error()))
		return false
	}
	if !found || ex.token < creator {
		return false
	}
	_, current, err := p.barrier.Fence(resource) // a prefix fence above counts
	return err == nil && ex.token < current
}

// forwardAbort forwards an abort that creatorAbort let through, and logs it.
func (p *Proxy) forwardAbort(ex *exchange) {
	_, current, _ := p.barrier.Fence(ex.resource())
	p.log.LogAttrs(ex.client, slog.LevelInfo, "multipart upload aborted by a holder that lost its resource; forwarded, as an abort applies no data",
		slog.String("resource", ex.resource()), slog.String("token", ex.tokenText), slog.Uint64("current_token", current),
		slog.String("upload_id", ex.s3.UploadID), slog.String("target", logTarget(ex.r)))
	p.opts.Metrics.decision("upload_abort")
	ex.decision = decidedUploadAbort
	defer p.opts.Metrics.forwarding(true)()
	p.forward(ex)
}

// recordMultipart keeps the upload records in step with the backend's answers:
// a CreateMultipartUpload's 200 records its token under the ID in the
// answer's body (read here, before the client gets the answer, and passed on
// byte for byte); a CompleteMultipartUpload's success (a 200 whose body is a
// CompleteMultipartUploadResult, not an Error) and an abort's 204 remove
// the record (not a 404: with RESOURCE_DEPTH an abort sent to another key
// of the resource finds no upload, and must not wipe the record). A record that cannot be written leaves the upload to
// current tokens only; it is logged and counted, and the answer goes through.
func (p *Proxy) recordMultipart(ex *exchange, res *http.Response) {
	if p.opts.MultipartRecords == nil {
		return
	}
	resource := ex.resource()
	attrs := func(more ...slog.Attr) []slog.Attr {
		return append([]slog.Attr{slog.String("resource", resource), slog.String("token", ex.tokenText),
			slog.String("target", logTarget(ex.r))}, more...)
	}
	switch {
	case ex.s3.Multipart == s3.CreateUpload && res.StatusCode == http.StatusOK:
		id, read, err := s3.InitiatedUpload(res.Body)
		res.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(read), res.Body), res.Body}
		if err == nil {
			err = p.opts.MultipartRecords.PutUpload(resource, id, ex.token, time.Now().Add(p.opts.S3UploadRecordTTL))
		}
		if err != nil {
			p.opts.Metrics.multipartRecord("failed")
			p.log.LogAttrs(ex.client, slog.LevelError, "could not record which token created a multipart upload; "+
				"only a current token can abort it", attrs(slog.String("upload_id", id), slog.String("error", err.Error()))...)
			return
		}
		p.opts.Metrics.multipartRecord("recorded")
	case ex.s3.Multipart == s3.AbortUpload && res.StatusCode == http.StatusNoContent:
		p.forgetMultipart(ex)
	case ex.s3.Multipart == s3.CompleteUpload && res.StatusCode == http.StatusOK:
		res.Body = &completeWatch{ReadCloser: res.Body, done: func() { p.forgetMultipart(ex) }}
	}
}

// forgetMultipart removes an ended upload's record.
func (p *Proxy) forgetMultipart(ex *exchange) {
	if err := p.opts.MultipartRecords.DeleteUpload(ex.resource(), ex.s3.UploadID); err != nil {
		p.opts.Metrics.multipartRecord("failed")
		p.log.LogAttrs(ex.client, slog.LevelWarn, "could not remove an ended multipart upload's record; it expires at its age limit",
			slog.String("resource", ex.resource()), slog.String("upload_id", ex.s3.UploadID), slog.String("error", err.Error()))
		return
	}
	p.opts.Metrics.multipartRecord("removed")
}

// completeWatch passes a CompleteMultipartUpload answer through and calls
// done at its end if it was a CompleteMultipartUploadResult: S3 may answer
// 200 and report a failure in the body, sent after whitespace while it
// works. It keeps at most s3.MaxInitiateBody bytes to look at.
type completeWatch struct {
	io.ReadCloser
	seen []byte
	over bool
	done func()
}

func (c *completeWatch) Read(b []byte) (int, error) {
	n, err := c.ReadCloser.Read(b)
	if !c.over {
		if len(c.seen)+n > s3.MaxInitiateBody {
			c.over, c.seen = true, nil
		} else {
			c.seen = append(c.seen, b[:n]...)
		}
	}
	if err == io.EOF && !c.over && c.done != nil {
		if bytes.Contains(c.seen, []byte("<CompleteMultipartUploadResult")) && !bytes.Contains(c.seen, []byte("<Error>")) {
			c.done()
		}
		c.done = nil
	}
	return n, err
}
