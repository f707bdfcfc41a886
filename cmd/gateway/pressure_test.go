//go:build pressure

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/internal/clocktest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// The limit-under-pressure suite over real HTTP (issue 6, cases 1 to 3):
// a real gateway, a real redis-server, many concurrent connections on one
// key. Every row logs "admitted X, bound Y" so a run shows the figures.

// floodConfig is case 1: one GCRA key, 100/s burst 100, and the default
// redis settings (timeout 30ms, on_redis_error allow).
const floodConfig = `
server:
  listen: 127.0.0.1:0
redis:
  addrs: [%s]
routes:
  - name: flood
    match: {path_prefix: /}
    upstream: builtin:echo
    policies: [flood]
policies:
  flood: {key: header:X-Client, algorithm: gcra, rate: 100, per: 1s, burst: 100}
`

// TestPressureFloodKeepsSharedLimit is case 1: 256 connections on one key
// with a healthy Redis must neither lift the limit nor open the breaker.
func TestPressureFloodKeepsSharedLimit(t *testing.T) {
	const (
		rate, burst = 100, 100
		conns       = 256
		loadFor     = 2500 * time.Millisecond
	)
	s := redistest.Start(t)
	g := startGateway(t, "gateway", writePressureConfig(t, fmt.Sprintf(floodConfig, s.Addr())))
	c := clienttest.New(t, conns)
	if r := mustSend(t, c, "GET", g.base+"/", "X-Client", "warm-up"); r.status != http.StatusOK {
		t.Fatalf("warm-up: got %d %s, want 200", r.status, r.body)
	}
	from := g.logLen()

	res := httpFlood(c, g.base+"/", []string{"X-Client", "one-key"}, conns, loadFor, 1_000_000)
	if res.err != nil {
		t.Fatalf("a request failed: %v", res.err)
	}
	f := summarize(res.answers)
	upper, lower := bucketLimits(rate, burst, f)
	// A check whose reply came after the 30 ms timeout is answered 429
	// (overloaded) though Redis may have spent a unit on it: on a machine
	// too busy to read Redis's replies in time, each such answer lowers the
	// floor by one. The log shows how many there were.
	lower -= float64(f.overloaded)
	opened := g.countLog(from, "circuit breaker opened")
	t.Logf("gcra %d/s burst %d, %d connections, default redis settings: admitted %d, bound %.1f (burst + rate × %s + %d), floor %.0f (95%% over %s, less %d overloaded); "+
		"%d requests, %d limited, other %v, latency p50 %s p99 %s; breaker opened %d times",
		rate, burst, conns, f.admitted, upper, f.outer.Round(time.Millisecond), pressureSlack, lower, f.inner.Round(time.Millisecond), f.overloaded,
		len(res.answers), f.limited, f.other, f.p50.Round(time.Millisecond), f.p99.Round(time.Millisecond), opened)

	if float64(f.admitted) > upper {
		t.Errorf("admitted %d, want at most %.1f (burst %d + %d/s × %s + %d)", f.admitted, upper, burst, rate, f.outer, pressureSlack)
	}
	if opened > 0 {
		t.Errorf("the circuit breaker opened %d times with a healthy Redis, want 0", opened)
	}
	if len(f.other) > 0 {
		t.Errorf("got answers other than 200 and 429: %v", f.other)
	}
	// The floor means something only if the flood asked for far more.
	if float64(len(res.answers)) < 3*upper {
		t.Fatalf("sent %d requests for a bound of %.0f: want at least 3×, or the limit was not saturated (machine too slow)", len(res.answers), upper)
	}
	if float64(f.admitted) < lower {
		t.Errorf("admitted %d, want at least %.0f (95%% of burst %d + %d/s × %s, less %d overloaded)", f.admitted, lower, burst, rate, f.inner, f.overloaded)
	}
}

// localConfig is case 2: local token buckets, one at 100/s burst 10 and one
// at 10 a minute.
const localConfig = `
server:
  listen: 127.0.0.1:0
routes:
  - name: fast
    match: {path_prefix: /fast}
    upstream: builtin:echo
    policies: [fast]
  - name: slow
    match: {path_prefix: /slow}
    upstream: builtin:echo
    policies: [slow]
policies:
  fast: {key: "header:X-Client", rate: 100, per: 1s, burst: 10}
  slow: {key: "header:X-Client", rate: 10, per: 1m}
`

// TestPressureLocalTokenBucket is case 2: a local token bucket under 64
// connections admits no more than its bound and tells the truth about when
// to retry.
func TestPressureLocalTokenBucket(t *testing.T) {
	const conns = 64
	g := startGateway(t, "gateway", writePressureConfig(t, localConfig))
	c := clienttest.New(t, conns)

	t.Run("100/s burst 10", func(t *testing.T) {
		const rate, burst = 100, 10
		res := httpFlood(c, g.base+"/fast", []string{"X-Client", "one-key"}, conns, 2*time.Second, 1_000_000)
		if res.err != nil {
			t.Fatalf("a request failed: %v", res.err)
		}
		f := summarize(res.answers)
		upper, lower := bucketLimits(rate, burst, f)
		// One token every 10ms: no denial may say more (retry_after_ms is
		// rounded up; 1ms more absorbs float rounding of the delay).
		var longMs int64
		var long int
		for _, a := range res.answers {
			if a.status == http.StatusTooManyRequests {
				longMs = max(longMs, a.retryMs)
				if a.retryMs > 11 {
					long++
				}
			}
		}
		t.Logf("token_bucket %d/s burst %d, %d connections: admitted %d, bound %.1f (burst + rate × %s + %d), floor %.0f (95%% over %s); %d requests, %d limited, other %v; longest retry_after_ms %d (want ≤ 11)",
			rate, burst, conns, f.admitted, upper, f.outer.Round(time.Millisecond), pressureSlack, lower, f.inner.Round(time.Millisecond),
			len(res.answers), f.limited, f.other, longMs)
		if float64(len(res.answers)) < 3*upper {
			t.Fatalf("sent %d requests for a bound of %.0f: want at least 3×, or the limit was not saturated", len(res.answers), upper)
		}
		if float64(f.admitted) > upper {
			t.Errorf("admitted %d, want at most %.1f (burst %d + %d/s × %s + %d)", f.admitted, upper, burst, rate, f.outer, pressureSlack)
		}
		if float64(f.admitted) < lower {
			t.Errorf("admitted %d, want at least %.0f (95%% of burst %d + %d/s × %s)", f.admitted, lower, burst, rate, f.inner)
		}
		if long > 0 {
			t.Errorf("got %d 429s with retry_after_ms above 11 (longest %d), want none: a token comes every 10ms", long, longMs)
		}
		if len(f.other) > 0 {
			t.Errorf("got answers other than 200 and 429: %v", f.other)
		}
	})

	t.Run("10/min Retry-After after a burst", func(t *testing.T) {
		// 64 connections take the burst of 10 at once and keep asking for
		// 1.5s; then one more request. A token comes every 6s, so no 429
		// may say more than 6 (retry_after_ms: 6000, and 1 for float
		// rounding of the delay).
		res := httpFlood(c, g.base+"/slow", []string{"X-Client", "burst-key"}, conns, 1500*time.Millisecond, 1_000_000)
		if res.err != nil {
			t.Fatalf("a request failed: %v", res.err)
		}
		last := mustSend(t, c, "GET", g.base+"/slow", "X-Client", "burst-key")
		f := summarize(res.answers)
		upper := 10 + 10*f.outer.Minutes() + pressureSlack
		longest, long := 0, 0
		var longMs int64
		for _, a := range res.answers {
			if a.status != http.StatusTooManyRequests {
				continue
			}
			longest, longMs = max(longest, a.retryAfter), max(longMs, a.retryMs)
			if a.retryAfter > 6 || a.retryMs > 6001 {
				long++
			}
		}
		t.Logf("token_bucket 10/min, %d connections for %s: admitted %d, bound %.1f; %d limited, other %v; longest Retry-After %d s, retry_after_ms %d (want ≤ 6 s, 6001); "+
			"the request after: %d, Retry-After %q",
			conns, f.outer.Round(time.Millisecond), f.admitted, upper, f.limited, f.other, longest, longMs, last.status, last.header.Get("Retry-After"))
		if float64(f.admitted) > upper {
			t.Errorf("admitted %d, want at most %.1f (burst 10 + 10/min × %s + %d)", f.admitted, upper, f.outer, pressureSlack)
		}
		if f.admitted < 10 {
			t.Errorf("admitted %d, want the burst of 10", f.admitted)
		}
		if long > 0 {
			t.Errorf("got %d 429s saying to retry in more than 6s (longest Retry-After %d, retry_after_ms %d), want none: one token comes every 6s", long, longest, longMs)
		}
		if ra, err := strconv.Atoi(last.header.Get("Retry-After")); last.status != http.StatusTooManyRequests || err != nil || ra > 6 {
			t.Errorf("the request after the burst: got %d with Retry-After %q, want 429 with Retry-After at most 6", last.status, last.header.Get("Retry-After"))
		}
		if len(f.other) > 0 {
			t.Errorf("got answers other than 200 and 429: %v", f.other)
		}
	})
}

// twoPoliciesConfig is case 3: a route per algorithm with a per-second
// policy (4/s) and an hourly quota (10 per hour) of that algorithm, both
// keyed on X-Client. on_redis_error: deny, so that a Redis failure shows
// as a 503 and can never add admissions; a generous timeout, so that only
// the refund race can fail these rows (case 1 has its own test).
const twoPoliciesConfig = `
server:
  listen: 127.0.0.1:0
redis:
  addrs: [%s]
  timeout: 500ms
routes:
  - {name: gcra, match: {path_prefix: /gcra}, upstream: "builtin:echo", policies: [rps-gcra, hourly-gcra]}
  - {name: fixed, match: {path_prefix: /fixed_window}, upstream: "builtin:echo", policies: [rps-fixed, hourly-fixed]}
  - {name: sliding, match: {path_prefix: /sliding_window}, upstream: "builtin:echo", policies: [rps-sliding, hourly-sliding]}
policies:
  rps-gcra:       {key: "header:X-Client", algorithm: gcra, rate: 4, per: 1s, on_redis_error: deny}
  hourly-gcra:    {key: "header:X-Client", algorithm: gcra, rate: 10, per: 1h, on_redis_error: deny}
  rps-fixed:      {key: "header:X-Client", algorithm: fixed_window, rate: 4, per: 1s, on_redis_error: deny}
  hourly-fixed:   {key: "header:X-Client", algorithm: fixed_window, rate: 10, per: 1h, on_redis_error: deny}
  rps-sliding:    {key: "header:X-Client", algorithm: sliding_window, rate: 4, per: 1s, on_redis_error: deny}
  hourly-sliding: {key: "header:X-Client", algorithm: sliding_window, rate: 10, per: 1h, on_redis_error: deny}
`

// TestPressureTwoPoliciesOverHTTP is case 3: 4/s and 10 per hour on one
// route, flooded by 8 and by 64 clients for 2.5s. The per-second limit
// lets 12 or more through in that time (gcra: 4 + 4/s; sliding window:
// waves at 0, 1s and 2s; fixed window: two whole windows and at least a
// quarter of a third), so exactly the hourly quota's 10 must pass; no
// request may be refused by the hourly quota before those 10 passed; and
// afterwards the hourly quota answers only when it is really used up.
func TestPressureTwoPoliciesOverHTTP(t *testing.T) {
	const quota = 10
	s := redistest.Start(t)
	g := startGateway(t, "gateway", writePressureConfig(t, fmt.Sprintf(twoPoliciesConfig, s.Addr())))
	c := clienttest.New(t, 64)
	for _, alg := range []string{"gcra", "fixed_window", "sliding_window"} {
		if r := mustSend(t, c, "GET", g.base+"/"+alg, "X-Client", "warm-up"); r.status != http.StatusOK {
			t.Fatalf("%s warm-up: got %d %s, want 200", alg, r.status, r.body)
		}
	}
	for _, alg := range []string{"gcra", "fixed_window", "sliding_window"} {
		for _, clients := range []int{8, 64} {
			t.Run(fmt.Sprintf("%s/%d_clients", alg, clients), func(t *testing.T) {
				short := map[string]string{"gcra": "gcra", "fixed_window": "fixed", "sliding_window": "sliding"}[alg]
				hourly := "hourly-" + short
				key := fmt.Sprintf("client-%d", clients)
				if alg == "fixed_window" {
					clocktest.WaitPastHourEdge(10 * time.Second)
				}
				from := g.logLen()
				res := httpFlood(c, g.base+"/"+alg, []string{"X-Client", key}, clients, 2500*time.Millisecond, 1_000_000)
				if res.err != nil {
					t.Fatalf("a request failed: %v", res.err)
				}
				f := summarize(res.answers)

				// The k-th admission was decided no earlier than the k-th
				// earliest send of an admitted request: a 429 from the
				// hourly quota answered before the quota-th such send was
				// decided while the quota was not used up.
				var admittedSends []time.Time
				for _, a := range res.answers {
					if a.status == http.StatusOK {
						admittedSends = append(admittedSends, a.sent)
					}
				}
				sort.Slice(admittedSends, func(i, j int) bool { return admittedSends[i].Before(admittedSends[j]) })
				var early, longestEarly int
				for _, a := range res.answers {
					if a.status != http.StatusTooManyRequests || a.policy != hourly {
						continue
					}
					if len(admittedSends) < quota || a.recv.Before(admittedSends[quota-1]) {
						early++
						longestEarly = max(longestEarly, a.retryAfter)
					}
				}
				after, tries := afterFlood(t, c, g.base+"/"+alg, key)
				t.Logf("%s 4/s + %d/h, %d clients, %s: admitted %d, want %d; %d requests, %d limited, other %v; "+
					"429s from %s before its quota was used: %d (longest Retry-After %ds); breaker opened %d times; "+
					"afterwards (%d tries): %d from %q, Retry-After %d",
					alg, quota, clients, f.outer.Round(time.Millisecond), f.admitted, quota, len(res.answers), f.limited, f.other,
					hourly, early, longestEarly, g.countLog(from, "circuit breaker opened"),
					tries, after.status, after.policy, after.retryAfter)

				if f.admitted != quota {
					t.Errorf("admitted %d, want exactly the hourly quota %d (the per-second limit allows 12 or more in %s)", f.admitted, quota, f.outer.Round(time.Millisecond))
				}
				if early > 0 {
					t.Errorf("the hourly quota refused %d requests (Retry-After up to %ds) before %d were admitted, want none", early, longestEarly, quota)
				}
				if len(f.other) > 0 {
					t.Errorf("got answers other than 200 and 429 with a healthy Redis: %v", f.other)
				}
				switch {
				case f.admitted < quota && after.status != http.StatusOK:
					t.Errorf("lockout: after the flood, with %d of %d used, got %d from %q with Retry-After %ds, want 200 once the per-second limit allows",
						f.admitted, quota, after.status, after.policy, after.retryAfter)
				case f.admitted >= quota && (after.status != http.StatusTooManyRequests || after.policy != hourly):
					t.Errorf("after the flood, with the quota used up: got %d from %q, want 429 from %s", after.status, after.policy, hourly)
				}
			})
		}
	}
}

// afterFlood asks again until the per-second limit no longer refuses (it
// says when in retry_after_ms), for at most 3s, and returns the first
// answer that is not the per-second limit's 429.
func afterFlood(t *testing.T, c *http.Client, url, key string) (answer, int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for tries := 1; ; tries++ {
		a, err := pressureSend(c, url, []string{"X-Client", key})
		if err != nil {
			t.Fatal(err)
		}
		if a.status != http.StatusTooManyRequests || !strings.HasPrefix(a.policy, "rps-") || time.Now().After(deadline) {
			return a, tries
		}
		// Wait on the limit's clock: it said when to come back.
		<-time.After(time.Duration(min(max(a.retryMs, 1), 1000)) * time.Millisecond)
	}
}

// postFloodConfig: a local token bucket in front of the echo upstream,
// which answers each request with its body.
const postFloodConfig = `
server:
  listen: 127.0.0.1:0
routes:
  - name: upload
    match: {path_prefix: /}
    upstream: builtin:echo
    policies: [uploads]
policies:
  uploads: {key: header:X-Client, rate: 100, per: 1s, burst: 25}
`

// TestPressurePostFloodHeldBodies: 64 connections on one key post small
// bodies, which the gateway reads whole before forwarding (proxy's hold).
// Every admitted request reaches the upstream with its own bytes and
// length, none another's, and the limit holds as it does for GETs.
func TestPressurePostFloodHeldBodies(t *testing.T) {
	const (
		rate, burst = 100, 25
		conns       = 64
		loadFor     = 1500 * time.Millisecond
	)
	g := startGateway(t, "gateway", writePressureConfig(t, postFloodConfig))
	c := clienttest.New(t, conns)
	var (
		mu      sync.Mutex
		answers []answer
		wrong   []string
		wg      sync.WaitGroup
	)
	stop := time.Now().Add(loadFor)
	for i := range conns {
		wg.Go(func() {
			var mine []answer
			var bad []string
			for seq := 0; time.Now().Before(stop) && seq < 100_000; seq++ {
				// A body of its own, from 1 byte to 3 KiB.
				body := fmt.Sprintf("client %d request %d ", i, seq)
				body += strings.Repeat("x", (i*97+seq*31)%3000)
				req, err := http.NewRequest(http.MethodPost, g.base+"/upload", strings.NewReader(body))
				if err != nil {
					bad = append(bad, err.Error())
					break
				}
				req.Header.Set("X-Client", "one-key")
				a := answer{sent: time.Now()}
				res, err := c.Do(req)
				if err != nil {
					bad = append(bad, err.Error())
					break
				}
				var echo struct {
					ContentLength int64  `json:"content_length"`
					Body          string `json:"body"`
				}
				if res.StatusCode == http.StatusOK {
					if err := json.NewDecoder(res.Body).Decode(&echo); err != nil || echo.Body != body || echo.ContentLength != int64(len(body)) {
						bad = append(bad, fmt.Sprintf("client %d request %d: upstream saw %d bytes declared as %d (%v)", i, seq, len(echo.Body), echo.ContentLength, err))
					}
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				a.status, a.recv = res.StatusCode, time.Now()
				mine = append(mine, a)
			}
			mu.Lock()
			defer mu.Unlock()
			answers = append(answers, mine...)
			wrong = append(wrong, bad...)
		})
	}
	wg.Wait()
	f := summarize(answers)
	upper, _ := bucketLimits(rate, burst, f)
	t.Logf("token_bucket %d/s burst %d, %d connections posting 1 B to 3 KiB: admitted %d, bound %.1f (burst + rate × %s + %d); %d requests, %d limited, other %v, latency p50 %s p99 %s",
		rate, burst, conns, f.admitted, upper, f.outer.Round(time.Millisecond), pressureSlack, len(answers), f.limited, f.other, f.p50.Round(time.Millisecond), f.p99.Round(time.Millisecond))
	if len(wrong) > 0 {
		t.Fatalf("%d requests went wrong, first: %s", len(wrong), wrong[0])
	}
	if float64(f.admitted) > upper {
		t.Errorf("admitted %d, want at most %.1f", f.admitted, upper)
	}
	if len(f.other) > 0 {
		t.Errorf("got answers other than 200 and 429: %v", f.other)
	}
	if float64(len(answers)) < 3*upper {
		t.Fatalf("sent %d requests for a bound of %.0f: want at least 3×, or the limit was not saturated", len(answers), upper)
	}
	if f.admitted < burst {
		t.Errorf("admitted %d, want at least the burst %d", f.admitted, burst)
	}
}
