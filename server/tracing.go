package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/internal/buildinfo"
)

// tracingShutdownTimeout bounds the flush of the spans still queued when
// the server stops: a collector that is down never holds the stop longer.
const tracingShutdownTimeout = 5 * time.Second

// tracerName names the proxy's spans' instrumentation scope.
const tracerName = "github.com/fenceproxy/fenceproxy/proxy"

// startTracing builds, with FENCEPROXY_TRACING, the tracer provider of the
// proxy's spans: an OTLP exporter (otlptracehttp, or otlptracegrpc when
// the protocol variables say grpc), both configured by the SDK from the
// standard OTEL_EXPORTER_OTLP_* variables, behind the SDK's batch span
// processor (a queue that drops spans when full, so that requests never
// wait for a collector); the resource from OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES over service.name fenceproxy and the build's
// version; the sampler from OTEL_TRACES_SAMPLER (by default every trace a
// client did not decide against). Close flushes it (stopTracing).
func (st *starting) startTracing() error {
	if !st.cfg.Tracing {
		return nil
	}
	exp, errs := config.TracingExport(environ())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	ctx := context.Background()
	var exporter sdktrace.SpanExporter
	var err error
	if exp.Protocol == config.OTLPGRPC {
		exporter, err = otlptracegrpc.New(ctx) // connects lazily: no collector is needed to start
	} else {
		exporter, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return fmt.Errorf("FENCEPROXY_TRACING: the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "fenceproxy"), attribute.String("service.version", buildinfo.Read().Version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: over the above
		resource.WithTelemetrySDK())
	if err != nil {
		// A malformed OTEL_RESOURCE_ATTRIBUTES: the rest of the resource stands.
		st.log.Warn("tracing: the resource is partial", "error", err.Error())
	}
	st.tracing = sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(&exportLog{SpanExporter: exporter, log: st.log, endpoint: exp.Endpoint}),
		sdktrace.WithResource(res))
	st.undo = append(st.undo, func() { st.stopTracing() })
	st.tracingExport = exp
	return nil
}

// environ is the process's environment, which the OpenTelemetry SDK reads.
func environ() map[string]string {
	m := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "OTEL_") {
			m[k] = v
		}
	}
	return m
}

// stopTracing flushes the spans still queued and stops the exporter,
// waiting at most tracingShutdownTimeout.
func (s *Server) stopTracing() {
	if s.tracing == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
	defer cancel()
	if err := s.tracing.Shutdown(ctx); err != nil {
		s.log.Warn("tracing: the last spans were not all exported", "error", err.Error())
	}
}

// exportLog logs the exporter's failures, a warning when exports start
// failing (and at most one a minute while they go on) and a line when they
// work again, instead of the SDK's global error handler; the spans of a
// failed export are dropped.
type exportLog struct {
	sdktrace.SpanExporter
	log      *slog.Logger
	endpoint string
	failing  atomic.Bool
	warned   atomic.Int64 // unix nanoseconds of the last warning
}

func (e *exportLog) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		if e.failing.Swap(false) {
			e.log.Info("tracing: exporting spans works again", "endpoint", e.endpoint)
		}
		return nil
	}
	now := time.Now().UnixNano()
	if last := e.warned.Load(); (!e.failing.Swap(true) || now-last >= int64(time.Minute)) && e.warned.CompareAndSwap(last, now) {
		e.log.Warn("tracing: exporting spans failed; they are dropped (requests are not affected)",
			"endpoint", e.endpoint, "spans", len(spans), "error", err.Error())
	}
	return nil
}
