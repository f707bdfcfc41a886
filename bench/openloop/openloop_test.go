package openloop

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"none", nil, 0.99, 0},
		{"one", ms(7), 0.5, 7 * time.Millisecond},
		{"median of four is the second", ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", hundred, 0.99, 99 * time.Millisecond},
		{"p999 of 100 is the largest", hundred, 0.999, 100 * time.Millisecond},
		{"q 0 is the smallest", ms(3, 5), 0, 3 * time.Millisecond},
		{"q 1 is the largest", ms(3, 5), 1, 5 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := Quantile(tt.sorted, tt.q); got != tt.want {
			t.Errorf("%s: Quantile(q=%v) = %v, want %v", tt.name, tt.q, got, tt.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var hits []hit
	// 101 requests 10 ms apart (100 a second over one second): 97 2xx with
	// latencies 1..97 ms, then a 429, a 503 and two without a response.
	for i := range 101 {
		h := hit{sent: t0.Add(time.Duration(i) * 10 * time.Millisecond), code: 200, latency: time.Duration(i+1) * time.Millisecond}
		switch i {
		case 97:
			h.code, h.err = 429, "429 Too Many Requests"
		case 98:
			h.code = 503
		case 99, 100:
			h.code, h.err = 0, "dial tcp: connection refused"
		}
		hits = append(hits, h)
	}
	// Results arrive in completion order, not send order.
	hits[0], hits[50] = hits[50], hits[0]
	r := summarize(Config{Rate: 100, Duration: time.Second}, hits)
	want := Result{Rate: 100, Duration: time.Second, Requests: 101, OK: 97, Non2xx: 2, Errors: 2,
		FirstError: "429 Too Many Requests", SentRate: 100,
		P50: 49 * time.Millisecond, P90: 88 * time.Millisecond, P99: 97 * time.Millisecond, P999: 97 * time.Millisecond, Max: 97 * time.Millisecond}
	if r != want {
		t.Errorf("summarize:\n got %+v\nwant %+v", r, want)
	}
	if empty := summarize(Config{Rate: 5}, nil); empty.Requests != 0 || empty.SentRate != 0 || empty.P99 != 0 {
		t.Errorf("no hits: %+v", empty)
	}
}

func TestConfigCheck(t *testing.T) {
	good := Config{URL: "http://127.0.0.1:1/", Rate: 10, Duration: time.Second, Timeout: time.Second, Connections: 4}
	if err := good.Check(); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"no url":          func(c *Config) { c.URL = "" },
		"zero rate":       func(c *Config) { c.Rate = 0 },
		"negative rate":   func(c *Config) { c.Rate = -5 },
		"zero duration":   func(c *Config) { c.Duration = 0 },
		"negative warmup": func(c *Config) { c.Warmup = -time.Second },
		"no timeout":      func(c *Config) { c.Timeout = 0 },
		"no connections":  func(c *Config) { c.Connections = 0 },
		"too many conns":  func(c *Config) { c.Connections = maxWorkers + 1 },
	} {
		c := good
		mut(&c)
		if err := c.Check(); err == nil {
			t.Errorf("%s: no error", name)
		}
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%s: Run started anyway", name)
		}
	}
}

// A server that takes 500 ms over every request still gets the full rate:
// the generator does not wait for a response before the next request, as a
// closed loop of its 10 first workers would (at most 20 a second, where 60
// a second needs 30 in flight). The rate is low so that a busy machine
// (and -race) slows the generator less than the property shows.
func TestRunIsOpenLoop(t *testing.T) {
	var got atomic.Int64
	var bodies atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		if b, _ := io.ReadAll(r.Body); string(b) == `{"q":1}` && r.Method == http.MethodPost && r.Header.Get("Content-Type") == "application/json" {
			bodies.Add(1)
		}
		time.Sleep(500 * time.Millisecond) // the slow server under test
		io.WriteString(w, "ok\n")
	}))
	defer srv.Close()

	c := Config{URL: srv.URL, Method: http.MethodPost, Body: []byte(`{"q":1}`), Header: http.Header{"Content-Type": {"application/json"}},
		Rate: 60, Warmup: 500 * time.Millisecond, Duration: time.Second, Timeout: 5 * time.Second, Connections: 64}
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	// 60 a second for a second, give or take the edges of the schedule; a
	// closed loop would send 20.
	if r.Requests < 50 || r.Requests > 66 {
		t.Errorf("%d requests measured, want about 60 (%+v)", r.Requests, r)
	}
	if r.OK != r.Requests || r.Errors != 0 || r.Non2xx != 0 {
		t.Errorf("failures against a server that answers all: %+v", r)
	}
	if r.SentRate < 50 || r.SentRate > 70 {
		t.Errorf("sent %.0f a second, want about 60", r.SentRate)
	}
	if r.P50 < 500*time.Millisecond || r.Max > 4*time.Second {
		t.Errorf("p50 %v max %v: the server's 500 ms is not in the latency", r.P50, r.Max)
	}
	// The warm-up's 30 requests reached the server but are not measured.
	if n := got.Load(); n < int64(r.Requests)+20 {
		t.Errorf("server saw %d requests, measured %d: no warm-up sent", n, r.Requests)
	}
	if bodies.Load() != got.Load() {
		t.Errorf("%d of %d requests carried the method, header and body", bodies.Load(), got.Load())
	}
}

// Cancelling stops a run early with the context's error, whether it
// measures one point or a rate's points in turns.
func TestRunStopsWhenCancelled(t *testing.T) {
	for name, run := range map[string]func(context.Context, Config) error{
		"one point": func(ctx context.Context, c Config) error {
			_, err := Run(ctx, c)
			return err
		},
		"in turns": func(ctx context.Context, c Config) error {
			_, err := RunInterleaved(ctx, Interleaved{Points: []Config{c, c}, Slice: 50 * time.Millisecond})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var n atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 20 {
					cancel()
				}
			}))
			defer srv.Close()
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, Config{URL: srv.URL, Rate: 100, Duration: time.Minute, Timeout: time.Second, Connections: 4})
			}()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled run: %v, want context.Canceled", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("a cancelled run of one-minute points did not stop within 20 s")
			}
		})
	}
}

// Refused connections are counted as errors, not latencies.
func TestRunCountsErrors(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	r, err := Run(context.Background(), Config{URL: url, Rate: 50, Duration: 200 * time.Millisecond, Timeout: time.Second, Connections: 4})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests == 0 || r.Errors != r.Requests || r.OK != 0 || r.FirstError == "" || r.P99 != 0 {
		t.Errorf("against a closed port: %+v", r)
	}
}

// A refusal is counted as non-2xx, its latency left out, and the start of
// its body kept to say why.
func TestRunKeepsWhyItFailed(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"overloaded"}}`+strings.Repeat(" ", 1000))
			return
		}
		io.WriteString(w, "ok\n")
	}))
	defer srv.Close()
	r, err := Run(context.Background(), Config{URL: srv.URL, Rate: 100, Duration: 300 * time.Millisecond, Timeout: time.Second, Connections: 4})
	if err != nil {
		t.Fatal(err)
	}
	if r.Non2xx == 0 || r.OK == 0 || r.OK+r.Non2xx != r.Requests || r.Errors != 0 {
		t.Errorf("half refused: %+v", r)
	}
	if !strings.Contains(r.FirstError, "429") || !strings.Contains(r.FirstError, `"overloaded"`) || len(r.FirstError) > bodyKept+40 {
		t.Errorf("first error %q: want the status and the start of the body", r.FirstError)
	}
}

// arrivals records which of several servers each request reached, in the
// order they arrived.
type arrivals struct {
	mu    sync.Mutex
	order []int
}

func (a *arrivals) server(t *testing.T, id int, delay time.Duration) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.order = append(a.order, id)
		a.mu.Unlock()
		time.Sleep(delay) // the server's own latency, which the results must carry
		io.WriteString(w, "ok\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// switches counts the changes of server along the arrivals.
func (a *arrivals) switches() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for i := 1; i < len(a.order); i++ {
		if a.order[i] != a.order[i-1] {
			n++
		}
	}
	return n
}

// Two targets measured in turns of 100 ms: each gets its rate for its own
// duration, its results are its own (the slow one's latency is not in the
// fast one's), and the load moves between them many times, where measured
// one after the other it moves once after the warm-ups.
func TestRunInterleavedTakesTurns(t *testing.T) {
	for _, tt := range []struct {
		name  string
		slice time.Duration
		// switches wanted between the two servers: the warm-ups (A, then
		// B) make two, then one a turn, less where the rotation puts the
		// same target at the end of a turn and the start of the next.
		minSwitches, maxSwitches int
	}{
		{"in turns", 100 * time.Millisecond, 6, 12},
		{"one after the other", 0, 3, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var a arrivals
			fast, slow := a.server(t, 0, 0), a.server(t, 1, 30*time.Millisecond)
			point := func(url string) Config {
				return Config{URL: url, Rate: 200, Warmup: 100 * time.Millisecond, Duration: 600 * time.Millisecond, Timeout: 5 * time.Second, Connections: 16}
			}
			rs, err := RunInterleaved(context.Background(), Interleaved{Points: []Config{point(fast.URL), point(slow.URL)}, Slice: tt.slice})
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != 2 {
				t.Fatalf("%d results for 2 points", len(rs))
			}
			for i, r := range rs {
				// 200 a second for 600 ms, give or take a request a slice.
				if r.Requests < 110 || r.Requests > 130 || r.OK != r.Requests {
					t.Errorf("point %d: %+v, want about 120 requests, all 2xx", i, r)
				}
				if r.SentRate < 180 || r.SentRate > 220 {
					t.Errorf("point %d: sent %.0f a second over its own slices, want about 200", i, r.SentRate)
				}
				if r.Dials > 16 {
					t.Errorf("point %d: %d connections dialled, more than its 16", i, r.Dials)
				}
			}
			if rs[0].P50 >= 30*time.Millisecond || rs[1].P50 < 30*time.Millisecond {
				t.Errorf("p50 fast %v, slow %v: each result must hold its own server's latency", rs[0].P50, rs[1].P50)
			}
			if n := a.switches(); n < tt.minSwitches || n > tt.maxSwitches {
				t.Errorf("the load moved between the servers %d times, want %d to %d", n, tt.minSwitches, tt.maxSwitches)
			}
		})
	}
}

func TestInterleavedCheck(t *testing.T) {
	good := Config{URL: "http://127.0.0.1:1/", Rate: 10, Duration: time.Second, Timeout: time.Second, Connections: 4}
	bad := good
	bad.Rate = 0
	for name, in := range map[string]Interleaved{
		"no points":      {},
		"negative slice": {Points: []Config{good}, Slice: -time.Second},
		"a bad point":    {Points: []Config{good, bad}, Slice: time.Second},
	} {
		if _, err := RunInterleaved(context.Background(), in); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	_, err := RunInterleaved(context.Background(), Interleaved{Points: []Config{good, bad}})
	if err == nil || !strings.Contains(err.Error(), "point 1") {
		t.Errorf("a bad second point: %v, want an error naming point 1", err)
	}
}
