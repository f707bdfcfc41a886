package metrics

import (
	"testing"
	"time"
)

// BenchmarkRequestMetrics measures what one request costs the metrics: a
// request, two policy decisions, the limiter's time and the upstream's.
// "with_label_values" is the same through the vectors' own lookup, the
// baseline the children caches are measured against.
func BenchmarkRequestMetrics(b *testing.B) {
	m := New()
	one := func() {
		m.Request("api", OutcomeAllowed)
		m.Policy("api", "per-ip", OutcomeAllowed)
		m.Policy("api", "tenant-rpm", OutcomeAllowed)
		m.Decision(BackendRedis, 180*time.Microsecond)
		m.Upstream("api", 200, 12*time.Millisecond)
	}
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			one()
		}
	})
	b.Run("cached_parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				one()
			}
		})
	})
	b.Run("with_label_values", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.requests.WithLabelValues("api", OutcomeAllowed).Inc()
			m.policyDecisions.WithLabelValues("api", "per-ip", OutcomeAllowed).Inc()
			m.policyDecisions.WithLabelValues("api", "tenant-rpm", OutcomeAllowed).Inc()
			m.decisionSeconds.WithLabelValues(BackendRedis).Observe((180 * time.Microsecond).Seconds())
			m.upstreamTotal.WithLabelValues("api", "2xx").Inc()
			m.upstreamSeconds.WithLabelValues("api").Observe((12 * time.Millisecond).Seconds())
		}
	})
	b.Run("llm_charge", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.LLMCharge("acme", "gpt-4o", 420, 1300)
		}
	})
}
