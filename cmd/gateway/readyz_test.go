package main

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// readyzConfig is a gateway on s with a fail-closed shared policy and an
// admin listener of its own.
func readyzConfig(t *testing.T, s *redistest.Server) string {
	return writePressureConfig(t, `
server: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0"}
redis: {addrs: [`+s.Addr()+`]}
routes:
  - {name: api, match: {path_prefix: /}, upstream: builtin:echo, policies: [users]}
policies:
  users: {key: header:X-User, algorithm: gcra, rate: 1000000, per: 1s, on_redis_error: deny}
`)
}

// waitReady polls /readyz until it answers want, for at most d.
func waitReady(t *testing.T, adm string, want int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		code, body := adminDo(t, "GET", adm+"/readyz", "")
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %s, want %d within %s", code, body, want, d)
		}
		time.Sleep(20 * time.Millisecond) // polling a background check on the wall clock
	}
}

// /readyz with a fail-closed policy: an instance that has not reached Redis
// since it started is not ready (its peers may be serving); once it has, a
// Redis outage leaves it ready, as it leaves every instance of the fleet
// (the affected requests get 503 with Retry-After from each of them).
func TestReadyzThroughARedisOutage(t *testing.T) {
	s := redistest.Start(t)
	s.Kill()
	g := startGateway(t, "gw", readyzConfig(t, s))
	adm := g.adminBase(t)
	code, body := adminDo(t, "GET", adm+"/readyz", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), `redis has not answered since start and policy \"users\" fails closed`) {
		t.Fatalf("/readyz before Redis ever answered: %d %s, want 503 naming the policy", code, body)
	}
	s.Restart()
	// The background check PINGs a silent node every HealthInterval.
	waitReady(t, adm, http.StatusOK, 2*time.Second)
	c := newTestClient(t)
	if r := mustSend(t, c, "GET", g.base+"/", "X-User", "u1"); r.status != http.StatusOK {
		t.Fatalf("request with Redis up: %d %s", r.status, r.body)
	}
	s.Kill()
	for i := range 20 {
		if r := mustSend(t, c, "GET", g.base+"/", "X-User", "u1"); r.status != http.StatusServiceUnavailable {
			t.Fatalf("request %d with Redis down: %d %s, want 503 (fails closed)", i, r.status, r.body)
		}
		if code, body := adminDo(t, "GET", adm+"/readyz", ""); code != http.StatusOK {
			t.Fatalf("/readyz %d with Redis down after it answered: %d %s, want 200", i, code, body)
		}
		time.Sleep(50 * time.Millisecond) // spreading the probes over the breaker's cooldown and the background check
	}
}

// A flood of readiness probes while the proxy is measured: no probe answers
// non-2xx with a healthy Redis, and the probes cost Redis (almost) nothing:
// readiness reads what the limiter knows, it sends no command.
func TestReadyzProbeFloodSendsRedisNothing(t *testing.T) {
	s := redistest.Start(t)
	g := startGateway(t, "gw", readyzConfig(t, s))
	adm := g.adminBase(t)
	waitReady(t, adm, http.StatusOK, 2*time.Second)
	c := clienttest.New(t, 128)
	const clients, probers, d = 16, 128, 2 * time.Second
	alone := httpFlood(c, g.base+"/", []string{"X-User", "u1"}, clients, d, 1_000_000)

	redistest.ResetStats(t, s.Addr())
	var probes, bad atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	pc := clienttest.New(t, probers)
	for range probers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				resp, err := pc.Get(adm + "/readyz")
				probes.Add(1)
				if err != nil {
					bad.Add(1)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					bad.Add(1)
				}
			}
		})
	}
	with := httpFlood(c, g.base+"/", []string{"X-User", "u1"}, clients, d, 1_000_000)
	wg.Wait()
	// What a probe asking Redis would send (the scripts' own GET, SET and
	// TIME are counted by INFO too, as commands of their own).
	sent := redistest.CommandCount(t, s.Addr(), "ping", "exists", "hello", "echo", "info", "select", "client|setinfo")
	perProbe := float64(sent) / float64(probes.Load())
	ok := func(f floodAnswers) (n int) {
		statuses := map[int]int{}
		for _, a := range f.answers {
			statuses[a.status]++
			if a.status == http.StatusOK {
				n++
			}
		}
		t.Logf("statuses %v", statuses)
		return n
	}
	t.Logf("%d probes in %s from %d clients: %d non-2xx; Redis commands a probe could cause (PING, EXISTS, HELLO…): %d (%.5f a probe); "+
		"proxy alone %d requests (%d 200), with the probes %d (%d 200): ratio %.2f (loaded shared machine)",
		probes.Load(), d, probers, bad.Load(), sent, perProbe,
		len(alone.answers), ok(alone), len(with.answers), ok(with), float64(len(with.answers))/float64(max(1, len(alone.answers))))
	if bad.Load() > 0 {
		t.Errorf("%d probes answered non-2xx (or failed) with a healthy Redis, want 0", bad.Load())
	}
	// ≪ 1: a probe that asked Redis would send one command (0.78 a probe
	// measured, its failures aside); what is left are the gateway's own
	// reconnections and background checks under the proxy flood.
	if perProbe > 0.05 {
		t.Errorf("%.4f Redis commands a probe, want at most 0.05", perProbe)
	}
	if with.err != nil || alone.err != nil {
		t.Errorf("proxy flood errors: %v, %v", alone.err, with.err)
	}
}
