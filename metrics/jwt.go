package metrics

import "github.com/prometheus/client_golang/prometheus"

func newJWTRefusedCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_jwt_refused_total",
		Help: "Bearer JWTs refused (401), by reason: expired, wrong_audience, wrong_issuer, bad_signature, unknown_kid, algorithm, missing_claim, not_yet_valid, malformed, too_large.",
	}, []string{"reason"})
}

// TokenReasons makes a gateway_jwt_refused_total series for each of
// reasons (cmd passes the verifier's), so that increase() sees the first
// refusal of each.
func (m *Metrics) TokenReasons(reasons []string) {
	if m == nil {
		return
	}
	for _, r := range reasons {
		m.jwtRefused.WithLabelValues(r)
	}
}

// TokenRefused counts one refused bearer JWT by its reason
// (gateway_jwt_refused_total).
func (m *Metrics) TokenRefused(reason string) {
	if m == nil {
		return
	}
	if c, err := m.jwtRefused.GetMetricWithLabelValues(reason); err == nil {
		c.Inc()
	}
}
