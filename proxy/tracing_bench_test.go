package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-gateway/gateway/internal/servetest"
	"github.com/ratelimit-gateway/gateway/internal/stat"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/tracing"
)

// BenchmarkTracing serves the same requests through three Handlers that
// differ only in tracing: off (the anchor), on at sample_ratio 0.01, and on
// at 1.0, each exporting over OTLP/HTTP to a loopback sink that reads and
// acknowledges every export. It does so on the allow path (forwarded to an
// upstream answering from memory, so that the Handler's own work is what is
// timed) and on the deny path (a flood refused with 429s). Each alone
// reports its allocations; side by side, the traced Handlers' median time
// per request over the untraced one's (x-off-…). Tracing off must match the Handler
// without tracing: no allocation is added (compare allocs/op of off with
// the same benchmark on a build without tracing).
//
//	go test -run '^$' -bench BenchmarkTracing -benchmem -count 5 ./proxy/
func BenchmarkTracing(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(sink.Close)

	huge := limiter.Limit{Rate: 1 << 40, Period: time.Second, Burst: 1 << 40}
	deny := testRoute(b, "deny", "/deny", "http://upstream.invalid", testPolicy(b, "flood", "ip", limiter.Limit{Rate: 1, Period: time.Hour, Burst: 1}, policies.MissingReject))
	allow := testRoute(b, "allow", "/", "http://upstream.invalid", testPolicy(b, "per-ip", "ip", huge, policies.MissingReject))
	deny.Timeout, allow.Timeout = 0, 0 // no route timer: the same work with any transport
	snap := testSnapshot(b, nil, deny, allow)

	providers := []struct {
		name  string
		ratio float64 // < 0: off
	}{{"off", -1}, {"ratio=0.01", 0.01}, {"ratio=1", 1}}
	handlers := make([]*Handler, len(providers))
	for i, p := range providers {
		var tp trace.TracerProvider
		if p.ratio >= 0 {
			pr, err := tracing.New(context.Background(), tracing.Config{Enabled: true, Endpoint: sink.URL, SampleRatio: &p.ratio}, tracing.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { pr.Shutdown(context.Background()) })
			tp = pr.TracerProvider()
		}
		engine, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
		if err != nil {
			b.Fatal(err)
		}
		holder := &snapshotHolder{}
		holder.p.Store(snap)
		h, err := New(Config{Snapshots: holder, Limiter: engine, Transport: servetest.MemoryUpstream{}, Logger: slog.New(slog.DiscardHandler), Tracing: tp, Metrics: discardObserver{}})
		if err != nil {
			b.Fatal(err)
		}
		handlers[i] = h
	}

	for _, path := range []struct {
		name, target string
		status       int
	}{{"allow", "/bench?x=1", http.StatusOK}, {"deny", "/deny/bench", http.StatusTooManyRequests}} {
		serve := func(b *testing.B, h *Handler) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", path.target, nil))
			if w.Code != path.status {
				b.Fatalf("status: got %d, want %d", w.Code, path.status)
			}
		}
		for i, h := range handlers {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path.target, nil)) // the deny route's one admitted request
			// Each alone, for its allocations.
			b.Run(path.name+"/"+providers[i].name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					serve(b, h)
				}
			})
		}
		// Side by side: each iteration serves one request through each
		// Handler in turn, so that a machine busy with something else
		// slows all three alike; the ratios are of the medians of each
		// Handler's requests, which a burst of preemption does not move.
		b.Run(path.name+"/sidebyside", func(b *testing.B) {
			took := make([][]time.Duration, len(handlers))
			for n := 0; b.Loop(); n++ {
				for k := range handlers { // the first of an iteration turns
					i := (n + k) % len(handlers)
					start := time.Now()
					serve(b, handlers[i])
					took[i] = append(took[i], time.Since(start))
				}
			}
			off := stat.Median(took[0])
			b.ReportMetric(float64(off.Nanoseconds()), "p50-ns-off")
			for i := 1; i < len(handlers); i++ {
				b.ReportMetric(float64(stat.Median(took[i]))/float64(off), "x-off-"+providers[i].name)
			}
		})
	}
}

// discardObserver stands for the metrics the gateway always has, so that
// every Handler follows its requests as in production.
type discardObserver struct{}

func (discardObserver) Request(string, string)                 {}
func (discardObserver) Policy(string, string, string)          {}
func (discardObserver) Decision(string, time.Duration)         {}
func (discardObserver) Upstream(string, int, time.Duration)    {}
func (discardObserver) InFlight(int)                           {}
func (discardObserver) LLMCharge(string, string, int64, int64) {}
