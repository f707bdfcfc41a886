package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/proxy/idempotency"
)

// WatchIdempotency exposes the in-process idempotency store's state, read
// through stats once per scrape (pass the idempotency.Local's Stats
// method). A later call replaces the function; nil stops exposing it.
func (m *Metrics) WatchIdempotency(stats func() idempotency.LocalStats) {
	if m != nil {
		m.idem.stats.set(stats)
	}
}

// idemCollector turns idempotency.LocalStats into const metrics at scrape
// time.
type idemCollector struct {
	stats watched[idempotency.LocalStats]

	keys, markers, bytes, maxBytes, dropped, full *prometheus.Desc
}

func newIdemCollector() *idemCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &idemCollector{
		keys:     d("gateway_idempotency_keys", "Idempotency keys held or recorded in the in-process store."),
		markers:  d("gateway_idempotency_done_markers", "Records kept without their response (done markers): duplicates get 409."),
		bytes:    d("gateway_idempotency_bytes", "Bytes the in-process idempotency store counts: keys, kept responses and their headers."),
		maxBytes: d("gateway_idempotency_max_bytes", "The in-process idempotency store's bound (server.idempotency_max_bytes)."),
		dropped: d("gateway_idempotency_bodies_dropped_total",
			"Kept responses dropped to stay under server.idempotency_max_bytes, each leaving a done marker. Rising: raise the bound or lower replay_ttl."),
		full: d("gateway_idempotency_full_total",
			"Idempotency keys refused because holds and done markers fill the in-process store (answered as on_redis_error says)."),
	}
}

// Describe implements prometheus.Collector.
func (c *idemCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.keys, c.markers, c.bytes, c.maxBytes, c.dropped, c.full} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *idemCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.stats.read()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.Keys))
	ch <- prometheus.MustNewConstMetric(c.markers, prometheus.GaugeValue, float64(st.Markers))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(c.maxBytes, prometheus.GaugeValue, float64(st.MaxBytes))
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.BodiesDropped))
	ch <- prometheus.MustNewConstMetric(c.full, prometheus.CounterValue, float64(st.Full))
}
