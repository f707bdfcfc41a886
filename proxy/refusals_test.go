package proxy

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/metrics"
	"github.com/ratelimit-gateway/gateway/metrics/topk"
	"github.com/ratelimit-gateway/gateway/policies"
)

// TestRefusalsRecordTheDenyingPolicysKey: each 429 is told to Refusals
// with the policy that denied and the key it computed; admitted requests
// and a shadow policy's would-be denials are not.
func TestRefusalsRecordTheDenyingPolicysKey(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	perIP := testPolicy(t, "per-ip", "ip", limiter.Limit{Rate: 2, Period: time.Hour, Burst: 2}, policies.MissingReject)
	trial := testPolicy(t, "trial", "header:X-User", limiter.Limit{Rate: 1, Period: time.Hour, Burst: 1}, policies.MissingSkip)
	trial.Rule.Shadow = true
	snap := testSnapshot(t, nil, testRoute(t, "default", "/", up.URL, trial, perIP))
	engine, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	set, err := topk.New(topk.Config{}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler(t, snap, engine, set)
	statuses := map[int]int{}
	for range 5 {
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.RemoteAddr = "203.0.113.7:4000"
		req.Header.Set("X-User", "u1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		statuses[rec.Code]++
	}
	if statuses[200] != 2 || statuses[429] != 3 {
		t.Fatalf("statuses: got %v, want 2×200, 3×429", statuses)
	}
	top := set.Top("per-ip")
	if len(top) != 1 || top[0].Key != "203.0.113.7/32" || top[0].Count != 3 {
		t.Errorf("per-ip: got %v, want [203.0.113.7/32 ×3]", top)
	}
	if top := set.Top("trial"); top != nil {
		t.Errorf("shadow policy: got %v, want nothing recorded", top)
	}
}

func newHandler(t testing.TB, snap *policies.Snapshot, lim Limiter, refusals Refusals) *Handler {
	t.Helper()
	holder := &snapshotHolder{}
	holder.p.Store(snap)
	tr := newTestTransport()
	t.Cleanup(tr.CloseIdleConnections)
	cfg := Config{Snapshots: holder, Limiter: lim, Transport: tr, Logger: slog.New(slog.DiscardHandler), Metrics: metrics.New()}
	if refusals != nil {
		cfg.Refusals = refusals
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// BenchmarkDenyPath is a refused request through the Handler (route,
// identity, a local bucket already empty, metrics, the 429 body and
// headers) without Refusals, the anchor, and with a topk.Set: the hook's
// cost on the path a flood takes, from 1024 client networks each over its
// limit. The two handlers take turns in blocks of 64 requests within one
// loop (takeTurns, each timed by its thread's CPU clock); it reports each one's
// ns/op and their ratio (topk/none):
//
//	go test -run '^$' -bench BenchmarkDenyPath -benchmem ./proxy/
func BenchmarkDenyPath(b *testing.B) {
	const clients, block = 1024, 64
	addrs := make([]string, clients)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.%d.%d.1:4000", i>>8, i&0xff)
	}
	set, err := topk.New(topk.Config{}, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	var handlers [2]*Handler
	for i, refusals := range []Refusals{nil, set} {
		engine, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
		if err != nil {
			b.Fatal(err)
		}
		snap := testSnapshot(b, nil, testRoute(b, "default", "/", "http://127.0.0.1:1",
			testPolicy(b, "per-ip", "ip", limiter.Limit{Rate: 1, Period: time.Hour, Burst: 1}, policies.MissingReject)))
		handlers[i] = newHandler(b, snap, engine, refusals)
	}
	serve := func(h *Handler, i int) int {
		req := httptest.NewRequest(http.MethodGet, "/x", nil)
		req.RemoteAddr = addrs[i%clients]
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, h := range handlers {
		for i := range clients { // empty every bucket first (the upstream is never reached: 502)
			serve(h, i)
		}
	}
	b.Run("serial", func(b *testing.B) {
		i := 0
		var turn [2]func()
		for which, h := range handlers {
			turn[which] = func() {
				if code := serve(h, i); code != http.StatusTooManyRequests {
					b.Fatalf("status: got %d, want 429", code)
				}
				i++
			}
		}
		none, with := takeTurns(b, turn)
		if none > 0 && with > 0 {
			b.ReportMetric(none, "none-ns/op")
			b.ReportMetric(with, "topk-ns/op")
			b.ReportMetric(with/none, "topk/none")
		}
	})
	for _, v := range []struct {
		name string
		h    *Handler
	}{{"parallel/none", handlers[0]}, {"parallel/topk", handlers[1]}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if code := serve(v.h, i); code != http.StatusTooManyRequests {
						b.Errorf("status: got %d, want 429", code)
						return
					}
					i += 7
				}
			})
		})
	}
}
