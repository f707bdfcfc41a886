package metrics

import "github.com/prometheus/client_golang/prometheus"

// RedisStats is what the shared limiter on Redis counts, as cmd reads it
// from the Redis backend: the fields of the same names there.
type RedisStats struct {
	RoundTrips, Pipelines, Errors, Timeouts, FailFast uint64
	FailedOpen, FailedClosed, LocalFallbacks          uint64
	Overloaded, DenialCacheHits                       uint64
	Refunds, RefundErrors, ScriptReloads              uint64
	LeasesLost, RenewErrors, BreakerOpens             uint64
	BreakerOpen                                       bool
	DenialCacheKeys                                   int
	// Nodes is each Redis server's health, by address.
	Nodes []RedisNode
}

// RedisNode is one Redis server's breaker and counters.
type RedisNode struct {
	Addr                           string
	Breaker                        string // "closed", "open" or "half-open"
	BreakerOpens, Errors, Timeouts uint64
}

// WatchRedis exposes the Redis backend's counters, read through stats once
// per scrape. A later call replaces the function; nil stops exposing them.
func (m *Metrics) WatchRedis(stats func() RedisStats) {
	if m != nil {
		m.redis.watch(stats)
	}
}

func newRedisCollector() *statsCollector[RedisStats] {
	type st = RedisStats
	type emit = func(float64, ...string)
	perNode := func(name, help string, kind prometheus.ValueType, v func(RedisNode) float64) stat[st] {
		return labelled(name, help, "node", kind, func(s st, emit emit) {
			for _, n := range s.Nodes {
				emit(v(n), n.Addr)
			}
		})
	}
	return newStatsCollector(
		counter("gateway_redis_round_trips_total", "Decisions that asked Redis (one round trip each).",
			func(s st) uint64 { return s.RoundTrips }),
		counter("gateway_redis_pipelines_total", "Pipelines sent to Redis; under load one carries many decisions' round trips.",
			func(s st) uint64 { return s.Pipelines }),
		counter("gateway_redis_leases_lost_total", "In-flight leases found lapsed while their requests ran (the slot may have gone to another).",
			func(s st) uint64 { return s.LeasesLost }),
		counter("gateway_redis_lease_renew_errors_total", "In-flight lease renewals that failed.",
			func(s st) uint64 { return s.RenewErrors }),
		counter("gateway_redis_errors_total", "Round trips in which at least one Redis command failed.",
			func(s st) uint64 { return s.Errors }),
		counter("gateway_redis_timeouts_total", "Round trips that ran out of time (a subset of gateway_redis_errors_total).",
			func(s st) uint64 { return s.Timeouts }),
		counter("gateway_redis_overloaded_total",
			"Decisions denied because this instance could not get them answered in time (no free connection within queue_timeout, or a timeout while Redis answered others).",
			func(s st) uint64 { return s.Overloaded }),
		counter("gateway_redis_fail_fast_total", "Decisions answered by the failure modes without asking Redis, the breaker being open.",
			func(s st) uint64 { return s.FailFast }),
		labelled("gateway_redis_failure_mode_total",
			"Checks decided by their on_redis_error mode, by mode (allow, deny, local).", "mode", prometheus.CounterValue,
			func(s st, emit emit) {
				emit(float64(s.FailedOpen), "allow")
				emit(float64(s.FailedClosed), "deny")
				emit(float64(s.LocalFallbacks), "local")
			}),
		gauge("gateway_redis_breaker_open", "1 while the circuit breaker is open or probing, else 0.",
			func(s st) float64 { return flag(s.BreakerOpen) }),
		counter("gateway_redis_breaker_opens_total", "Times the circuit breaker opened.",
			func(s st) uint64 { return s.BreakerOpens }),
		counter("gateway_denial_cache_hits_total", "Requests denied from the denial cache without asking Redis.",
			func(s st) uint64 { return s.DenialCacheHits }),
		gauge("gateway_denial_cache_keys", "Keys the denial cache holds (including expired ones not yet swept).",
			func(s st) int { return s.DenialCacheKeys }),
		counter("gateway_redis_refunds_total", "Adjustments of admitted requests on Redis (given back or charged after the fact) that ran.",
			func(s st) uint64 { return s.Refunds }),
		counter("gateway_redis_refund_errors_total", "Adjustments of admitted requests on Redis that failed.",
			func(s st) uint64 { return s.RefundErrors }),
		counter("gateway_redis_script_reloads_total", "Round trips that re-sent scripts because Redis had lost its script cache.",
			func(s st) uint64 { return s.ScriptReloads }),
		perNode("gateway_redis_node_breaker_open",
			"1 while the node's circuit breaker is open or probing, else 0; one series per Redis server (each Cluster master seen).",
			prometheus.GaugeValue, func(n RedisNode) float64 { return flag(n.Breaker != "closed") }),
		perNode("gateway_redis_node_breaker_opens_total", "Times the node's circuit breaker opened.",
			prometheus.CounterValue, func(n RedisNode) float64 { return float64(n.BreakerOpens) }),
		perNode("gateway_redis_node_errors_total", "Round trips to the node in which at least one command failed.",
			prometheus.CounterValue, func(n RedisNode) float64 { return float64(n.Errors) }),
		perNode("gateway_redis_node_timeouts_total", "Round trips to the node that ran out of time.",
			prometheus.CounterValue, func(n RedisNode) float64 { return float64(n.Timeouts) }),
	)
}
