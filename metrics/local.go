package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// WatchLocal exposes the local buckets' state, read through stats once per
// scrape (pass the limiter.Local's Stats method). A later call replaces the
// function; nil stops exposing them.
func (m *Metrics) WatchLocal(stats func() limiter.LocalStats) {
	if m != nil {
		m.local.stats.set(stats)
	}
}

// localCollector turns limiter.LocalStats into const metrics at scrape time.
type localCollector struct {
	stats watched[limiter.LocalStats]

	buckets, evictions, expired, slotKeys, slotEvictions *prometheus.Desc
}

func newLocalCollector() *localCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &localCollector{
		buckets: d("gateway_local_buckets", "Local token buckets kept now, across every policy (including idle ones not yet swept)."),
		evictions: d("gateway_local_bucket_evictions_total",
			"Local buckets dropped to stay under server.max_keys_per_policy: a sign the cap is too low or keys are being sprayed."),
		expired:  d("gateway_local_bucket_expirations_total", "Idle local buckets swept (full again, so dropping them changes nothing)."),
		slotKeys: d("gateway_local_inflight_keys", "Keys with requests in flight under in-process concurrency policies."),
		slotEvictions: d("gateway_local_inflight_key_evictions_total",
			"Keys whose in-flight count was dropped to stay under the cap (each may then admit more than its limit)."),
	}
}

// Describe implements prometheus.Collector.
func (c *localCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.buckets
	ch <- c.evictions
	ch <- c.expired
	ch <- c.slotKeys
	ch <- c.slotEvictions
}

// Collect implements prometheus.Collector.
func (c *localCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.stats.read()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.buckets, prometheus.GaugeValue, float64(st.Buckets))
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(st.Evictions))
	ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(st.Expired))
	ch <- prometheus.MustNewConstMetric(c.slotKeys, prometheus.GaugeValue, float64(st.SlotKeys))
	ch <- prometheus.MustNewConstMetric(c.slotEvictions, prometheus.CounterValue, float64(st.SlotEvictions))
}
