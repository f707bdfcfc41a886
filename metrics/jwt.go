package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/jwtauth"
)

func newJWTRefusedCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_jwt_refused_total",
		Help: "Bearer JWTs refused (401), by reason: expired, wrong_audience, wrong_issuer, bad_signature, unknown_kid, algorithm, missing_claim, not_yet_valid, malformed, too_large.",
	}, []string{"reason"})
	// Every reason exists from the start, so that increase() sees the first.
	for _, r := range jwtauth.Reasons {
		c.WithLabelValues(string(r))
	}
	return c
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
