package proxy

import (
	"errors"
	"log/slog"
	"strconv"

	"github.com/fenceproxy/fenceproxy/fence"
)

// observeWrite serves a fenced write in observe mode: it applies the
// admission rule without the barrier (raising maxima as usual), logs and
// counts what enforce mode would refuse, and forwards everything. err is
// what resolve and authenticate found.
func (p *Proxy) observeWrite(ex *exchange, err error) {
	if err == nil && ex.prefix != "" {
		err = p.barrier.Check(ex.prefix, ex.token)
	}
	if err == nil {
		for _, res := range ex.resources {
			if ex.collections {
				err = p.barrier.CheckCollections(res, ex.token)
			} else {
				err = p.barrier.Check(res, ex.token)
			}
			if err != nil {
				break
			}
		}
	}
	ex.decision = decidedObserve
	if err != nil {
		pb, _ := p.problemFor(err)
		p.opts.Metrics.decision("observe_" + pb.Reason)
		ex.reason = pb.Reason
		resource, current := pb.Resource, ""
		if resource == "" {
			resource = ex.resource()
		}
		var stale *fence.StaleError
		if errors.As(err, &stale) {
			current = strconv.FormatUint(stale.Current, 10)
		}
		p.log.LogAttrs(ex.r.Context(), slog.LevelWarn, "observe mode: would refuse this write; forwarded",
			slog.String("reason", pb.Reason), slog.String("resource", resource), slog.String("token", ex.tokenText),
			slog.String("current_token", current), slog.String("method", ex.r.Method),
			slog.String("target", logTarget(ex.r)), slog.String("error", err.Error()))
	} else {
		p.opts.Metrics.decision("forwarded")
	}
	defer p.opts.Metrics.forwarding(true)()
	p.forward(ex)
}
