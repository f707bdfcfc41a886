package metrics

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// After a known sequence of calls, one scrape over HTTP shows exactly what
// was counted.
func TestScrapeShowsExactValues(t *testing.T) {
	m := New()
	m.SetModels([]string{"gpt-4o", "gpt-4o-mini"})
	for range 3 {
		m.Request("api", OutcomeAllowed)
	}
	m.Request("api", OutcomeLimited)
	m.Request("login", OutcomeFailedClosed)
	m.Request("none", OutcomeInvalid)

	m.Policy("api", "per-ip", OutcomeAllowed)
	m.Policy("api", "per-ip", OutcomeAllowed)
	m.Policy("api", "per-ip", OutcomeLimited)
	m.Policy("api", "tenant-rpm", OutcomeShadowLimited)
	m.Policy("api", "tenant-rpm", OutcomeDelayed)

	m.Decision(BackendLocal, 20*time.Microsecond)
	m.Decision(BackendLocal, 40*time.Microsecond)
	m.Decision(BackendLocal, 2*time.Millisecond)
	m.Decision(BackendRedis, 300*time.Microsecond)

	m.Upstream("api", 200, 10*time.Millisecond)
	m.Upstream("api", 204, 30*time.Millisecond)
	m.Upstream("api", 404, 5*time.Millisecond)
	m.Upstream("api", 502, 2*time.Second)
	m.Upstream("api", 101, time.Millisecond)
	m.Upstream("api", 0, 30*time.Second) // no response: counted, not timed

	m.InFlight(1)
	m.InFlight(1)
	m.InFlight(1)
	m.InFlight(-1)

	m.LLMCharge("acme", "gpt-4o", 100, 1500)
	m.LLMCharge("acme", "gpt-4o", 250, 2500)
	m.LLMCharge("globex", "gpt-4o-mini", 7, 1)
	m.LLMCharge("globex", "gpt-4o-mini", -5, -3) // negatives count as nothing

	m.Reload(true)
	m.Reload(false)
	m.Reload(false)
	old := sha256.Sum256([]byte("old config"))
	cur := sha256.Sum256([]byte("new config"))
	at := time.Date(2026, 12, 1, 10, 0, 0, 500_000_000, time.UTC)
	m.ConfigLoaded(old, at.Add(-time.Hour))
	m.ConfigLoaded(cur, at)

	e := scrape(t, m)
	tests := []struct {
		name, labels string
		want         float64
	}{
		{"gateway_requests_total", "route=api,outcome=allowed", 3},
		{"gateway_requests_total", "route=api,outcome=limited", 1},
		{"gateway_requests_total", "route=login,outcome=failed_closed", 1},
		{"gateway_requests_total", "route=none,outcome=invalid", 1},
		{"gateway_policy_decisions_total", "route=api,policy=per-ip,outcome=allowed", 2},
		{"gateway_policy_decisions_total", "route=api,policy=per-ip,outcome=limited", 1},
		{"gateway_policy_decisions_total", "route=api,policy=tenant-rpm,outcome=shadow_limited", 1},
		{"gateway_policy_decisions_total", "route=api,policy=tenant-rpm,outcome=delayed", 1},
		{"gateway_upstream_responses_total", "route=api,class=1xx", 1},
		{"gateway_upstream_responses_total", "route=api,class=2xx", 2},
		{"gateway_upstream_responses_total", "route=api,class=4xx", 1},
		{"gateway_upstream_responses_total", "route=api,class=5xx", 1},
		{"gateway_upstream_responses_total", "route=api,class=error", 1},
		{"gateway_requests_in_flight", "", 2},
		{"gateway_llm_tokens_total", "tenant=acme,model=gpt-4o", 350},
		{"gateway_llm_cost_usd_total", "tenant=acme,model=gpt-4o", 0.004},
		{"gateway_llm_tokens_total", "tenant=globex,model=gpt-4o-mini", 7},
		{"gateway_llm_cost_usd_total", "tenant=globex,model=gpt-4o-mini", 0.000001},
		{"gateway_config_reloads_total", "result=success", 1},
		{"gateway_config_reloads_total", "result=failure", 2},
		{"gateway_config_info", "hash=" + fmt.Sprintf("%x", cur[:6]), 1},
		{"gateway_config_last_reload_timestamp_seconds", "", float64(at.Unix()) + 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name+"{"+tt.labels+"}", func(t *testing.T) {
			if got := e.value(t, tt.name, tt.labels); !near(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}

	for name, want := range map[string]int{
		"gateway_requests_total":           4,
		"gateway_policy_decisions_total":   4,
		"gateway_upstream_responses_total": 5, // no 3xx: classes appear when seen
		"gateway_config_info":              1, // only the active config
		"gateway_llm_tokens_total":         2,
	} {
		if got := len(e[name].GetMetric()); got != want {
			t.Errorf("%s: got %d series, want %d:\n%s", name, got, want, e.series(name))
		}
	}

	t.Run("decision histogram", func(t *testing.T) {
		h := e.histogram(t, "gateway_decision_duration_seconds", "backend=local")
		if h.GetSampleCount() != 3 {
			t.Fatalf("got count %d, want 3", h.GetSampleCount())
		}
		if got, want := h.GetSampleSum(), 0.00206; !near(got, want) {
			t.Fatalf("got sum %v, want %v", got, want)
		}
		for _, b := range []struct {
			le   float64
			want uint64
		}{{.00001, 0}, {.000025, 1}, {.00005, 2}, {.001, 2}, {.0025, 3}, {.1, 3}} {
			if got := bucket(t, h, b.le); got != b.want {
				t.Fatalf("le=%g: got %d, want %d", b.le, got, b.want)
			}
		}
		if got := len(h.GetBucket()); got != len(DecisionBuckets)+1 {
			t.Fatalf("got %d buckets, want %d and +Inf", got, len(DecisionBuckets))
		}
		r := e.histogram(t, "gateway_decision_duration_seconds", "backend=redis")
		if r.GetSampleCount() != 1 || !near(r.GetSampleSum(), 0.0003) {
			t.Fatalf("redis: got count %d sum %v, want 1 and 0.0003", r.GetSampleCount(), r.GetSampleSum())
		}
	})
	t.Run("upstream histogram", func(t *testing.T) {
		h := e.histogram(t, "gateway_upstream_duration_seconds", "route=api")
		if h.GetSampleCount() != 5 {
			t.Fatalf("got count %d, want 5 (the request without a response is not timed)", h.GetSampleCount())
		}
		if sum := h.GetSampleSum(); sum < 2.045 || sum > 2.047 {
			t.Fatalf("got sum %v, want 2.046 (10ms+30ms+5ms+2s+1ms)", sum)
		}
		if got := bucket(t, h, .01); got != 3 {
			t.Fatalf("le=0.01: got %d, want 3", got)
		}
	})
	t.Run("runtime and process collectors", func(t *testing.T) {
		for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
			if _, ok := e[name]; !ok {
				t.Fatalf("no %s: the Go and process collectors are not registered", name)
			}
		}
	})
	t.Run("nothing watched", func(t *testing.T) {
		for _, name := range []string{"gateway_redis_round_trips_total", "gateway_local_buckets"} {
			if _, ok := e[name]; ok {
				t.Fatalf("got %s without WatchRedis/WatchLocal, want none", name)
			}
		}
	})
}

// Before any config is loaded there is no config series, and the reload
// results exist at zero so that the first failure shows in increase().
func TestFreshMetrics(t *testing.T) {
	e := scrape(t, New())
	if _, ok := e["gateway_config_info"]; ok {
		t.Fatalf("got gateway_config_info before ConfigLoaded, want none")
	}
	for _, r := range []string{"success", "failure"} {
		if got := e.value(t, "gateway_config_reloads_total", "result="+r); got != 0 {
			t.Fatalf("result=%s: got %v, want 0", r, got)
		}
	}
	if got := e.value(t, "gateway_requests_in_flight", ""); got != 0 {
		t.Fatalf("in flight: got %v, want 0", got)
	}
}

// Two Metrics never share a series: each has its own registry.
func TestMetricsHaveTheirOwnRegistry(t *testing.T) {
	a, b := New(), New()
	a.Request("api", OutcomeAllowed)
	if _, ok := scrape(t, b).find(t, "gateway_requests_total", "route=api,outcome=allowed"); ok {
		t.Fatalf("a request counted on one Metrics shows on another")
	}
	if a.Registry() == b.Registry() || a.Registry() == nil {
		t.Fatalf("got shared or nil registries")
	}
}

// A nil *Metrics is what a gateway without metrics passes: every method is
// a no-op and its handler answers 404.
func TestNilMetricsIsSafe(t *testing.T) {
	var m *Metrics
	m.Request("api", OutcomeAllowed)
	m.Policy("api", "per-ip", OutcomeLimited)
	m.Decision(BackendRedis, time.Millisecond)
	m.Upstream("api", 200, time.Millisecond)
	m.InFlight(1)
	m.LLMCharge("acme", "gpt-4o", 1, 1)
	m.Reload(true)
	m.ConfigLoaded([32]byte{1}, time.Now())
	m.WatchRedis(func() RedisStats { return RedisStats{} })
	m.WatchLocal(func() limiter.LocalStats { return limiter.LocalStats{} })
	if m.Registry() != nil {
		t.Fatalf("got a registry from nil Metrics, want nil")
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("got status %d, want 404", rec.Code)
	}
}

// Model names come from request bodies: only the models the config names
// keep their own series, whatever clients send first. 80 made-up names from
// one tenant, sent before any real call, leave the configured models their
// series; every made-up name, a name too long or not UTF-8, and any model
// before SetModels is "other".
func TestModelLabelIsBounded(t *testing.T) {
	m := New()
	m.LLMCharge("acme", "gpt-4o", 1000, 0) // before the config named it
	m.SetModels([]string{"gpt-4o", "gpt-4o-mini", strings.Repeat("x", 129)})
	for i := range 80 {
		m.LLMCharge("acme", fmt.Sprintf("made-up-%02d", i), 1, 0)
	}
	m.LLMCharge("acme", strings.Repeat("x", 129), 8, 0)
	m.LLMCharge("acme", "bad\xffutf8", 16, 0)
	m.LLMCharge("acme", "gpt-4o", 10, 1)
	m.LLMCharge("globex", "gpt-4o-mini", 5, 0)
	m.LLMCharge("globex", "made-up-99", 4, 0)

	e := scrape(t, m)
	if got := e.value(t, "gateway_llm_tokens_total", "tenant=acme,model=other"); got != 1000+80+8+16 {
		t.Fatalf("acme other: got %v, want 1104", got)
	}
	if got := e.value(t, "gateway_llm_tokens_total", "tenant=globex,model=other"); got != 4 {
		t.Fatalf("globex other: got %v, want 4", got)
	}
	if got := e.value(t, "gateway_llm_tokens_total", "tenant=acme,model=gpt-4o"); got != 10 {
		t.Fatalf("acme gpt-4o: got %v, want 10", got)
	}
	if got := e.value(t, "gateway_llm_tokens_total", "tenant=globex,model=gpt-4o-mini"); got != 5 {
		t.Fatalf("globex gpt-4o-mini: got %v, want 5", got)
	}
	if got := e.value(t, "gateway_llm_cost_usd_total", "tenant=acme,model=gpt-4o"); !near(got, 0.000001) {
		t.Fatalf("gpt-4o cost: got %v, want 0.000001", got)
	}
	models := map[string]bool{}
	for _, s := range e["gateway_llm_tokens_total"].GetMetric() {
		for _, lp := range s.GetLabel() {
			if lp.GetName() == "model" {
				models[lp.GetValue()] = true
			}
		}
	}
	if len(models) != 3 || !models["gpt-4o"] || !models["gpt-4o-mini"] || !models[OtherModel] {
		t.Fatalf("model labels: got %v, want gpt-4o, gpt-4o-mini and other", models)
	}
}

// No label carries anything but what a caller passed or a constant of this
// package: no key, no address, nothing derived from a request.
func TestLabelValuesAreOnlyWhatWasPassed(t *testing.T) {
	m := New()
	passed := map[string][]string{
		"route":   {"api", "chat"},
		"outcome": {OutcomeAllowed, OutcomeLimited, OutcomeShadowLimited, OutcomeFailedOpen, OutcomeFailedClosed, OutcomeError, OutcomeDelayed},
		"policy":  {"per-ip", "tenant-tokens"},
		"backend": {BackendLocal, BackendRedis},
		"tenant":  {"acme"},
		"model":   {"gpt-4o"},
	}
	constants := map[string][]string{
		"class":  {"1xx", "2xx", "3xx", "4xx", "5xx", "error"},
		"result": {"success", "failure", "wrong", "throttled"},
		"model":  {OtherModel},
		"mode":   {"allow", "deny", "local"},
	}
	for _, route := range passed["route"] {
		for _, o := range passed["outcome"] {
			m.Request(route, o)
			for _, p := range passed["policy"] {
				m.Policy(route, p, o)
			}
		}
		for _, status := range []int{0, 100, 200, 301, 429, 503, 600, -1} {
			m.Upstream(route, status, time.Millisecond)
		}
	}
	for _, b := range passed["backend"] {
		m.Decision(b, time.Millisecond)
	}
	m.LLMCharge("acme", "gpt-4o", 1, 1)
	digest := sha256.Sum256([]byte("config"))
	m.ConfigLoaded(digest, time.Now())
	m.Reload(true)
	m.WatchRedis(func() RedisStats { return RedisStats{RoundTrips: 1} })

	allowed := map[string]map[string]bool{"hash": {fmt.Sprintf("%x", digest[:6]): true}}
	for _, set := range []map[string][]string{passed, constants} {
		for k, vs := range set {
			if allowed[k] == nil {
				allowed[k] = map[string]bool{}
			}
			for _, v := range vs {
				allowed[k][v] = true
			}
		}
	}
	for name, f := range scrape(t, m) {
		if !strings.HasPrefix(name, "gateway_") {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, lp := range s.GetLabel() {
				if !allowed[lp.GetName()][lp.GetValue()] {
					t.Errorf("%s: label %s=%q was never passed", name, lp.GetName(), lp.GetValue())
				}
			}
		}
	}
}

// Many goroutines counting at once lose nothing (and -race finds no race in
// the children caches).
func TestConcurrentUseCountsEverything(t *testing.T) {
	m := New()
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			route := fmt.Sprintf("r%d", g%3)
			for i := range each {
				m.InFlight(1)
				m.Request(route, OutcomeAllowed)
				m.Policy(route, "p", OutcomeAllowed)
				m.Decision(BackendLocal, time.Microsecond)
				m.Upstream(route, 200+i%2, time.Millisecond)
				m.LLMCharge("acme", fmt.Sprintf("m%d", i%80), 1, 1)
				m.InFlight(-1)
			}
		})
	}
	wg.Wait()
	e := scrape(t, m)
	var requests, tokens float64
	for _, s := range e["gateway_requests_total"].GetMetric() {
		requests += s.GetCounter().GetValue()
	}
	for _, s := range e["gateway_llm_tokens_total"].GetMetric() {
		tokens += s.GetCounter().GetValue()
	}
	if requests != goroutines*each || tokens != goroutines*each {
		t.Fatalf("got %v requests and %v tokens, want %d each", requests, tokens, goroutines*each)
	}
	if got := e.histogram(t, "gateway_decision_duration_seconds", "backend=local").GetSampleCount(); got != goroutines*each {
		t.Fatalf("got %d decisions, want %d", got, goroutines*each)
	}
	if got := e.value(t, "gateway_requests_in_flight", ""); got != 0 {
		t.Fatalf("got %v in flight, want 0", got)
	}
}
