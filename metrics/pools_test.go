package metrics

import "testing"

// A pool member's counters and state come out with its route and name,
// one healthy series per state, and the retry budget's by outcome.
func TestWatchPools(t *testing.T) {
	m := New()
	m.WatchPools(func() PoolStats {
		return PoolStats{
			RetriesGranted: 7, RetriesRefused: 2,
			Members: []PoolMemberStats{
				{Route: "api", Member: "a", InFlight: 1, Requests: 10, Errors: 5, Ejections: 1, LatencySeconds: 0.5, State: "ejected"},
				{Route: "api", Member: "b", Requests: 20, State: "healthy"},
			},
		}
	})
	e := scrape(t, m)
	for _, tc := range []struct {
		name, labels string
		want         float64
	}{
		{"gateway_pool_member_requests_total", "route=api,member=a", 10},
		{"gateway_pool_member_errors_total", "route=api,member=a", 5},
		{"gateway_pool_member_ejections_total", "route=api,member=a", 1},
		{"gateway_pool_member_in_flight", "route=api,member=a", 1},
		{"gateway_pool_member_latency_seconds_total", "route=api,member=a", 0.5},
		{"gateway_pool_member_requests_total", "route=api,member=b", 20},
		{"gateway_pool_member_healthy", "route=api,member=a,state=ejected", 1},
		{"gateway_pool_member_healthy", "route=api,member=a,state=healthy", 0},
		{"gateway_pool_member_healthy", "route=api,member=b,state=healthy", 1},
		{"gateway_retries_total", "outcome=granted", 7},
		{"gateway_retries_total", "outcome=refused", 2},
	} {
		if got := e.value(t, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s{%s}: got %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	m.WatchPools(nil)
	if _, ok := scrape(t, m)["gateway_pool_member_requests_total"]; ok {
		t.Error("still exposed after WatchPools(nil)")
	}
}
