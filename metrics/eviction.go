package metrics

import "github.com/prometheus/client_golang/prometheus"

// RedisEvictionPolicy records a Redis node's maxmemory-policy as read at
// start: gateway_redis_evicting{node, policy} is 1 when the node may evict
// the gateway's keys when full (cmd reads the policy at start), else 0.
func (m *Metrics) RedisEvictionPolicy(node, policy string, evicts bool) {
	if m == nil {
		return
	}
	v := 0.0
	if evicts {
		v = 1
	}
	m.evicting.WithLabelValues(node, policy).Set(v)
}

func newEvictingGauge() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gateway_redis_evicting",
		Help: "1 when a Redis node's maxmemory-policy (read at start) may evict the gateway's keys when full: limits reset, duplicates let through. Set noeviction.",
	}, []string{"node", "policy"})
}
