package metrics

// IdempotencyStats is the in-process idempotency store's state: keys held
// or recorded, done markers, counted bytes and their bound, responses
// dropped to stay under it, and keys refused because the store was full.
type IdempotencyStats struct {
	Keys, Markers                        int
	Bytes, MaxBytes, BodiesDropped, Full int64
}

// WatchIdempotency exposes the in-process idempotency store's state, read
// through stats once per scrape. A later call replaces the function; nil
// stops exposing it.
func (m *Metrics) WatchIdempotency(stats func() IdempotencyStats) {
	if m != nil {
		m.idem.watch(stats)
	}
}

func newIdemCollector() *statsCollector[IdempotencyStats] {
	type st = IdempotencyStats
	return newStatsCollector(
		gauge("gateway_idempotency_keys", "Idempotency keys held or recorded in the in-process store.",
			func(s st) int { return s.Keys }),
		gauge("gateway_idempotency_done_markers", "Records kept without their response (done markers): duplicates get 409.",
			func(s st) int { return s.Markers }),
		gauge("gateway_idempotency_bytes", "Bytes the in-process idempotency store counts: keys, kept responses and their headers.",
			func(s st) int64 { return s.Bytes }),
		gauge("gateway_idempotency_max_bytes", "The in-process idempotency store's bound (server.idempotency_max_bytes).",
			func(s st) int64 { return s.MaxBytes }),
		counter("gateway_idempotency_bodies_dropped_total",
			"Kept responses dropped to stay under server.idempotency_max_bytes, each leaving a done marker. Rising: raise the bound or lower replay_ttl.",
			func(s st) int64 { return s.BodiesDropped }),
		counter("gateway_idempotency_full_total",
			"Idempotency keys refused because holds and done markers fill the in-process store (answered as on_redis_error says).",
			func(s st) int64 { return s.Full }),
	)
}
