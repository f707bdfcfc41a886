package policies

import (
	"math"
	"net/url"
	"strings"
)

// TracingConfig is the tracing section: OpenTelemetry traces exported over
// OTLP/HTTP. It takes effect at start only. A key left out falls back to the
// standard OTEL_* variable that covers it, then to the default; a key set
// here wins over the variable.
type TracingConfig struct {
	// Enabled turns tracing on (default false: no tracer, no span, nothing
	// on the request path).
	Enabled bool `koanf:"enabled"`
	// Endpoint is the OTLP/HTTP collector's base URL, as
	// OTEL_EXPORTER_OTLP_ENDPOINT: http(s)://host:port, to which
	// /v1/traces is added when it has no path. "" means the OTEL_*
	// variables, then http://localhost:4318.
	Endpoint string `koanf:"endpoint" redact:"url"`
	// SampleRatio is the share of new traces recorded, in [0, 1]. A trace
	// continued from a trusted peer follows the peer's decision. Nil means
	// OTEL_TRACES_SAMPLER_ARG (with a ratio sampler), then 0.01 (the
	// tracing package's default).
	SampleRatio *float64 `koanf:"sample_ratio"`
	// ServiceName is the service.name resource attribute; "" means
	// OTEL_SERVICE_NAME, then "gateway".
	ServiceName string `koanf:"service_name"`
}

// validateTracing checks the tracing section; it is checked whether or not
// tracing is enabled, so that turning it on later cannot surprise.
func validateTracing(p *problems, t *TracingConfig) {
	if r := t.SampleRatio; r != nil && (math.IsNaN(*r) || *r < 0 || *r > 1) {
		p.addf("tracing.sample_ratio", "must be in [0, 1], got %v", *r)
	}
	if e := t.Endpoint; e != "" {
		u, err := url.Parse(e)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			p.addf("tracing.endpoint", "must be http(s)://host:port of an OTLP/HTTP collector, got %q", e)
		case u.User != nil:
			p.add("tracing.endpoint", "must not carry credentials: put them in OTEL_EXPORTER_OTLP_HEADERS")
		case u.RawQuery != "" || u.Fragment != "":
			p.addf("tracing.endpoint", "must not have a query or fragment, got %q", e)
		}
	}
	if n := t.ServiceName; n != strings.TrimSpace(n) || strings.ContainsFunc(n, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		p.addf("tracing.service_name", "must not have surrounding spaces or control characters, got %q", n)
	}
}
