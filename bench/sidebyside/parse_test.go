package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

func TestScrapeMetrics(t *testing.T) {
	exposition := `# HELP gateway_redis_round_trips_total decisions that asked Redis
# TYPE gateway_redis_round_trips_total counter
gateway_redis_round_trips_total 1.234e+06
# TYPE gateway_redis_overloaded_total counter
gateway_redis_overloaded_total 3
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, exposition) }))
	defer srv.Close()
	got, err := scrapeMetrics(t.Context(), srv.URL, roundTripsMetric, overloadedMetric)
	if err != nil || len(got) != 2 || got[0] != 1.234e6 || got[1] != 3 {
		t.Errorf("got %v, %v; want [1.234e+06 3], nil", got, err)
	}
	if _, err := scrapeMetrics(t.Context(), srv.URL, "other_total"); err == nil {
		t.Error("got no error for a missing metric, want one")
	}
}

func TestCommandCallsAndDelta(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_time:calls=10,usec=3\r\ncmdstat_info:calls=4,usec=100\r\n"
	calls, err := commandField(info, "calls")
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
	var lines strings.Builder
	m, err := parseBenchOutput(&lines, memoryBench, out)
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
		if got, ok := m[c.sub][c.unit]; !ok || got != c.want {
			t.Errorf("%s %s: got %v (%v), want %v", c.sub, c.unit, got, ok, c.want)
		}
	}
	if n := strings.Count(lines.String(), "\n"); n != 2 {
		t.Errorf("got %d result lines copied, want 2:\n%s", n, lines.String())
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
	runs := map[string][]sample{
		tUpstream:      {{RPS: 100000, P99: 2 * time.Millisecond}},
		tNginxLimitReq: {{RPS: 40000, P99: 4 * time.Millisecond}, {RPS: 30000, P99: 4 * time.Millisecond}, {RPS: 50000, P99: 4 * time.Millisecond}},
		tGatewayLocal:  {{RPS: 20000, P99: 5 * time.Millisecond, Requests: 1000, CPU: 40 * time.Millisecond}},
		tGatewayTLS:    {{RPS: 15000, Requests: 1000, CPU: 60 * time.Millisecond}},
		tGatewayDenyRed: {{Requests: 600, Non2xx: 600, Delta: &counters{RoundTrips: 2}},
			{Requests: 400, Non2xx: 400, Delta: &counters{RoundTrips: 3}}},
	}
	open := map[string][]openPoint{
		tUpstream:      {{pct: 50, p99: time.Millisecond}, {pct: 25, p99: 9 * time.Millisecond}},
		tNginxLimitReq: {{pct: 50, p99: 3 * time.Millisecond}},
		tGatewayLocal:  {{pct: 50, p99: 6 * time.Millisecond}},
	}
	got := map[string]ratio{}
	for _, r := range append(ratios(runs), openRatios(open)...) {
		got[r.name] = r
	}
	for name, want := range map[string]float64{
		"gateway-local/nginx-limit_req":                    0.5, // over nginx's median
		"p99-added/nginx-p99-added":                        1.5,
		"redis-calls-per-denied":                           0.005,
		"open-p99-added@50% gateway-local/nginx-limit_req": 2.5,
		"gateway-local-tls/gateway-local":                  0.75,
		"cpu-per-req gateway-local-tls/gateway-local":      1.5, // 60 µs a request over 40
	} {
		if r := got[name]; !r.ok || r.value != want {
			t.Errorf("%s: got %v (ok %v), want %v", name, r.value, r.ok, want)
		}
	}
	if r := got["gateway-local/caddy"]; r.ok {
		t.Errorf("gateway-local/caddy without caddy: got %v, want n/a", r.value)
	}
	var b strings.Builder
	writeRatios(&b, runs, open, map[string]ratio{"local-bytes-per-key": {value: 100, ok: true}})
	for _, line := range []string{
		"RATIO gateway-local/nginx-limit_req 0.500",
		"TARGET gateway-local/nginx-limit_req 0.500 >= 0.45 PASS",
		"TARGET p99-added/nginx-p99-added 1.500 <= 1.25 MISS",
		"TARGET redis-calls-per-denied 0.005000 <= 0.1 PASS",
		"TARGET gateway-local/caddy n/a >= 1.6 MISS",
		"TARGET local-bytes-per-key 100.0 <= 256 PASS",
		"TARGET open-p99-added@50% gateway-local/nginx-limit_req 2.500 <= 2 MISS",
	} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("missing line %q in:\n%s", line, b.String())
		}
	}
}

// A run is one line of Go's benchmark format, named so that benchstat
// -col /build sets a base build beside the new one.
func TestSampleLine(t *testing.T) {
	r := sample{RPS: 1234.5, P50: 500 * time.Microsecond, P99: 2 * time.Millisecond, Requests: 3700, Non2xx: 2,
		CPU: 37 * time.Millisecond, Delta: &counters{RoundTrips: 10, Calls: map[string]int64{"evalsha": 10, "time": 10}, ScriptUsec: 40}}
	for _, c := range []struct{ name, want string }{
		{tGatewayRedis, "BenchmarkClosed/target=gateway-redis/build=new 3700 1234 req/s 500.0 µs-p50 2000.0 µs-p99 2 non2xx 0 errors 10.00 cpu-µs/req 10 redis-round-trips 20 redis-commands 40 redis-script-µs 0 overloaded"},
		{basePrefix + tGatewayRedis, "BenchmarkClosed/target=gateway-redis/build=base 3700"},
		{tCaddy, "BenchmarkClosed/target=caddy 3700"},
	} {
		if got := r.line(c.name); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: got %q, want it to start %q", c.name, got, c.want)
		}
	}
}

// An HTTP/2 or gRPC run's line carries its servers' CPU a request only
// when perf counted it (grpc-direct's server is the benchmark's process).
func TestH2SampleLine(t *testing.T) {
	for _, c := range []struct {
		s    h2Sample
		want string
	}{
		{h2Sample{rate: 4000, n: 12000, cpu: 1800 * time.Millisecond}, "BenchmarkH2/target=grpc-gateway 1 250000 ns/op 4000 req/s 150.00 cpu-µs/req"},
		{h2Sample{rate: 4000, n: 12000}, "BenchmarkH2/target=grpc-gateway 1 250000 ns/op 4000 req/s"},
	} {
		if got := c.s.line("grpc-gateway"); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

func TestParseTaskClock(t *testing.T) {
	for _, c := range []struct {
		out  string
		want time.Duration
		err  bool
	}{
		{"1234.50,msec,task-clock,2094936,100.00,0.209,CPUs utilized\n", 1234500 * time.Microsecond, false},
		{"<not counted>,msec,task-clock,0,100.00,,\n", 0, false},
		{"Error: no such process\n", 0, true},
	} {
		got, err := parseTaskClock(c.out)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("%q: got %v, %v; want %v, error %v", c.out, got, err, c.want, c.err)
		}
	}
}

func TestPinning(t *testing.T) {
	for _, c := range []struct {
		mode     string
		cpus     int
		gen, srv string
		err      bool
	}{
		{"auto", 2, "", "", false},
		{"auto", 4, "taskset -c 3", "taskset -c 0-2", false},
		{"on", 2, "taskset -c 1", "taskset -c 0", false},
		{"on", 1, "", "", true},
		{"off", 8, "", "", false},
		{"maybe", 8, "", "", true},
	} {
		gen, srv, _, err := pinning(c.mode, c.cpus)
		if strings.Join(gen, " ") != c.gen || strings.Join(srv, " ") != c.srv || (err != nil) != c.err {
			t.Errorf("%s on %d: got %q, %q, %v; want %q, %q, error %v", c.mode, c.cpus, gen, srv, err, c.gen, c.srv, c.err)
		}
	}
}

// The default run leaves the curves out; "curves" and "tls" are theirs; a
// wrong name is an error.
func TestSelectSpecs(t *testing.T) {
	all, err := selectSpecs("")
	if err != nil || len(all) != len(specs)-len(curveTargets)+2 {
		t.Fatalf("got %d specs, %v; want %d", len(all), err, len(specs)-len(curveTargets)+2)
	}
	curves, err := selectSpecs("curves")
	if err != nil || len(curves) != len(curveTargets) {
		t.Errorf("curves: got %d specs, %v; want %d", len(curves), err, len(curveTargets))
	}
	if tls, err := selectSpecs("tls"); err != nil || len(tls) != len(tlsTargets) {
		t.Errorf("tls: got %d specs, %v; want %d", len(tls), err, len(tlsTargets))
	}
	if _, err := selectSpecs("gateway-local,nginx"); err == nil {
		t.Error("got no error for an unknown target, want one")
	}
}

func TestParsePercents(t *testing.T) {
	got, err := parsePercents("75, 25,50")
	if err != nil || fmt.Sprint(got) != "[25 50 75]" {
		t.Errorf("got %v, %v; want [25 50 75]", got, err)
	}
	for _, bad := range []string{"0", "101", "50,50", "x"} {
		if _, err := parsePercents(bad); err == nil {
			t.Errorf("%q: got no error, want one", bad)
		}
	}
}
