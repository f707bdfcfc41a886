package metrics

import "testing"

// The upstream transport's pool and counters, as the transport reports them
// (cmd/gateway's TestLeanTransportStats has proxy/h1's own), are exposed,
// and no longer once unwatched.
func TestWatchTransport(t *testing.T) {
	m := New()
	m.WatchTransport(func() TransportStats {
		return TransportStats{Dials: 1, Reused: 2, Stale: 3, Retries: 4, Fallback: 5, Idle: 6}
	})
	scrape(t, m).wantValues(t, map[string]float64{
		"gateway_upstream_dials_total":             1,
		"gateway_upstream_reused_total":            2,
		"gateway_upstream_stale_connections_total": 3,
		"gateway_upstream_retries_total":           4,
		"gateway_upstream_fallback_total":          5,
		"gateway_upstream_idle_connections":        6,
	})
	m.WatchTransport(nil)
	if _, ok := scrape(t, m)["gateway_upstream_dials_total"]; ok {
		t.Error("still exposed after WatchTransport(nil)")
	}
}

// The client server's counters, as it reports them (cmd/gateway's
// TestLeanServerStats has proxy/h1's own), are exposed.
func TestWatchClientServer(t *testing.T) {
	m := New()
	m.WatchClientServer(func() ClientServerStats { return ClientServerStats{Served: 2, HandedOver: 1} })
	scrape(t, m).wantValues(t, map[string]float64{
		"gateway_client_lean_requests_total": 2,
		"gateway_client_handed_over_total":   1,
	})
}
