package tracing

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/otlptest"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func ratio(f float64) *float64 { return &f }

// The sampling ratio: the config's key wins, then OTEL_TRACES_SAMPLER and
// its argument, then the default; what the gateway cannot honour is an
// error naming the variable.
func TestSampleRatio(t *testing.T) {
	tests := []struct {
		name    string
		cfg     *float64
		env     map[string]string
		want    float64
		wantErr string
	}{
		{name: "default", want: DefaultSampleRatio},
		{name: "config", cfg: ratio(0.25), want: 0.25},
		{name: "config wins over env", cfg: ratio(0.5), env: map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, want: 0.5},
		{name: "config zero", cfg: ratio(0), env: map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, want: 0},
		{name: "always_on", env: map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, want: 1},
		{name: "parentbased_always_off", env: map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_always_off"}, want: 0},
		{name: "traceidratio with arg", env: map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"}, want: 0.1},
		{name: "traceidratio without arg", env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio"}, want: 1},
		{name: "bad arg", env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, wantErr: "OTEL_TRACES_SAMPLER_ARG=2"},
		{name: "NaN arg", env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "NaN"}, wantErr: "OTEL_TRACES_SAMPLER_ARG=NaN"},
		{name: "unknown sampler", env: map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, wantErr: "OTEL_TRACES_SAMPLER=jaeger_remote"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sampleRatio(Config{SampleRatio: tt.cfg}, envOf(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, %v; want an error naming %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestTracesURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://collector:4318":             "http://collector:4318/v1/traces",
		"http://collector:4318/":            "http://collector:4318/v1/traces",
		"https://collector/otlp/v1/traces":  "https://collector/otlp/v1/traces",
		"http://127.0.0.1:4318/custom/path": "http://127.0.0.1:4318/custom/path",
	} {
		if got := tracesURL(in); got != want {
			t.Errorf("tracesURL(%q): got %q, want %q", in, got, want)
		}
	}
}

// OTEL_SDK_DISABLED=true turns a configured tracing off; a gRPC protocol,
// which the gateway does not export, is an error naming the variable.
func TestNewRefuses(t *testing.T) {
	cfg := Config{Enabled: true, Endpoint: "http://127.0.0.1:1"}
	if _, err := New(context.Background(), cfg, Options{LookupEnv: envOf(map[string]string{"OTEL_SDK_DISABLED": "true"})}); !errors.Is(err, ErrDisabled) {
		t.Errorf("OTEL_SDK_DISABLED=true: got %v, want ErrDisabled", err)
	}
	_, err := New(context.Background(), cfg, Options{LookupEnv: envOf(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})})
	if err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc") {
		t.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=grpc: got %v, want an error naming it", err)
	}
	// The more specific variable decides.
	tp, err := New(context.Background(), cfg, Options{LookupEnv: envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"})})
	if err != nil {
		t.Errorf("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf beside a grpc default: got %v", err)
	} else {
		tp.Shutdown(context.Background())
	}
}

// Without tracing.endpoint and tracing.service_name the standard variables
// say where spans go and what the service is called; the config's keys,
// when set, win over them.
func TestStandardVariablesHonoured(t *testing.T) {
	rc := otlptest.NewReceiver(t)
	other := otlptest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.URL)
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")

	export := func(cfg Config) {
		t.Helper()
		cfg.Enabled, cfg.SampleRatio = true, ratio(1)
		tp, err := New(context.Background(), cfg, Options{LookupEnv: os.LookupEnv, Version: "v9"})
		if err != nil {
			t.Fatal(err)
		}
		_, span := tp.TracerProvider().Tracer("test").Start(context.Background(), "one")
		span.End()
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	export(Config{})
	spans := rc.Spans()
	if len(spans) != 1 {
		t.Fatalf("OTEL_EXPORTER_OTLP_ENDPOINT's receiver got %d spans, want 1", len(spans))
	}
	res := spans[0].Resource
	if res["service.name"] != "from-env" || res["deployment.environment.name"] != "test" || res["service.version"] != "v9" {
		t.Errorf("resource: got %v, want service.name from-env, deployment.environment.name test, service.version v9", res)
	}

	rc.Reset()
	export(Config{Endpoint: other.URL, ServiceName: "from-config"})
	if n := len(rc.Spans()); n != 0 {
		t.Errorf("the variable's receiver got %d spans, want 0: tracing.endpoint wins", n)
	}
	if spans := other.Spans(); len(spans) != 1 || spans[0].Resource["service.name"] != "from-config" {
		t.Errorf("tracing.endpoint's receiver: got %+v, want one span of service from-config", spans)
	}
}
