package policies

import (
	"testing"
)

func TestTracingConfig(t *testing.T) {
	route := "routes:\n  - {name: r, upstream: \"http://127.0.0.1:9000\"}\n"
	off := mustParse(t, route)
	if tc := off.Config.Tracing; tc.Enabled || tc.SampleRatio != nil || tc.Endpoint != "" || tc.ServiceName != "" {
		t.Errorf("tracing without the section: got %+v, want off and unset", tc)
	}
	on := mustParse(t, "tracing: {enabled: true, endpoint: \"http://collector:4318\", sample_ratio: 0, service_name: edge}\n"+route)
	tc := on.Config.Tracing
	if !tc.Enabled || tc.Endpoint != "http://collector:4318" || tc.SampleRatio == nil || *tc.SampleRatio != 0 || tc.ServiceName != "edge" {
		t.Errorf("tracing: got %+v (ratio %v), want it as written, ratio 0 kept apart from unset", tc, tc.SampleRatio)
	}
	env := mustParse(t, route, "GATEWAY_TRACING_ENABLED=true", "GATEWAY_TRACING_SAMPLE_RATIO=0.5")
	if tc := env.Config.Tracing; !tc.Enabled || tc.SampleRatio == nil || *tc.SampleRatio != 0.5 {
		t.Errorf("tracing from GATEWAY_ variables: got %+v, want enabled at 0.5", tc)
	}
}

func TestTracingValidationErrors(t *testing.T) {
	route := "routes:\n  - {name: r, upstream: \"http://127.0.0.1:9000\"}\n"
	tests := []struct{ name, yaml, want string }{
		{"ratio above 1", "tracing: {enabled: true, sample_ratio: 1.5}\n", "gateway.yaml: tracing.sample_ratio: must be in [0, 1], got 1.5"},
		{"negative ratio", "tracing: {sample_ratio: -0.1}\n", "gateway.yaml: tracing.sample_ratio: must be in [0, 1], got -0.1"},
		{"ratio not a number", "tracing: {sample_ratio: often}\n", `gateway.yaml: tracing.sample_ratio: must be a number, not the string "often"`},
		{"endpoint without scheme", "tracing: {endpoint: \"collector:4318\"}\n",
			`gateway.yaml: tracing.endpoint: must be http(s)://host:port of an OTLP/HTTP collector, got "collector:4318"`},
		{"grpc endpoint", "tracing: {endpoint: \"grpc://collector:4317\"}\n",
			`gateway.yaml: tracing.endpoint: must be http(s)://host:port of an OTLP/HTTP collector, got "grpc://collector:4317"`},
		{"credentials in endpoint", "tracing: {endpoint: \"https://user:pw@collector\"}\n",
			"gateway.yaml: tracing.endpoint: must not carry credentials: put them in OTEL_EXPORTER_OTLP_HEADERS"},
		{"query in endpoint", "tracing: {endpoint: \"http://collector:4318/?x=1\"}\n",
			`gateway.yaml: tracing.endpoint: must not have a query or fragment, got "http://collector:4318/?x=1"`},
		{"service name with newline", "tracing: {service_name: \"a\\nb\"}\n",
			`gateway.yaml: tracing.service_name: must not have surrounding spaces or control characters, got "a\nb"`},
		{"unknown key", "tracing: {enabled: true, exporter: jaeger}\n", "gateway.yaml: tracing.exporter: unknown key (known: enabled, endpoint, sample_ratio, service_name)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantLine(t, errorLines(t, tt.yaml+route), tt.want)
		})
	}
}
