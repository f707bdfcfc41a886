package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/bench/openloop"
	"github.com/ratelimit-gateway/gateway/bench/plot"
)

// The open loop's reduction and report only: nothing here starts a server.

func us(v int) time.Duration { return time.Duration(v) * time.Microsecond }

// point is one round of one point: p50 and p99 in µs.
func point(rate, p50, p99 int) openloop.Result {
	return openloop.Result{Rate: rate, Duration: 5 * time.Second, Requests: rate * 5, OK: rate * 5, SentRate: float64(rate), P50: us(p50), P99: us(p99)}
}

// testRun is three rounds at 25 % and 50 % of 4,000/s: the upstream,
// nginx-limit_req and gateway-local, with gateway-local missing at 25 %.
func testRun() *openRun {
	return &openRun{
		capacity: 4000, slowest: tGatewayLocal, pcts: []int{25, 50},
		rates:   map[int]int{25: 1000, 50: 2000},
		targets: []string{tUpstream, tNginxLimitReq, tGatewayLocal},
		results: map[openKey][]openloop.Result{
			{tUpstream, 25}:      {point(1000, 100, 400), point(1000, 120, 900), point(1000, 110, 500)},
			{tNginxLimitReq, 25}: {point(1000, 200, 600), point(1000, 210, 700), point(1000, 190, 650)},
			{tUpstream, 50}:      {point(2000, 100, 500), point(2000, 100, 520), point(2000, 100, 480)},
			{tNginxLimitReq, 50}: {point(2000, 150, 700), point(2000, 150, 760), point(2000, 150, 740)},
			{tGatewayLocal, 50}: {point(2000, 300, 900), point(2000, 310, 990), func() openloop.Result {
				r := point(2000, 290, 5000) // one bad round: the median keeps it out
				r.SentRate, r.Non2xx, r.Errors, r.FirstError, r.Requests = 1800, 3, 1, "429 Too Many Requests: overloaded", 9000
				return r
			}()},
		},
	}
}

func TestSummarizeOpen(t *testing.T) {
	sums := summarizeOpen(testRun())
	var got []string
	for _, s := range sums {
		got = append(got, s.target)
	}
	if want := []string{tUpstream, tNginxLimitReq, tUpstream, tNginxLimitReq, tGatewayLocal}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("rows %v, want %v (rate order, then the targets', the unmeasured point left out)", got, want)
	}
	ng25, gw50 := sums[1], sums[4]
	if ng25.p50 != us(200) || ng25.p99 != us(650) || ng25.p50Added != us(90) || ng25.p99Added != us(150) || !ng25.addedOK {
		t.Errorf("nginx at 25%%: %+v, want medians 200/650 µs, added 90/150 µs over the upstream's 110/500", ng25)
	}
	// Added is the median of the rounds' differences: 900−500, 990−520,
	// 5000−480 (the difference of the medians would be 990−500).
	if gw50.p99 != us(990) || gw50.p99Added != us(470) || gw50.p50Added != us(200) {
		t.Errorf("gateway at 50%%: p99 %v added %v p50 added %v, want 990 µs, 470 µs, 200 µs", gw50.p99, gw50.p99Added, gw50.p50Added)
	}
	if gw50.requests != 29000 || gw50.minRequests != 9000 || gw50.non2xx != 3 || gw50.errors != 1 || gw50.rounds != 3 {
		t.Errorf("gateway at 50%% sums: %+v", gw50)
	}
	if math.Abs(gw50.sentRatio-0.9) > 1e-9 || gw50.firstError != "429 Too Many Requests: overloaded" {
		t.Errorf("sent ratio %v (want the slowest round's 0.9), first error %q", gw50.sentRatio, gw50.firstError)
	}
	if up := sums[0]; up.p99Added != 0 || !up.addedOK {
		t.Errorf("the upstream adds nothing to itself: %+v", up)
	}

	// Two rounds the machine made slow for every target: each round's
	// difference keeps what the target adds (200, 300, 200 µs), where the
	// medians' difference (6,300 − 6,000) would take the slow rounds' noise.
	slow := testRun()
	slow.results[openKey{tUpstream, 50}] = []openloop.Result{point(2000, 100, 500), point(2000, 100, 6000), point(2000, 100, 7000)}
	slow.results[openKey{tNginxLimitReq, 50}] = []openloop.Result{point(2000, 150, 700), point(2000, 150, 6300), point(2000, 150, 7200)}
	if ng := summarizeOpen(slow)[3]; ng.target != tNginxLimitReq || ng.p99Added != us(200) {
		t.Errorf("nginx at 50%% over two slow rounds: %+v, want p99 added 200 µs", ng)
	}

	// Without the upstream at a rate, nothing is added there; nor with a
	// round of it missing, which leaves no round to pair with.
	short := testRun()
	short.results[openKey{tUpstream, 50}] = short.results[openKey{tUpstream, 50}][:2]
	for _, s := range summarizeOpen(short) {
		if s.pct == 50 && s.target != tUpstream && s.addedOK {
			t.Errorf("%s at 50%% has an added latency with an upstream round missing", s.target)
		}
	}
	or := testRun()
	delete(or.results, openKey{tUpstream, 50})
	for _, s := range summarizeOpen(or) {
		if s.pct == 50 && s.addedOK {
			t.Errorf("%s at 50%% has an added latency without an upstream to subtract", s.target)
		}
	}
}

func TestOpenRatiosAndTarget(t *testing.T) {
	sums := summarizeOpen(testRun())
	rs := openRatios(sums, "")
	byName := map[string]ratio{}
	for _, r := range rs {
		byName[r.name] = r
	}
	gw := byName["open-p99-added@50% gateway-local/nginx-limit_req"]
	// median(400, 470, 4520) / median(200, 240, 260)
	if !gw.ok || math.Abs(gw.value-470.0/240.0) > 1e-9 {
		t.Errorf("gateway-local at 50%%: %+v, want %v", gw, 470.0/240.0)
	}
	if r := byName["open-p99-added@50% caddy/nginx-limit_req"]; r.ok {
		t.Errorf("caddy was not measured: %+v", r)
	}
	var out bytes.Buffer
	checkGoals(&out, map[string]ratio{gw.name: gw})
	if !strings.Contains(out.String(), "TARGET open-p99-added@50% gateway-local/nginx-limit_req 1.958 <= 2 PASS\n") {
		t.Errorf("TARGET line missing or wrong:\n%s", out.String())
	}

	// nginx adding nothing at 50 %: no ratio, and a WARN that says so.
	or := testRun()
	or.results[openKey{tNginxLimitReq, 50}] = []openloop.Result{point(2000, 100, 450), point(2000, 100, 450), point(2000, 100, 450)}
	sums = summarizeOpen(or)
	for _, r := range openRatios(sums, "") {
		if r.ok {
			t.Errorf("%s computed over a nginx that adds nothing: %v", r.name, r.value)
		}
	}
	warns := strings.Join(openAnomalies(sums, 10000), "\n")
	if !strings.Contains(warns, "nginx-limit_req at 50% (2000/s): p99 added -0.050ms, not above the upstream's") {
		t.Errorf("no WARN for a nginx that adds nothing:\n%s", warns)
	}

	// A gateway p99 below the upstream's gives a negative ratio, which
	// passes its TARGET: a WARN says it is noise.
	or = testRun()
	or.results[openKey{tGatewayLocal, 50}] = []openloop.Result{point(2000, 100, 420), point(2000, 100, 420), point(2000, 100, 420)}
	sums = summarizeOpen(or)
	warns = strings.Join(openAnomalies(sums, 10000), "\n")
	if !strings.Contains(warns, "gateway-local at 50% (2000/s): p99 added -0.080ms, below the upstream's") {
		t.Errorf("no WARN for a p99 below the upstream's:\n%s", warns)
	}
	if strings.Contains(warns, "nginx-limit_req at 50%") || strings.Contains(warns, "upstream at 50%") {
		t.Errorf("WARN for a point that adds what it should:\n%s", warns)
	}
}

func TestOpenAnomalies(t *testing.T) {
	warns := openAnomalies(summarizeOpen(testRun()), 5000)
	joined := strings.Join(warns, "\n")
	for _, want := range []string{
		"open loop gateway-local at 50% (2000/s): the generator sent 90% of the rate in its slowest round (9000 requests)",
		"open loop gateway-local at 50% (2000/s): 3 non-2xx and 1 failed requests, the first: 429 Too Many Requests: overloaded",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("missing WARN %q in:\n%s", want, joined)
		}
	}
	// 5,000 requests a round at 25 %, 10,000 at 50 % but for the gateway's
	// short round of 9,000, whose generator fell behind: asking for 9,500
	// flags the two points at 25 % (the gateway's already says why it is
	// short).
	if n := len(openAnomalies(summarizeOpen(testRun()), 9500)) - len(warns); n != 2 {
		t.Errorf("%d more WARNs for points under -open-samples, want 2", n)
	}
}

func TestWriteOpen(t *testing.T) {
	or := testRun()
	var out bytes.Buffer
	writeOpen(&out, or, summarizeOpen(or))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2+1+5 {
		t.Fatalf("%d lines, want a heading, a blank, the header and 5 rows:\n%s", len(lines), out.String())
	}
	if f := strings.Fields(lines[len(lines)-1]); strings.Join(f, " ") != "gateway-local 50% 2000 0.300 0.990 0.200 0.470 29000 9000 3 1 0.900" {
		t.Errorf("gateway row: %q", f)
	}
}

func TestParsePercents(t *testing.T) {
	got, err := parsePercents(" 75,25 ,50")
	if err != nil || len(got) != 3 || got[0] != 25 || got[2] != 75 {
		t.Errorf("parsePercents: %v %v, want [25 50 75]", got, err)
	}
	for _, bad := range []string{"", "0", "101", "50,50", "half", "25,,50", "-5"} {
		if _, err := parsePercents(bad); err == nil {
			t.Errorf("parsePercents(%q): no error", bad)
		}
	}
}

func TestPointDuration(t *testing.T) {
	o := openOptions{minDuration: 2 * time.Second, samples: 10000}
	for rate, want := range map[int]time.Duration{
		100000: 2 * time.Second,          // the minimum
		880:    11500 * time.Millisecond, // 10,100 / 880 = 11.48 s, up to 100 ms
		2000:   5100 * time.Millisecond,  // 10,100 / 2,000 = 5.05 s: never a request short
		601:    16900 * time.Millisecond, // 10,100 / 601 = 16.81 s (16.6 s would send 9,977)
		10:     openMaxPoint,             // capped
	} {
		if got := o.pointDuration(rate); got != want {
			t.Errorf("pointDuration(%d/s) = %v, want %v", rate, got, want)
		}
	}
}

func TestResolvePin(t *testing.T) {
	if p, err := resolvePin("auto", 2); err != nil || p.generator != nil || p.servers != nil {
		t.Errorf("auto on 2 CPUs: %+v %v, want no pinning", p, err)
	}
	p, err := resolvePin("auto", 8)
	if err != nil || strings.Join(p.generator, " ") != "taskset -c 7" || strings.Join(p.servers, " ") != "taskset -c 0-6" {
		t.Errorf("auto on 8 CPUs: %+v %v", p, err)
	}
	p, err = resolvePin("on", 2)
	if err != nil || strings.Join(p.generator, " ") != "taskset -c 1" || strings.Join(p.servers, " ") != "taskset -c 0" {
		t.Errorf("on with 2 CPUs: %+v %v", p, err)
	}
	if p, err := resolvePin("off", 64); err != nil || p.generator != nil {
		t.Errorf("off: %+v %v", p, err)
	}
	for _, bad := range []struct {
		mode string
		cpus int
	}{{"on", 1}, {"yes", 4}, {"", 4}} {
		if _, err := resolvePin(bad.mode, bad.cpus); err == nil {
			t.Errorf("-pin %q on %d CPUs: no error", bad.mode, bad.cpus)
		}
	}
}

// The charts of a run are SVG documents with a bar per target and a line
// per open-loop target but the upstream.
func TestRunCharts(t *testing.T) {
	sums := []summary{{name: tUpstream, rps: 200000, p50: us(150), p99: us(3000)}, {name: tGatewayLocal, rps: 22000, p50: us(2500), p99: us(8000)}}
	or := testRun()
	files := runCharts(sums, or, summarizeOpen(or))
	if len(files) != 2 || files[0].suffix != "" || files[1].suffix != "-openloop" {
		t.Fatalf("chart files %+v", files)
	}
	counts := func(cs []plot.Chart) map[string]int {
		var buf bytes.Buffer
		if err := plot.WriteSVG(&buf, cs...); err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		d := xml.NewDecoder(&buf)
		for {
			tok, err := d.Token()
			if err == io.EOF {
				return n
			}
			if err != nil {
				t.Fatalf("not XML: %v", err)
			}
			if se, ok := tok.(xml.StartElement); ok {
				n[se.Name.Local]++
			}
		}
	}
	// Closed loop: background, 2 rps bars + swatch, 4 latency bars + 2
	// swatches; no CPU chart, none measured.
	if c := counts(files[0].charts); c["rect"] != 1+3+6 {
		t.Errorf("closed-loop chart: %d rects, want 10", c["rect"])
	}
	// With the CPU time a request: 8 bars (4 parts, 2 targets) + 4 swatches.
	sums[1].cpu = runCPU{own: us(38), upstream: us(11), generator: us(9)}
	if c := counts(runCharts(sums, nil, nil)[0].charts); c["rect"] != 1+3+6+12 {
		t.Errorf("closed-loop chart with CPU: %d rects, want 22", c["rect"])
	}
	sums[1].cpu = runCPU{}
	// Open loop, two charts: nginx has 2 points (a line), the gateway 1 (a
	// marker, no line).
	if c := counts(files[1].charts); c["polyline"] != 2 || c["circle"] != 6 {
		t.Errorf("open-loop charts: %d polylines, %d markers; want 2 and 6", c["polyline"], c["circle"])
	}
	if l, ok := files[1].charts[0].(plot.Line); !ok || !strings.HasSuffix(l.XLabel, "(25, 50 % of gateway-local's 4000/s)") {
		t.Errorf("open-loop x label does not name the rates: %+v", files[1].charts[0])
	}
	if files := runCharts(sums, nil, nil); len(files) != 1 {
		t.Errorf("no open loop: %d chart files, want 1", len(files))
	}
}

func TestWriteBase(t *testing.T) {
	by := map[string]summary{
		tBare:                      {name: tBare, rps: 30000, p99: us(7000)},
		tGatewayLocal:              {name: tGatewayLocal, rps: 33000, p99: us(6000)},
		basePrefix + tGatewayLocal: {name: basePrefix + tGatewayLocal, rps: 30000, p99: us(8000)},
	}
	var out bytes.Buffer
	writeBase(&out, by, nil)
	s := out.String()
	for _, want := range []string{
		"BASE gateway-local rps new/base 1.100 p99 new/base 0.750\n",
		"BASE-RATIO gateway-local/bare-httputil base 1.000 new 1.100 new/base 1.100\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in:\n%s", want, s)
		}
	}
	if strings.Contains(s, "BASE gateway-redis") || strings.Contains(s, "base:gateway-local/") {
		t.Errorf("a line for a target without a base, or a ratio named after base:\n%s", s)
	}
}

// The generator process reads a rate's points as JSON and writes their
// results as JSON, in the points' order; points it cannot read are an
// error, not a run.
func TestRunGenerator(t *testing.T) {
	srv := func(body string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
		t.Cleanup(s.Close)
		return s
	}
	a, b := srv("a\n"), srv("b\n")
	point := func(url string) openloop.Config {
		return openloop.Config{URL: url, Rate: 50, Duration: 200 * time.Millisecond, Timeout: time.Second, Connections: 4}
	}
	in, err := json.Marshal(openloop.Interleaved{Points: []openloop.Config{point(a.URL), point(b.URL)}, Slice: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runGenerator(context.Background(), bytes.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	var rs []openloop.Result
	if err := json.Unmarshal(out.Bytes(), &rs); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results for 2 points: %q", len(rs), out.String())
	}
	for _, r := range rs {
		if r.Rate != 50 || r.Requests == 0 || r.OK != r.Requests || r.P50 <= 0 {
			t.Errorf("result %+v", r)
		}
	}
	good := `{"url":"http://127.0.0.1:1/","rate":5,"duration":1000000000,"timeout":1000000000,"connections":1}`
	for _, bad := range []string{``, `{}`, `{"points":[` + good + `],"burst":3}`, `{"points":[{"url":""}]}`, `{"points":[` + good + `],"slice":-1}`} {
		out.Reset()
		if err := runGenerator(context.Background(), strings.NewReader(bad), &out); err == nil || out.Len() > 0 {
			t.Errorf("points %q: err %v, output %q", bad, err, out.String())
		}
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// A point opens at most -connections connections and reuses them. The
// server holds every request 50 ms, so at 100 a second 5 are due at once:
// an unbounded generator opens a connection for each request due while the
// others are busy (and leaves each in TIME_WAIT when the point ends), where
// this one sends every request over 2, still on schedule, those that find
// both busy waiting for one.
func TestOpenPointBoundsConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	var served atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond) // the slow server under test
		served.Add(1)
		io.WriteString(w, "ok\n")
	}))
	srv.Listener.Close()
	srv.Listener = cl
	srv.Start()
	defer srv.Close()

	o := options{load: load{connections: 2}}
	c := pointConfig(o, &target{name: "slow", url: srv.URL}, 100, 500*time.Millisecond)
	in, err := json.Marshal(openloop.Interleaved{Points: []openloop.Config{c}, Slice: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runGenerator(context.Background(), bytes.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	var rs []openloop.Result
	if err := json.Unmarshal(out.Bytes(), &rs); err != nil || len(rs) != 1 {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	r := rs[0]
	// 0.5 s of warm-up and 0.5 s measured at 100 a second.
	if r.Requests < 40 || r.OK != r.Requests || served.Load() < int64(r.Requests)+40 {
		t.Fatalf("%d requests measured, %d served: %+v", r.Requests, served.Load(), r)
	}
	if n := cl.accepted.Load(); n > 2 || n < 1 || int64(r.Dials) != n {
		t.Errorf("%d connections accepted (the generator counted %d) for %d requests: want at most 2", n, r.Dials, served.Load())
	}
	// The bound queues requests in the generator; it does not slow its
	// schedule down to what 2 connections carry (40 a second).
	if r.SentRate < 80 {
		t.Errorf("sent %.0f a second of 100: the bound made the loop closed", r.SentRate)
	}
}
