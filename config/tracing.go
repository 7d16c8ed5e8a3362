package config

import (
	"fmt"
	"net/url"
	"strings"
)

// OTLP is where tracing (FENCEPROXY_TRACING) sends its spans, as the
// standard OpenTelemetry variables say. The SDK reads those variables
// itself (the exporter its OTEL_EXPORTER_OTLP_*, the resource
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, the tracer provider
// OTEL_TRACES_SAMPLER); this is what fenceproxy checks of them at start and
// shows in its start-up line and in `fenceproxy check`.
type OTLP struct {
	// Protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
	// OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" (the default) or "grpc".
	Protocol string
	// Endpoint is OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as it is), else
	// OTEL_EXPORTER_OTLP_ENDPOINT (the SDK appends /v1/traces over HTTP),
	// else the SDK's default for the protocol.
	Endpoint string
}

// OTLP protocols fenceproxy exports by.
const (
	OTLPHTTP = "http/protobuf"
	OTLPGRPC = "grpc"
)

// TracingExport reads the OTEL_* variables of environ that decide where
// spans go (one set but empty counts as unset, as the SDK reads it), and returns every error in them, each starting with its
// variable's name: OTEL_TRACES_EXPORTER other than otlp (fenceproxy exports
// by OTLP only; turn tracing off with FENCEPROXY_TRACING), a protocol other
// than http/protobuf or grpc, an endpoint that is not an http or https URL.
func TracingExport(environ map[string]string) (OTLP, []error) {
	var errs []error
	if v := environ["OTEL_TRACES_EXPORTER"]; v != "" && strings.TrimSpace(v) != "otlp" {
		errs = append(errs, fmt.Errorf("OTEL_TRACES_EXPORTER: %q: with %sTRACING=true spans are exported by OTLP only; unset it or set otlp (to export none, set %sTRACING=false)", v, Prefix, Prefix))
	}
	o := OTLP{Protocol: OTLPHTTP}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := environ[name]; v != "" {
			switch v = strings.TrimSpace(v); v {
			case OTLPHTTP, OTLPGRPC:
				o.Protocol = v
			default:
				errs = append(errs, fmt.Errorf("%s: %q is neither http/protobuf nor grpc (the protocols fenceproxy exports spans by)", name, v))
			}
			break
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := environ[name]; v != "" {
			u, err := url.Parse(strings.TrimSpace(v))
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, fmt.Errorf("%s: %q is not an http:// or https:// URL of the collector (e.g. http://otel-collector:4318)", name, v))
			} else {
				o.Endpoint = u.Redacted()
			}
			break
		}
	}
	if o.Endpoint == "" {
		o.Endpoint = "http://localhost:4318"
		if o.Protocol == OTLPGRPC {
			o.Endpoint = "http://localhost:4317"
		}
	}
	return o, errs
}
