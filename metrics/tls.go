package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Certificate is one certificate in force on a TLS listener: the file it
// was read from (a config value, so a bounded label) and its expiry.
type Certificate struct {
	File     string
	NotAfter time.Time
}

// WatchCertificates exposes each certificate's expiry
// (gateway_tls_certificate_expiry_timestamp_seconds{cert_file}), read
// through certs once per scrape.
func (m *Metrics) WatchCertificates(certs func() []Certificate) {
	if m != nil {
		m.tls.certs.Store(&certs)
	}
}

// CertificateReload counts one reload of the certificate files that found
// them changed (gateway_tls_certificate_reloads_total{result}): ok false is
// one in which a file failed to load and the one in force was kept.
func (m *Metrics) CertificateReload(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.tls.reloadsOK.Inc()
	} else {
		m.tls.reloadsFailed.Inc()
	}
}

type tlsCollector struct {
	expiry                   *prometheus.Desc
	reloads                  *prometheus.CounterVec
	reloadsOK, reloadsFailed prometheus.Counter
	certs                    atomic.Pointer[func() []Certificate]
}

func newTLSCollector() *tlsCollector {
	c := &tlsCollector{
		expiry: prometheus.NewDesc("gateway_tls_certificate_expiry_timestamp_seconds",
			"When each certificate in force expires (its NotAfter), in Unix seconds.", []string{"cert_file"}, nil),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_tls_certificate_reloads_total",
			Help: "Reloads of certificate files that found them changed, by result; a failed one keeps the certificate in force.",
		}, []string{"result"}),
	}
	c.reloadsOK = c.reloads.WithLabelValues("success")
	c.reloadsFailed = c.reloads.WithLabelValues("failure")
	return c
}

// Describe implements prometheus.Collector.
func (c *tlsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.expiry
	c.reloads.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *tlsCollector) Collect(ch chan<- prometheus.Metric) {
	c.reloads.Collect(ch)
	f := c.certs.Load()
	if f == nil {
		return
	}
	for _, cert := range (*f)() {
		ch <- prometheus.MustNewConstMetric(c.expiry, prometheus.GaugeValue, float64(cert.NotAfter.Unix()), cert.File)
	}
}
