package metrics

// TransportStats is what the lean upstream transport counts: connections
// opened, exchanges on kept-alive ones, idle ones found closed, requests
// sent again, requests handed to net/http's, and connections idle now.
type TransportStats struct {
	Dials, Reused, Stale, Retries, Fallback int64
	Idle                                    int
}

// ClientServerStats is what the lean client server counts: requests it
// served itself, and connections it handed to net/http's.
type ClientServerStats struct {
	Served, HandedOver int64
}

// WatchTransport exposes the lean upstream transport's pool and counters,
// read through stats once per scrape. A later call replaces the function;
// nil stops exposing them.
func (m *Metrics) WatchTransport(stats func() TransportStats) {
	if m != nil {
		m.transport.watch(stats)
	}
}

func newTransportCollector() *statsCollector[TransportStats] {
	type st = TransportStats
	return newStatsCollector(
		gauge("gateway_upstream_idle_connections", "Kept-alive connections to plain-HTTP upstreams idle now (the lean transport's pool).",
			func(s st) int { return s.Idle }),
		counter("gateway_upstream_dials_total", "Connections the lean transport opened to upstreams.",
			func(s st) int64 { return s.Dials }),
		counter("gateway_upstream_reused_total", "Exchanges on a kept-alive upstream connection.",
			func(s st) int64 { return s.Reused }),
		counter("gateway_upstream_stale_connections_total",
			"Idle upstream connections found closed by the upstream (or out of step) before use, and dropped.",
			func(s st) int64 { return s.Stale }),
		counter("gateway_upstream_retries_total",
			"Requests sent a second time on a new connection after the reused one was closed before any answer (idempotent ones only).",
			func(s st) int64 { return s.Retries }),
		counter("gateway_upstream_fallback_total",
			"Requests the lean transport handed to net/http's: TLS upstreams, upgrades, Expect, streamed uploads.",
			func(s st) int64 { return s.Fallback }),
	)
}

// WatchClientServer exposes the lean client server's counters, read
// through stats once per scrape.
func (m *Metrics) WatchClientServer(stats func() ClientServerStats) {
	if m != nil {
		m.clients.watch(stats)
	}
}

func newClientServerCollector() *statsCollector[ClientServerStats] {
	type st = ClientServerStats
	return newStatsCollector(
		counter("gateway_client_lean_requests_total", "Client requests the lean server read and answered itself.",
			func(s st) int64 { return s.Served }),
		counter("gateway_client_handed_over_total",
			"Client connections the lean server handed to net/http's: HTTP/1.0, chunked or large uploads, upgrades, Expect, large heads, malformed requests.",
			func(s st) int64 { return s.HandedOver }),
	)
}
