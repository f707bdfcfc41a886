package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// decideKeys runs one decision per key through an engine on local, at one
// fixed instant, under a token bucket that never lets its keys go idle
// during the test.
func decideKeys(t *testing.T, local *limiter.Local, rule *limiter.Rule, keys int) {
	t.Helper()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	e, err := limiter.NewEngine(func() time.Time { return now }, local, nil)
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	lim := limiter.Limit{Rate: 10, Period: time.Hour}
	for i := range keys {
		v, err := e.Decide(t.Context(), []limiter.Check{{Rule: rule, Limit: lim, Key: fmt.Sprintf("client-%d", i)}})
		if err != nil || !v.Allowed {
			t.Fatalf("key %d: got allowed=%v err=%v, want admitted", i, v.Allowed, err)
		}
	}
}

func TestWatchLocal(t *testing.T) {
	rule := &limiter.Rule{Name: "per-ip", Algorithm: limiter.TokenBucket}

	t.Run("buckets", func(t *testing.T) {
		local := limiter.NewLocal(0)
		m := New()
		m.WatchLocal(local.Stats)
		decideKeys(t, local, rule, 10)
		scrape(t, m).wantValues(t, map[string]float64{
			"gateway_local_buckets":                      10,
			"gateway_local_bucket_evictions_total":       0,
			"gateway_local_bucket_expirations_total":     0,
			"gateway_local_inflight_keys":                0,
			"gateway_local_inflight_key_evictions_total": 0,
		})
	})

	t.Run("cap evicts", func(t *testing.T) {
		const capKeys, keys = 64, 300 // one bucket per shard
		local := limiter.NewLocal(capKeys)
		m := New()
		m.WatchLocal(local.Stats)
		decideKeys(t, local, rule, keys)
		e := scrape(t, m)
		buckets := e.value(t, "gateway_local_buckets", "")
		evictions := e.value(t, "gateway_local_bucket_evictions_total", "")
		if buckets > capKeys || evictions <= 0 {
			t.Fatalf("got %v buckets and %v evictions, want at most %d buckets and evictions > 0", buckets, evictions, capKeys)
		}
		// Nothing idles at one instant: every key is kept or evicted.
		if buckets+evictions != keys {
			t.Fatalf("got %v buckets + %v evictions, want %d", buckets, evictions, keys)
		}
		st := local.Stats()
		if float64(st.Evictions) != evictions || float64(st.Buckets) != buckets {
			t.Fatalf("scrape shows %v buckets, %v evictions; Stats %+v", buckets, evictions, st)
		}
	})

	t.Run("in flight", func(t *testing.T) {
		local := limiter.NewLocal(0)
		m := New()
		m.WatchLocal(local.Stats)
		g := limiter.BucketGroup{Policy: "streams", Limit: limiter.Limit{Rate: 2, Period: time.Second}, Algorithm: limiter.Concurrency}
		var holds []*limiter.Reservation
		for _, key := range []string{"acme", "acme", "globex"} {
			d, h := local.Reserve(time.Now(), g, key, 1)
			if !d.Allowed {
				t.Fatalf("%s: got denied, want a slot", key)
			}
			holds = append(holds, h)
		}
		if got := scrape(t, m).value(t, "gateway_local_inflight_keys", ""); got != 2 {
			t.Fatalf("got %v keys in flight, want 2", got)
		}
		for _, h := range holds {
			h.Release(t.Context())
		}
		if got := scrape(t, m).value(t, "gateway_local_inflight_keys", ""); got != 0 {
			t.Fatalf("after release: got %v keys in flight, want 0", got)
		}
	})
}
