package metrics

import "github.com/prometheus/client_golang/prometheus"

// AdminAuthFailure counts one refused admin credential
// (gateway_admin_auth_failures_total{result}): result is "wrong" (a wrong
// token or login) or "throttled" (answered 429: its peer failed too often);
// any other result is not counted, so that the label's values stay these.
func (m *Metrics) AdminAuthFailure(result string) {
	if m == nil || (result != "wrong" && result != "throttled") {
		return
	}
	m.adminAuth.WithLabelValues(result).Inc()
}

func newAdminAuthCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_admin_auth_failures_total",
		Help: "Refused admin credentials, by result: wrong (a wrong token or login) or throttled (429: the peer failed 5 times in a minute).",
	}, []string{"result"})
	// Both exist from the start, so that increase() sees the first one.
	c.WithLabelValues("wrong")
	c.WithLabelValues("throttled")
	return c
}
