package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/limiter/redislimit"
)

// WatchRedis exposes the Redis backend's counters, read through stats once
// per scrape (pass the redislimit.Limiter's Stats method). A later call
// replaces the function; nil stops exposing them.
func (m *Metrics) WatchRedis(stats func() redislimit.Stats) {
	if m != nil {
		m.redis.stats.set(stats)
	}
}

// redisCollector turns redislimit.Stats into const metrics at scrape time:
// the backend keeps its own atomic counters, so nothing is counted twice
// and the decision path pays nothing for metrics.
type redisCollector struct {
	stats watched[redislimit.Stats]

	roundTrips, errors, timeouts, overloaded, failFast *prometheus.Desc
	pipelines, leasesLost, renewErrors                 *prometheus.Desc
	failureMode, breakerOpen, breakerOpens             *prometheus.Desc
	denialHits, denialKeys                             *prometheus.Desc
	refunds, refundErrors, scriptReloads               *prometheus.Desc
	nodeBreaker, nodeOpens, nodeErrors, nodeTimeouts   *prometheus.Desc
}

func newRedisCollector() *redisCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &redisCollector{
		roundTrips:  d("gateway_redis_round_trips_total", "Decisions that asked Redis (one round trip each)."),
		pipelines:   d("gateway_redis_pipelines_total", "Pipelines sent to Redis; under load one carries many decisions' round trips."),
		leasesLost:  d("gateway_redis_leases_lost_total", "In-flight leases found lapsed while their requests ran (the slot may have gone to another)."),
		renewErrors: d("gateway_redis_lease_renew_errors_total", "In-flight lease renewals that failed."),
		errors:      d("gateway_redis_errors_total", "Round trips in which at least one Redis command failed."),
		timeouts:    d("gateway_redis_timeouts_total", "Round trips that ran out of time (a subset of gateway_redis_errors_total)."),
		overloaded: d("gateway_redis_overloaded_total",
			"Decisions denied because this instance could not get them answered in time (no free connection within queue_timeout, or a timeout while Redis answered others)."),
		failFast: d("gateway_redis_fail_fast_total", "Decisions answered by the failure modes without asking Redis, the breaker being open."),
		failureMode: d("gateway_redis_failure_mode_total",
			"Checks decided by their on_redis_error mode, by mode (allow, deny, local).", "mode"),
		breakerOpen:   d("gateway_redis_breaker_open", "1 while the circuit breaker is open or probing, else 0."),
		breakerOpens:  d("gateway_redis_breaker_opens_total", "Times the circuit breaker opened."),
		denialHits:    d("gateway_denial_cache_hits_total", "Requests denied from the denial cache without asking Redis."),
		denialKeys:    d("gateway_denial_cache_keys", "Keys the denial cache holds (including expired ones not yet swept)."),
		refunds:       d("gateway_redis_refunds_total", "Adjustments of admitted requests on Redis (given back or charged after the fact) that ran."),
		refundErrors:  d("gateway_redis_refund_errors_total", "Adjustments of admitted requests on Redis that failed."),
		scriptReloads: d("gateway_redis_script_reloads_total", "Round trips that re-sent scripts because Redis had lost its script cache."),
		nodeBreaker: d("gateway_redis_node_breaker_open",
			"1 while the node's circuit breaker is open or probing, else 0; one series per Redis server (each Cluster master seen).", "node"),
		nodeOpens:    d("gateway_redis_node_breaker_opens_total", "Times the node's circuit breaker opened.", "node"),
		nodeErrors:   d("gateway_redis_node_errors_total", "Round trips to the node in which at least one command failed.", "node"),
		nodeTimeouts: d("gateway_redis_node_timeouts_total", "Round trips to the node that ran out of time.", "node"),
	}
}

// Describe implements prometheus.Collector.
func (c *redisCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.roundTrips, c.errors, c.timeouts, c.overloaded, c.failFast, c.pipelines, c.leasesLost, c.renewErrors,
		c.failureMode, c.breakerOpen, c.breakerOpens, c.denialHits, c.denialKeys,
		c.refunds, c.refundErrors, c.scriptReloads, c.nodeBreaker, c.nodeOpens, c.nodeErrors, c.nodeTimeouts,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *redisCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.stats.read()
	if !ok {
		return
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(c.roundTrips, st.RoundTrips)
	counter(c.pipelines, st.Pipelines)
	counter(c.leasesLost, st.LeasesLost)
	counter(c.renewErrors, st.RenewErrors)
	counter(c.errors, st.Errors)
	counter(c.timeouts, st.Timeouts)
	counter(c.overloaded, st.Overloaded)
	counter(c.failFast, st.FailFast)
	counter(c.failureMode, st.FailedOpen, "allow")
	counter(c.failureMode, st.FailedClosed, "deny")
	counter(c.failureMode, st.LocalFallbacks, "local")
	open := 0.0
	if st.BreakerOpen {
		open = 1
	}
	gauge(c.breakerOpen, open)
	counter(c.breakerOpens, st.BreakerOpens)
	counter(c.denialHits, st.DenialCacheHits)
	gauge(c.denialKeys, float64(st.DenialCacheKeys))
	counter(c.refunds, st.Refunds)
	counter(c.refundErrors, st.RefundErrors)
	counter(c.scriptReloads, st.ScriptReloads)
	for _, n := range st.Nodes {
		open := 0.0
		if n.Breaker != "closed" {
			open = 1
		}
		gauge(c.nodeBreaker, open, n.Addr)
		counter(c.nodeOpens, n.BreakerOpens, n.Addr)
		counter(c.nodeErrors, n.Errors, n.Addr)
		counter(c.nodeTimeouts, n.Timeouts, n.Addr)
	}
}
