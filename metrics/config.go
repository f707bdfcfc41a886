package metrics

import (
	"encoding/hex"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reload counts one config reload (gateway_config_reloads_total{result}):
// ok false is a reload that failed and kept the last good config.
func (m *Metrics) Reload(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.reloadsOK.Inc()
	} else {
		m.reloadsFailed.Inc()
	}
}

// ConfigLoaded records the config now in force: digest is its SHA-256 (the
// snapshot's), at when it was loaded. gateway_config_info carries the first
// 12 hex digits of the digest as its hash label, so that a dashboard shows
// which instances run which config; there is only ever one series, the
// active config's. gateway_config_last_reload_timestamp_seconds is at.
// Both appear once ConfigLoaded has been called.
func (m *Metrics) ConfigLoaded(digest [32]byte, at time.Time) {
	if m == nil {
		return
	}
	m.config.active.Store(&activeConfig{
		hash: hex.EncodeToString(digest[:6]),
		at:   float64(at.UnixNano()) / 1e9,
	})
}

type activeConfig struct {
	hash string
	at   float64 // Unix seconds
}

// configCollector exposes the active config at scrape time. Where a
// GaugeVec would be reset and set again, one pointer swap means no scrape
// can see the old hash beside the new one, or neither.
type configCollector struct {
	infoDesc, loadedDesc *prometheus.Desc
	active               atomic.Pointer[activeConfig] // nil until ConfigLoaded
}

func newConfigCollector() *configCollector {
	return &configCollector{
		infoDesc: prometheus.NewDesc("gateway_config_info",
			"The config in force: 1, labelled with the first 12 hex digits of its SHA-256.", []string{"hash"}, nil),
		loadedDesc: prometheus.NewDesc("gateway_config_last_reload_timestamp_seconds",
			"When the config in force was loaded, in Unix seconds.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *configCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.infoDesc
	ch <- c.loadedDesc
}

// Collect implements prometheus.Collector.
func (c *configCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.active.Load()
	if a == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.infoDesc, prometheus.GaugeValue, 1, a.hash)
	ch <- prometheus.MustNewConstMetric(c.loadedDesc, prometheus.GaugeValue, a.at)
}
