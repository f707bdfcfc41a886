package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/proxy/h1"
)

// WatchTransport exposes the lean upstream transport's pool and counters,
// read through stats once per scrape (pass the h1.Transport's Stats
// method). A later call replaces the function; nil stops exposing them.
func (m *Metrics) WatchTransport(stats func() h1.Stats) {
	if m != nil {
		m.transport.stats.set(stats)
	}
}

// transportCollector turns h1.Stats into const metrics at scrape time.
type transportCollector struct {
	stats watched[h1.Stats]

	idle, dials, reused, stale, retries, fallback *prometheus.Desc
}

func newTransportCollector() *transportCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &transportCollector{
		idle:   d("gateway_upstream_idle_connections", "Kept-alive connections to plain-HTTP upstreams idle now (the lean transport's pool)."),
		dials:  d("gateway_upstream_dials_total", "Connections the lean transport opened to upstreams."),
		reused: d("gateway_upstream_reused_total", "Exchanges on a kept-alive upstream connection."),
		stale: d("gateway_upstream_stale_connections_total",
			"Idle upstream connections found closed by the upstream (or out of step) before use, and dropped."),
		retries: d("gateway_upstream_retries_total",
			"Requests sent a second time on a new connection after the reused one was closed before any answer (idempotent ones only)."),
		fallback: d("gateway_upstream_fallback_total",
			"Requests the lean transport handed to net/http's: TLS upstreams, upgrades, Expect, streamed uploads."),
	}
}

// Describe implements prometheus.Collector.
func (c *transportCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.idle
	ch <- c.dials
	ch <- c.reused
	ch <- c.stale
	ch <- c.retries
	ch <- c.fallback
}

// Collect implements prometheus.Collector.
func (c *transportCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.stats.read()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.idle, prometheus.GaugeValue, float64(st.Idle))
	ch <- prometheus.MustNewConstMetric(c.dials, prometheus.CounterValue, float64(st.Dials))
	ch <- prometheus.MustNewConstMetric(c.reused, prometheus.CounterValue, float64(st.Reused))
	ch <- prometheus.MustNewConstMetric(c.stale, prometheus.CounterValue, float64(st.Stale))
	ch <- prometheus.MustNewConstMetric(c.retries, prometheus.CounterValue, float64(st.Retries))
	ch <- prometheus.MustNewConstMetric(c.fallback, prometheus.CounterValue, float64(st.Fallback))
}
