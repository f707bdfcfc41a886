// Package openloop loads one URL at a constant rate and measures each
// response's latency, open loop: requests are sent on a fixed schedule
// (vegeta's constant pacer, a new worker when all are busy), not when an
// earlier one comes back, so a slow response does not hold the next one
// back and hide its own cost. The workers share a bounded pool of
// keep-alive connections: a request due while every connection is busy
// waits for one, and that wait counts in its latency.
package openloop

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Config is one point: a request, a rate and how long.
type Config struct {
	URL    string      `json:"url"`
	Method string      `json:"method"` // "" is GET
	Body   []byte      `json:"body,omitempty"`
	Header http.Header `json:"header,omitempty"`
	// Rate is requests per second.
	Rate int `json:"rate"`
	// Warmup is sent at Rate before Duration and not measured: it opens the
	// connections the rate needs.
	Warmup   time.Duration `json:"warmup"`
	Duration time.Duration `json:"duration"`
	// Timeout bounds each request (vegeta's client timeout).
	Timeout time.Duration `json:"timeout"`
	// Connections is the most connections open at once, all kept alive
	// and reused. Without a bound, every request due while the others are
	// in flight opens one more (a stall of the machine at 5,000 a second
	// opens hundreds), and each is left in TIME_WAIT when the point ends:
	// enough of those exhaust loopback's ephemeral ports.
	Connections int `json:"connections"`
}

// bodyKept is how much of each response body is kept: enough to name why
// a request failed.
const bodyKept = 200

// maxWorkers bounds the requests in flight: far above what a rate below a
// target's capacity needs, low enough that a stalled target cannot make
// the generator exhaust the machine's ports.
const maxWorkers = 4096

// Result is what one point measured, over the responses to requests sent
// after the warm-up.
type Result struct {
	Rate     int           `json:"rate"`
	Duration time.Duration `json:"duration"`
	Requests int           `json:"requests"`
	OK       int           `json:"ok"`     // 2xx
	Non2xx   int           `json:"non2xx"` // any other status
	Errors   int           `json:"errors"` // no response: connect, timeout, …
	// FirstError is the first failed request's error, "" for none.
	FirstError string `json:"first_error,omitempty"`
	// SentRate is the requests sent per second of the measured span: below
	// Rate, the generator did not keep up and the point is not open loop.
	SentRate float64 `json:"sent_rate"`
	// Latencies of the 2xx responses, from send to the end of the body.
	P50  time.Duration `json:"p50"`
	P90  time.Duration `json:"p90"`
	P99  time.Duration `json:"p99"`
	P999 time.Duration `json:"p999"`
	Max  time.Duration `json:"max"`
	// Dials is the connections opened, warm-up included.
	Dials int `json:"dials"`
}

// Check says what is wrong with c, or nil.
func (c Config) Check() error {
	switch {
	case c.URL == "":
		return errors.New("no url")
	case c.Rate < 1:
		return fmt.Errorf("rate %d: must be at least 1 a second", c.Rate)
	case c.Duration <= 0 || c.Warmup < 0 || c.Timeout <= 0:
		return fmt.Errorf("duration %v, warmup %v, timeout %v: duration and timeout must be > 0, warmup >= 0", c.Duration, c.Warmup, c.Timeout)
	case c.Connections < 1 || c.Connections > maxWorkers:
		return fmt.Errorf("connections %d: must be from 1 to %d", c.Connections, maxWorkers)
	}
	return nil
}

// Run sends c's requests at c.Rate for c.Warmup + c.Duration and measures
// those sent after the warm-up. Cancelling ctx stops it early with ctx's
// error.
func Run(ctx context.Context, c Config) (Result, error) {
	if err := c.Check(); err != nil {
		return Result{}, err
	}
	s := newShooter(c)
	defer s.close()
	begin := time.Now()
	hits := s.shoot(ctx, c.Warmup+c.Duration, begin.Add(c.Warmup), nil)
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	res := summarize(c, hits)
	res.Dials = int(s.dials.Load())
	return res, nil
}

// shooter sends one target's requests: its own client and pool of
// kept-alive connections, counted as they are dialled, kept from one shot
// to the next.
type shooter struct {
	c      Config
	tgt    vegeta.Target
	client *http.Client
	tr     *http.Transport
	dials  atomic.Int64
}

func newShooter(c Config) *shooter {
	method := c.Method
	if method == "" {
		method = http.MethodGet
	}
	s := &shooter{c: c, tgt: vegeta.Target{Method: method, URL: c.URL, Body: c.Body, Header: c.Header}}
	dialer := &net.Dialer{KeepAlive: 30 * time.Second}
	s.tr = &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			s.dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
		// The bound: requests beyond it wait for a connection to come back
		// rather than dial, and every connection stays in the idle pool
		// between requests (net/http's default keeps 2).
		MaxConnsPerHost:     c.Connections,
		MaxIdleConnsPerHost: c.Connections,
		// HTTP/1.1 only, as vegeta.HTTP2(false) would set it.
		ForceAttemptHTTP2: false,
		TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	s.client = &http.Client{Transport: s.tr}
	return s
}

func (s *shooter) close() { s.tr.CloseIdleConnections() }

// shoot sends at the shooter's rate for du and appends to hits every
// response to a request sent from measureFrom on; it returns when the last
// response is in, or early when ctx is cancelled. An attacker stops for
// good at its attack's end, so each shot has its own, on the shooter's
// client and connections.
func (s *shooter) shoot(ctx context.Context, du time.Duration, measureFrom time.Time, hits []hit) []hit {
	a := vegeta.NewAttacker(
		// The client first: the options after it change the attacker's
		// copy of it. None that would change its transport (keep-alive,
		// HTTP/2, connection bounds: set where it is made), which the
		// connections of the shot before still read.
		vegeta.Client(s.client),
		vegeta.Timeout(s.c.Timeout),
		vegeta.MaxWorkers(maxWorkers),
		vegeta.Redirects(vegeta.NoFollow),
		// Read every body to its end; keep its start, which names the
		// reason of a failure.
		vegeta.MaxBody(bodyKept),
	)
	stop := context.AfterFunc(ctx, func() { a.Stop() })
	defer stop()
	for r := range a.Attack(vegeta.NewStaticTargeter(s.tgt), vegeta.Rate{Freq: s.c.Rate, Per: time.Second}, du, "") {
		if r.Timestamp.Before(measureFrom) {
			continue
		}
		h := hit{sent: r.Timestamp, latency: r.Latency, code: int(r.Code), err: r.Error}
		if h.code >= 300 && len(r.Body) > 0 {
			h.err += ": " + strings.TrimSpace(string(r.Body))
		}
		hits = append(hits, h)
	}
	return hits
}

// Interleaved is one rate over several targets, measured in turns: each
// target's Duration is cut into slices, and the targets take a slice each
// in turn (the turn's order rotating by one every turn) until every one
// has had its Duration. A stall of the machine, which delays every request
// sent while it lasts, then falls on the targets alike rather than on the
// one whose point it happened to come in; measured one after the other,
// a few seconds each, one target's p99 could take a slow second of the
// machine and the next target's none.
type Interleaved struct {
	Points []Config `json:"points"`
	// Slice is a turn's length; 0, or one as long as a Duration, measures
	// the targets one after the other.
	Slice time.Duration `json:"slice"`
}

// Check says what is wrong with in, or nil.
func (in Interleaved) Check() error {
	if len(in.Points) == 0 {
		return errors.New("no points")
	}
	if in.Slice < 0 {
		return fmt.Errorf("slice %v: must be >= 0", in.Slice)
	}
	for i, c := range in.Points {
		if err := c.Check(); err != nil {
			return fmt.Errorf("point %d (%s): %w", i, c.URL, err)
		}
	}
	return nil
}

// RunInterleaved warms every point up (its Warmup at its rate, one after
// the other, not measured) and then measures them in turns of in.Slice.
// The results are in in.Points' order; a Result's SentRate is over the
// slices its target had. Cancelling ctx stops it early with ctx's error.
func RunInterleaved(ctx context.Context, in Interleaved) ([]Result, error) {
	if err := in.Check(); err != nil {
		return nil, err
	}
	shooters := make([]*shooter, len(in.Points))
	for i, c := range in.Points {
		shooters[i] = newShooter(c)
		defer shooters[i].close()
	}
	for _, s := range shooters {
		if s.c.Warmup > 0 && ctx.Err() == nil {
			// Not measured: the responses are dropped.
			_ = s.shoot(ctx, s.c.Warmup, time.Now().Add(s.c.Warmup), nil)
		}
	}
	hits := make([][]hit, len(shooters))
	left := make([]time.Duration, len(shooters)) // each target's time still to measure
	for i, c := range in.Points {
		left[i] = c.Duration
	}
	for turn := 0; ctx.Err() == nil; turn++ {
		loaded := false
		for k := range shooters {
			i := (k + turn) % len(shooters)
			if left[i] <= 0 || ctx.Err() != nil {
				continue
			}
			du := left[i]
			if in.Slice > 0 {
				du = min(du, in.Slice)
			}
			left[i] -= du
			hits[i] = shooters[i].shoot(ctx, du, time.Time{}, hits[i])
			loaded = true
		}
		if !loaded {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]Result, len(shooters))
	for i, s := range shooters {
		out[i] = summarize(s.c, hits[i])
		// Sent over the time the target was loaded, not over the span
		// from its first request to its last, which holds the others'
		// slices.
		out[i].SentRate = float64(len(hits[i])) / s.c.Duration.Seconds()
		out[i].Dials = int(s.dials.Load())
	}
	return out, nil
}

// hit is one response (or failure) as summarize needs it.
type hit struct {
	sent    time.Time
	latency time.Duration
	code    int // 0: no response
	err     string
}

// summarize counts the hits and takes the quantiles of the 2xx latencies.
func summarize(c Config, hits []hit) Result {
	res := Result{Rate: c.Rate, Duration: c.Duration, Requests: len(hits)}
	var lat []time.Duration
	var first, last time.Time
	for i, h := range hits {
		if i == 0 || h.sent.Before(first) {
			first = h.sent
		}
		if h.sent.After(last) {
			last = h.sent
		}
		switch {
		case h.code >= 200 && h.code < 300:
			res.OK++
			lat = append(lat, h.latency)
			continue
		case h.code == 0:
			res.Errors++
		default:
			res.Non2xx++
		}
		if res.FirstError == "" {
			res.FirstError = h.err
			if res.FirstError == "" {
				res.FirstError = fmt.Sprintf("status %d", h.code)
			}
		}
	}
	// n requests sent at a constant rate span n-1 intervals.
	if span := last.Sub(first); len(hits) > 1 && span > 0 {
		res.SentRate = float64(len(hits)-1) / span.Seconds()
	}
	slices.Sort(lat)
	res.P50, res.P90, res.P99, res.P999 = Quantile(lat, 0.50), Quantile(lat, 0.90), Quantile(lat, 0.99), Quantile(lat, 0.999)
	if len(lat) > 0 {
		res.Max = lat[len(lat)-1]
	}
	return res
}

// Quantile is the nearest-rank q-quantile of sorted (ascending): the
// smallest value at least a fraction q of the values are at or below. Zero
// for none.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
