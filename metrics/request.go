package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Request counts one answered request (gateway_requests_total). route is a
// route name from the config; outcome one of the Outcome constants.
func (m *Metrics) Request(route, outcome string) {
	if m == nil {
		return
	}
	c, ok := m.requestChildren.get(requestKey{route, outcome}, func() (prometheus.Counter, error) {
		return m.requests.GetMetricWithLabelValues(route, outcome)
	})
	if ok {
		c.Inc()
	}
}

// Policy counts one policy's decision on a request
// (gateway_policy_decisions_total): the Outcome constants, OutcomeDelayed
// included.
func (m *Metrics) Policy(route, policy, outcome string) {
	if m == nil {
		return
	}
	c, ok := m.policyChildren.get(policyKey{route, policy, outcome}, func() (prometheus.Counter, error) {
		return m.policyDecisions.GetMetricWithLabelValues(route, policy, outcome)
	})
	if ok {
		c.Inc()
	}
}

// Decision observes how long the limiter took to decide one request
// (gateway_decision_duration_seconds); backend is BackendLocal or
// BackendRedis.
func (m *Metrics) Decision(backend string, d time.Duration) {
	if m == nil {
		return
	}
	o, ok := m.decisionChildren.get(backend, func() (prometheus.Observer, error) {
		return m.decisionSeconds.GetMetricWithLabelValues(backend)
	})
	if ok {
		o.Observe(d.Seconds())
	}
}

// Upstream counts one forwarded request by the class of its response
// (gateway_upstream_responses_total: "1xx" to "5xx", or "error" for status
// 0, no response) and, when there was a response, observes d, the time to
// its headers (gateway_upstream_duration_seconds). A request that got no
// response is not observed: its time is the timeout's or the error's, not
// the upstream's latency.
func (m *Metrics) Upstream(route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	class := statusClass(status)
	c, ok := m.upstreamChildren.get(upstreamKey{route, class}, func() (prometheus.Counter, error) {
		return m.upstreamTotal.GetMetricWithLabelValues(route, class)
	})
	if ok {
		c.Inc()
	}
	if class == classError {
		return
	}
	o, ok := m.latencyChildren.get(route, func() (prometheus.Observer, error) {
		return m.upstreamSeconds.GetMetricWithLabelValues(route)
	})
	if ok {
		o.Observe(d.Seconds())
	}
}

const classError = "error"

// statusClass returns a constant, so that no label value is built per call.
// A status outside 100–599 is no HTTP response.
func statusClass(status int) string {
	switch {
	case status >= 100 && status < 200:
		return "1xx"
	case status >= 200 && status < 300:
		return "2xx"
	case status >= 300 && status < 400:
		return "3xx"
	case status >= 400 && status < 500:
		return "4xx"
	case status >= 500 && status < 600:
		return "5xx"
	}
	return classError
}

// InFlight moves gateway_requests_in_flight by delta: +1 when a request
// arrives, -1 when it has been answered.
func (m *Metrics) InFlight(delta int) {
	if m == nil {
		return
	}
	m.inFlight.Add(float64(delta))
}
