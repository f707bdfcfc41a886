package main

import (
	"strings"
	"testing"
	"time"
)

// The parsers only: nothing here starts a server.

const wrkDeny = `Running 3s test @ http://127.0.0.1:38475/
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   812.00us  300.12us   12.50ms   91.00%
    Req/Sec   100.00k     3.00k  110.00k    80.00%
  Latency Distribution
     50%  740.00us
     75%  850.00us
     90%    1.00ms
     99%    2.31ms
  301234 requests in 3.00s, 60.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 5
  Non-2xx or 3xx responses: 301233
Requests/sec: 100411.33
Transfer/sec:     20.00MB
`

const wrkAllow = `Running 1s test @ http://127.0.0.1:33881/
  1 threads and 64 connections
  Latency Distribution
     50%    1.50s
     75%    1.60s
     90%    1.70s
     99%    1.02m
  12 requests in 1.00s, 1.00KB read
Requests/sec:     12.00
Transfer/sec:      1.00KB
`

func TestParseWrk(t *testing.T) {
	tests := []struct {
		name string
		out  string
		want sample
	}{
		{"deny flood", wrkDeny, sample{RPS: 100411.33, P50: 740 * time.Microsecond, P99: 2310 * time.Microsecond,
			Requests: 301234, Non2xx: 301233, Errors: 7}},
		{"no non-2xx line, seconds and minutes", wrkAllow, sample{RPS: 12, P50: 1500 * time.Millisecond, P99: 61200 * time.Millisecond,
			Requests: 12}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseWrk(tt.out)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseWrkIncomplete(t *testing.T) {
	out := strings.Replace(wrkDeny, "Latency Distribution", "", 1)
	out = strings.Replace(out, "     99%    2.31ms\n", "", 1)
	if _, err := parseWrk(out); err == nil {
		t.Error("got no error for a report without the 99th percentile, want one")
	}
}

func TestFindMetric(t *testing.T) {
	exposition := `# HELP gateway_redis_round_trips_total decisions that asked Redis
# TYPE gateway_redis_round_trips_total counter
gateway_redis_round_trips_total_extra 3
gateway_redis_round_trips_total 1.234e+06
gateway_requests_total{outcome="allowed",route="bench"} 9
`
	got, err := findMetric(strings.NewReader(exposition), roundTripsMetric)
	if err != nil || got != 1.234e6 {
		t.Errorf("got %v, %v; want 1.234e+06, nil", got, err)
	}
	if _, err := findMetric(strings.NewReader("other 1\n"), roundTripsMetric); err == nil {
		t.Error("got no error for a missing metric, want one")
	}
}

func TestCommandCallsAndDelta(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_time:calls=10,usec=3\r\ncmdstat_info:calls=4,usec=100\r\n"
	calls, err := commandCalls(info)
	if err != nil {
		t.Fatal(err)
	}
	if calls["evalsha"] != 10 || calls["time"] != 10 || calls["info"] != 4 || len(calls) != 3 {
		t.Fatalf("got %v, want evalsha 10, time 10, info 4", calls)
	}
	usec, err := commandField(info, "usec")
	if err != nil || usec["evalsha"] != 50 || usec["time"] != 3 {
		t.Fatalf("got usec %v, %v; want evalsha 50, time 3", usec, err)
	}
	before := counters{RoundTrips: 5, Calls: map[string]int64{"evalsha": 10, "time": 10}}
	after := counters{RoundTrips: 8, Calls: map[string]int64{"evalsha": 13, "time": 13, "get": 3}}
	d := after.sub(before)
	if d.RoundTrips != 3 || d.commands() != 9 {
		t.Errorf("got %v round trips, %d commands; want 3, 9", d.RoundTrips, d.commands())
	}
}

func TestParseBenchOutput(t *testing.T) {
	out := `goos: linux
BenchmarkLocalKeyMemory/cap=2M/keys=1M-2         	       1	1126843983 ns/op	       103.8 B/key	   1000000 keys
BenchmarkLocalKeyMemory/cap=100k/keys=1M-2       	       1	1479071745 ns/op	       118.0 B/cap-key	         1.024 heap-vs-2cap	         1.430 heap-vs-cap	    100032 keys
PASS
`
	m, err := parseBenchOutput(memoryBench, out)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sub, unit string
		want      float64
	}{
		{"cap=2M/keys=1M", "B/key", 103.8},
		{"cap=100k/keys=1M", "B/cap-key", 118},
		{"cap=100k/keys=1M", "heap-vs-cap", 1.43},
	} {
		if got, ok := m.metric(c.sub, c.unit); !ok || got != c.want {
			t.Errorf("%s %s: got %v (%v), want %v", c.sub, c.unit, got, ok, c.want)
		}
	}
	if len(m.lines) != 2 {
		t.Errorf("got %d result lines, want 2", len(m.lines))
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v): got %v, want %v", tt.in, got, tt.want)
		}
	}
}

// Every round runs every target once, and the first five rounds start
// with five different targets.
func TestRoundOrder(t *testing.T) {
	var targets []*target
	for _, s := range specs {
		targets = append(targets, &target{name: s.name})
	}
	firsts := map[string]bool{}
	for round := range 5 {
		order := roundOrder(targets, round)
		seen := map[string]bool{}
		for _, tg := range order {
			seen[tg.name] = true
		}
		if len(order) != len(targets) || len(seen) != len(targets) {
			t.Fatalf("round %d: got %d targets (%d distinct), want %d", round, len(order), len(seen), len(targets))
		}
		firsts[order[0].name] = true
	}
	if len(firsts) != 5 {
		t.Errorf("got %d distinct first targets in 5 rounds, want 5", len(firsts))
	}
}

func TestRatiosAndGoals(t *testing.T) {
	by := map[string]summary{
		tUpstream:       {rps: 100000, p99: 2 * time.Millisecond},
		tNginxLimitReq:  {rps: 40000, p99: 4 * time.Millisecond},
		tGatewayLocal:   {rps: 20000, p99: 5 * time.Millisecond},
		tGatewayDenyRed: {requests: 1000, non2xx: 1000, counted: true, delta: counters{RoundTrips: 5}},
	}
	got := map[string]ratio{}
	for _, r := range ratios(by) {
		got[r.name] = r
	}
	for name, want := range map[string]float64{
		"gateway-local/nginx-limit_req": 0.5,
		"p99-added/nginx-p99-added":     1.5,
		"redis-calls-per-denied":        0.005,
	} {
		if r := got[name]; !r.ok || r.value != want {
			t.Errorf("%s: got %v (ok %v), want %v", name, r.value, r.ok, want)
		}
	}
	if r := got["gateway-local/caddy"]; r.ok {
		t.Errorf("gateway-local/caddy without caddy: got %v, want n/a", r.value)
	}
	var b strings.Builder
	checkGoals(&b, got)
	for _, line := range []string{
		"TARGET gateway-local/nginx-limit_req 0.500 >= 0.45 PASS",
		"TARGET p99-added/nginx-p99-added 1.500 <= 1.25 MISS",
		"TARGET redis-calls-per-denied 0.005000 <= 0.1 PASS",
		"TARGET gateway-local/caddy n/a >= 1.6 MISS",
	} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("missing line %q in:\n%s", line, b.String())
		}
	}
}
