package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
)

// observe serves a fenced write in observe mode: it raises maxima as usual,
// logs and counts what enforce mode would refuse, and forwards everything
// without waiting at the barrier. err is the request's parse error, if any.
func (p *Proxy) observe(w http.ResponseWriter, r *http.Request, resources []string, t uint64, token string, err error) {
	if err == nil {
		_, err = p.checkSignature(r, resources, t)
	}
	if err == nil {
		for _, res := range resources {
			if err = p.check(res, t); err != nil {
				break
			}
		}
	}
	if err != nil {
		pb, _ := p.problemFor(err)
		reason := pb.Reason
		p.opts.Metrics.decision("observe_" + reason)
		resource := ""
		if len(resources) > 0 {
			resource = resources[0]
		}
		current := ""
		var stale *StaleError
		if errors.As(err, &stale) {
			resource, current = stale.Resource, strconv.FormatUint(stale.Current, 10)
		}
		p.log.LogAttrs(r.Context(), slog.LevelWarn, "observe mode: would refuse this write; forwarded",
			slog.String("reason", reason), slog.String("resource", resource), slog.String("token", token),
			slog.String("current_token", current), slog.String("method", r.Method),
			slog.String("target", logTarget(r)), slog.String("error", err.Error()))
	} else {
		p.opts.Metrics.decision("forwarded")
	}
	defer p.opts.Metrics.forwarding(true)()
	p.rp.ServeHTTP(w, r)
}

// check applies the admission rule without the barrier: ErrStale below the
// maximum, a durable raise above it.
func (p *Proxy) check(resource string, t uint64) error {
	m, err := p.store.Max(resource)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStore, err)
	}
	switch {
	case t < m:
		return &StaleError{Resource: resource, Token: t, Current: m}
	case t > m && p.opts.MaxTokenJump > 0 && t-m > p.opts.MaxTokenJump:
		return fmt.Errorf("%w: token %d is more than %d above the maximum %d of resource %q", ErrJump, t, p.opts.MaxTokenJump, m, resource)
	case t == 0:
		// Token 0 raises nothing: record the resource, so a later enforce-mode
		// process knows a write may be in flight (start-up grace).
		if sm, ok := p.store.(StartMaxer); ok {
			if err := sm.MarkWritten(resource); err != nil {
				return fmt.Errorf("%w: %w", ErrStore, err)
			}
		}
	case t > m:
		if _, err := p.store.Raise(resource, t); err != nil {
			return fmt.Errorf("%w: %w", ErrStore, err)
		}
	}
	return nil
}
