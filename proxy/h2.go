package proxy

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/fenceproxy/fenceproxy/fence"
	"github.com/fenceproxy/fenceproxy/wire"
)

// errPriorKnowledge: the HTTP/2 connection preface on a listener that speaks
// HTTP/1.1 only (400 bad_resource: the target * names no resource).
var errPriorKnowledge = fmt.Errorf("%w: HTTP/2 with prior knowledge (the PRI * HTTP/2.0 preface) is not served on this listener; "+
	"use HTTP/1.1, or HTTP/2 over TLS (FENCEPROXY_TLS_CERT_FILE), where it is negotiated by ALPN", fence.ErrBadResource)

// priorKnowledge answers the HTTP/2 connection preface, which net/http hands
// to the handler of a listener without h2c: 400 bad_resource as for any
// other target "*" but OPTIONS, with Connection: close (what follows are
// HTTP/2 frames, not requests), logged as what it is rather than as a
// refused write.
func (p *Proxy) priorKnowledge(ex *exchange) {
	pb, a := p.problemFor(errPriorKnowledge)
	pb.Detail = strings.TrimPrefix(pb.Detail, fence.ErrBadResource.Error()+": ")
	h := ex.w.Header()
	h.Set(wire.HeaderRefused, pb.Reason)
	h.Set("Connection", "close")
	p.opts.Metrics.decision(pb.Reason)
	ex.decision = decidedRefused
	p.log.LogAttrs(ex.r.Context(), a.Level, "HTTP/2 prior knowledge on a listener without h2c; answered in HTTP/1.1 and closed",
		slog.String("reason", pb.Reason), slog.Int("status", pb.Status), slog.String("remote", ex.r.RemoteAddr))
	p.writeProblem(ex.w, ex.r, pb)
}
