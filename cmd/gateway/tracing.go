package main

import (
	"context"
	"errors"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-gateway/gateway/tracing"
)

// tracingCloseTimeout bounds the flush of the spans still buffered when the
// process ends without a drain (a start that failed halfway).
const tracingCloseTimeout = 5 * time.Second

// newTracing builds the process's tracer provider when the config enables
// tracing. OTEL_SDK_DISABLED=true turns it off, and says so.
func (p *process) newTracing(ctx context.Context) error {
	cfg := p.snap.Config.Tracing
	if !cfg.Enabled {
		return nil
	}
	tp, err := tracing.New(ctx, tracing.Config(cfg), tracing.Options{LookupEnv: os.LookupEnv, Version: version})
	if errors.Is(err, tracing.ErrDisabled) {
		p.log.Warn("tracing.enabled is true but OTEL_SDK_DISABLED=true: tracing is off")
		return nil
	}
	if err != nil {
		return err
	}
	p.tracing = tp
	p.onClose(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), tracingCloseTimeout)
		defer cancel()
		p.stopTracing(ctx)
		return nil
	})
	p.log.Info("tracing on", "sample_ratio", tp.SampleRatio())
	return nil
}

// tracerProvider is what the proxy traces with; nil when tracing is off.
func (p *process) tracerProvider() trace.TracerProvider {
	if p.tracing == nil {
		return nil
	}
	return p.tracing.TracerProvider()
}

// stopTracing flushes the spans still buffered, within ctx, and stops the
// exporter; after the first call it does nothing.
func (p *process) stopTracing(ctx context.Context) {
	if p.tracing == nil {
		return
	}
	if err := p.tracing.Shutdown(ctx); err != nil {
		p.log.Warn("tracing: spans not exported at shutdown", "err", err)
	}
	p.tracing = nil
}
