package metrics

import "github.com/prometheus/client_golang/prometheus"

// PoolMemberStats is what is counted of one member of an upstream pool:
// attempts sent to it (in flight now, all, failed), its ejections, the
// summed seconds to its answers' headers, and its state (healthy, ejected,
// held or down).
type PoolMemberStats struct {
	Route, Member                         string
	InFlight, Requests, Errors, Ejections int64
	LatencySeconds                        float64
	State                                 string
}

// PoolStats is every pool member's, and the retry budget's: retries
// granted and refused.
type PoolStats struct {
	Members                        []PoolMemberStats
	RetriesGranted, RetriesRefused int64
}

// PoolStates lists the states a member's gateway_pool_member_healthy has a
// series for.
var PoolStates = []string{"healthy", "ejected", "held", "down"}

// WatchPools exposes the upstream pools' members and the retry budget,
// read through stats once per scrape. A later call replaces the function;
// nil stops exposing them.
func (m *Metrics) WatchPools(stats func() PoolStats) {
	if m != nil {
		m.pools.watch(stats)
	}
}

func newPoolsCollector() *statsCollector[PoolStats] {
	type st = PoolStats
	member := func(name, help string, kind prometheus.ValueType, v func(PoolMemberStats) float64) stat[st] {
		return stat[st]{
			desc: prometheus.NewDesc(name, help, []string{"route", "member"}, nil),
			kind: kind,
			read: func(s st, emit func(float64, ...string)) {
				for _, m := range s.Members {
					emit(v(m), m.Route, m.Member)
				}
			},
		}
	}
	return newStatsCollector(
		member("gateway_pool_member_requests_total", "Attempts sent to each member of an upstream pool.", prometheus.CounterValue,
			func(m PoolMemberStats) float64 { return float64(m.Requests) }),
		member("gateway_pool_member_errors_total", "Attempts on a pool member that failed: connect errors, timeouts, broken exchanges, 5xx.", prometheus.CounterValue,
			func(m PoolMemberStats) float64 { return float64(m.Errors) }),
		member("gateway_pool_member_latency_seconds_total", "Seconds to a pool member's answer headers, summed over its attempts.", prometheus.CounterValue,
			func(m PoolMemberStats) float64 { return m.LatencySeconds }),
		member("gateway_pool_member_in_flight", "Requests at a pool member now, until their answer has been passed on whole.", prometheus.GaugeValue,
			func(m PoolMemberStats) float64 { return float64(m.InFlight) }),
		member("gateway_pool_member_ejections_total", "Times a pool member was ejected after failures in a row.", prometheus.CounterValue,
			func(m PoolMemberStats) float64 { return float64(m.Ejections) }),
		stat[st]{
			desc: prometheus.NewDesc("gateway_pool_member_healthy", "1 for a pool member's state: healthy, ejected, held (a Retry-After) or down (its checks).",
				[]string{"route", "member", "state"}, nil),
			kind: prometheus.GaugeValue,
			read: func(s st, emit func(float64, ...string)) {
				for _, m := range s.Members {
					for _, state := range PoolStates {
						emit(flag(m.State == state), m.Route, m.Member, state)
					}
				}
			},
		},
		labelled("gateway_retries_total", "Retries of upstream requests asked of the retry budget, granted or refused.", "outcome", prometheus.CounterValue,
			func(s st, emit func(float64, ...string)) {
				emit(float64(s.RetriesGranted), "granted")
				emit(float64(s.RetriesRefused), "refused")
			}),
	)
}
