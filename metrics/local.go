package metrics

import "github.com/ratelimit-gateway/gateway/limiter"

// WatchLocal exposes the local buckets' state, read through stats once per
// scrape (pass the limiter.Local's Stats method). A later call replaces the
// function; nil stops exposing them.
func (m *Metrics) WatchLocal(stats func() limiter.LocalStats) {
	if m != nil {
		m.local.watch(stats)
	}
}

func newLocalCollector() *statsCollector[limiter.LocalStats] {
	type st = limiter.LocalStats
	return newStatsCollector(
		gauge("gateway_local_buckets", "Local token buckets kept now, across every policy (including idle ones not yet swept).",
			func(s st) int { return s.Buckets }),
		counter("gateway_local_bucket_evictions_total",
			"Local buckets dropped to stay under server.max_keys_per_policy: a sign the cap is too low or keys are being sprayed.",
			func(s st) uint64 { return s.Evictions }),
		counter("gateway_local_bucket_expirations_total", "Idle local buckets swept (full again, so dropping them changes nothing).",
			func(s st) uint64 { return s.Expired }),
		gauge("gateway_local_inflight_keys", "Keys with requests in flight under in-process concurrency policies.",
			func(s st) int { return s.SlotKeys }),
		counter("gateway_local_inflight_key_evictions_total",
			"Keys whose in-flight count was dropped to stay under the cap (each may then admit more than its limit).",
			func(s st) uint64 { return s.SlotEvictions }),
	)
}
