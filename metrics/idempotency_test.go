package metrics

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/proxy/idempotency"
)

// The in-process idempotency store's bytes, bound, done markers and dropped
// responses are what a scrape shows.
func TestWatchIdempotency(t *testing.T) {
	s, err := idempotency.NewLocal(time.Now, idempotency.LocalConfig{MaxBytes: idempotency.MinMaxBytes})
	if err != nil {
		t.Fatal(err)
	}
	m := New()
	m.WatchIdempotency(func() IdempotencyStats { return IdempotencyStats(s.Stats()) })
	ctx := context.Background()
	terms := idempotency.Terms{LockTTL: time.Second, ReplayTTL: time.Hour}
	for i := range 4 { // 4 × 32 KiB into 64 KiB: some responses become markers
		c, err := s.Begin(ctx, fmt.Sprint("k", i), terms)
		if err != nil || c.Owner == nil {
			t.Fatalf("Begin(k%d): %+v, %v", i, c, err)
		}
		if err := c.Owner.Complete(ctx, &idempotency.Record{Status: 201, Body: make([]byte, 32<<10)}); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.BodiesDropped == 0 {
		t.Fatalf("stats %+v: want some responses dropped", st)
	}
	scrape(t, m).wantValues(t, map[string]float64{
		"gateway_idempotency_keys":                 4,
		"gateway_idempotency_done_markers":         float64(st.Markers),
		"gateway_idempotency_bytes":                float64(st.Bytes),
		"gateway_idempotency_max_bytes":            idempotency.MinMaxBytes,
		"gateway_idempotency_bodies_dropped_total": float64(st.BodiesDropped),
		"gateway_idempotency_full_total":           0,
	})
}
