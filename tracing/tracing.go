// Package tracing builds the gateway's OpenTelemetry tracer provider: spans
// exported over OTLP/HTTP in batches, sampled by a ratio, described by the
// tracing config section and the standard OTEL_* variables. It is built once
// per process (cmd/gateway) and injected; the proxy starts the spans, and
// RedisHook adds the span of each Redis pipeline.
//
// It never decides what a span holds about a request: that, and the rule
// that only trusted peers continue a trace, are the proxy's.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Provider is the process's tracer provider. Build it with New; Shutdown
// flushes what is buffered and stops the exporter. It is safe for
// concurrent use.
type Provider struct {
	tp    *sdktrace.TracerProvider
	ratio float64
}

// Options are what New needs besides the config section.
type Options struct {
	// LookupEnv reads the OTEL_* variables the gateway interprets itself
	// (sampler, protocol, SDK switch); nil means none are set. The exporter
	// and the resource read theirs from the process environment, as the
	// OpenTelemetry SDK does.
	LookupEnv func(string) (string, bool)
	// Version is the service.version resource attribute; "" leaves it out.
	Version string
	// Exporter replaces the OTLP/HTTP exporter (tests, benchmarks); nil
	// means the one the config and the environment describe.
	Exporter sdktrace.SpanExporter
}

// ErrDisabled is returned by New when OTEL_SDK_DISABLED=true turns a
// configured tracing off.
var ErrDisabled = errors.New("tracing: OTEL_SDK_DISABLED is true")

// Config is the tracing section of the config (policies.TracingConfig
// converts to it). Endpoint "" means the OTEL_EXPORTER_OTLP_* variables,
// then http://localhost:4318; a nil SampleRatio means
// OTEL_TRACES_SAMPLER_ARG, then DefaultSampleRatio; ServiceName "" means
// OTEL_SERVICE_NAME, then "gateway".
type Config struct {
	Enabled     bool
	Endpoint    string
	SampleRatio *float64
	ServiceName string
}

// DefaultSampleRatio is the share of new traces recorded when neither the
// config nor the environment sets one.
const DefaultSampleRatio = 0.01

// New builds the provider for cfg, which must be enabled. It starts the
// batch exporter's goroutine, which Shutdown stops.
func New(ctx context.Context, cfg Config, opts Options) (*Provider, error) {
	env := opts.LookupEnv
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	if v, _ := env("OTEL_SDK_DISABLED"); strings.EqualFold(strings.TrimSpace(v), "true") {
		return nil, ErrDisabled
	}
	ratio, err := sampleRatio(cfg, env)
	if err != nil {
		return nil, err
	}
	exp := opts.Exporter
	if exp == nil {
		if exp, err = newExporter(ctx, cfg, env); err != nil {
			return nil, err
		}
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "gateway")}
	if opts.Version != "" {
		attrs = append(attrs, attribute.String("service.version", opts.Version))
	}
	// Later options win: the default name, then OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES, then the config's name.
	ropts := []resource.Option{resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK()}
	if cfg.ServiceName != "" {
		ropts = append(ropts, resource.WithAttributes(attribute.String("service.name", cfg.ServiceName)))
	}
	res, err := resource.New(ctx, ropts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: describing the service: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp), // OTEL_BSP_* tune it
		sdktrace.WithResource(res),
		sdktrace.WithSampler(linkSampler{sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))}),
	)
	return &Provider{tp: tp, ratio: ratio}, nil
}

// TracerProvider is what the proxy and RedisHook start spans with.
func (p *Provider) TracerProvider() trace.TracerProvider { return p.tp }

// SampleRatio is the share of new traces recorded, as New resolved it.
func (p *Provider) SampleRatio() float64 { return p.ratio }

// Shutdown exports the spans still buffered, within ctx, and stops the
// exporter. Spans ended afterwards are dropped.
func (p *Provider) Shutdown(ctx context.Context) error {
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flushing spans: %w", err)
	}
	return nil
}

// newExporter is the OTLP/HTTP exporter. The tracing.endpoint key wins over
// OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, which the exporter reads itself, as
// it does the headers, timeout, compression and certificates.
func newExporter(ctx context.Context, cfg Config, env func(string) (string, bool)) (sdktrace.SpanExporter, error) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v, ok := env(name); ok && strings.TrimSpace(v) != "" {
			if v := strings.TrimSpace(v); v != "http/protobuf" {
				return nil, fmt.Errorf("tracing: %s=%s: the gateway exports OTLP over HTTP only (http/protobuf)", name, v)
			}
			break // the more specific one decides
		}
	}
	var xopts []otlptracehttp.Option
	if cfg.Endpoint != "" {
		xopts = append(xopts, otlptracehttp.WithEndpointURL(tracesURL(cfg.Endpoint)))
	} else if !anySet(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") {
		// The SDK's own default is TLS to localhost: a collector beside the
		// gateway speaks plain HTTP.
		xopts = append(xopts, otlptracehttp.WithEndpointURL("http://localhost:4318/v1/traces"))
	}
	exp, err := otlptracehttp.New(ctx, xopts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: creating the OTLP exporter: %w", err)
	}
	return exp, nil
}

// tracesURL is base with /v1/traces added when it has no path, as the SDK
// does with OTEL_EXPORTER_OTLP_ENDPOINT. Validation has checked base.
func tracesURL(base string) string {
	u, err := url.Parse(base)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return base
	}
	u.Path = "/v1/traces"
	return u.String()
}

func anySet(env func(string) (string, bool), names ...string) bool {
	for _, n := range names {
		if v, ok := env(n); ok && strings.TrimSpace(v) != "" {
			return true
		}
	}
	return false
}

// sampleRatio resolves the share of new traces recorded: tracing.sample_ratio,
// then OTEL_TRACES_SAMPLER (with OTEL_TRACES_SAMPLER_ARG for the ratio
// samplers), then DefaultSampleRatio. The gateway always
// follows a trusted parent's decision, so the parentbased_ forms and the
// plain ones mean the same here.
func sampleRatio(cfg Config, env func(string) (string, bool)) (float64, error) {
	if cfg.SampleRatio != nil {
		return *cfg.SampleRatio, nil
	}
	sampler, ok := env("OTEL_TRACES_SAMPLER")
	if !ok || strings.TrimSpace(sampler) == "" {
		return DefaultSampleRatio, nil
	}
	switch s := strings.TrimSpace(sampler); s {
	case "always_on", "parentbased_always_on":
		return 1, nil
	case "always_off", "parentbased_always_off":
		return 0, nil
	case "traceidratio", "parentbased_traceidratio":
		arg, ok := env("OTEL_TRACES_SAMPLER_ARG")
		if !ok || strings.TrimSpace(arg) == "" {
			return 1, nil // the specification's default for a ratio sampler
		}
		r, err := strconv.ParseFloat(strings.TrimSpace(arg), 64)
		if err != nil || !(r >= 0 && r <= 1) {
			return 0, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER_ARG=%s: must be a ratio in [0, 1]", arg)
		}
		return r, nil
	default:
		return 0, fmt.Errorf("tracing: OTEL_TRACES_SAMPLER=%s: the gateway supports always_on, always_off, traceidratio and their parentbased_ forms", s)
	}
}

// linkSampler records a new root span whose links point to a recorded span:
// the span of a Redis pipeline is a root of its own (it carries many
// requests, so it is none's child) and must be kept exactly when one of the
// requests it carries is. Every other span is sampled by base.
type linkSampler struct{ base sdktrace.Sampler }

func (s linkSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		for _, l := range p.Links {
			if l.SpanContext.IsSampled() {
				return sdktrace.SamplingResult{
					Decision:   sdktrace.RecordAndSample,
					Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState(),
				}
			}
		}
	}
	return s.base.ShouldSample(p)
}

func (s linkSampler) Description() string { return "LinkAware{" + s.base.Description() + "}" }
