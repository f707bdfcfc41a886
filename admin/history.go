package admin

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// History samples the request counters (gateway_requests_total) every
// step and keeps the last few, so that the status page can draw the last
// minutes per route as soon as it opens. It reads the registry, never the
// request path. It is safe for concurrent use; Run is its one goroutine.
type History struct {
	gather prometheus.Gatherer
	clock  func() time.Time
	step   time.Duration
	keep   int

	mu      sync.Mutex
	samples []sample // oldest first, at most keep
}

// sample is the counters at one instant: per route, the three sums the
// page shows.
type sample struct {
	at     time.Time
	routes map[string]routeCounts
}

// routeCounts sums gateway_requests_total's outcomes the way the page
// shows them.
type routeCounts struct {
	// Allowed were forwarded with every enforced policy admitting them
	// (allowed, shadow_limited).
	Allowed uint64 `json:"allowed"`
	// Limited were refused by a limit (429).
	Limited uint64 `json:"limited"`
	// Failed are failed_open, failed_closed and error.
	Failed uint64 `json:"failed"`
	// Invalid were answered before the limiter (no route, a bad path or body).
	Invalid uint64 `json:"invalid"`
}

func (c routeCounts) minus(o routeCounts) routeCounts {
	sub := func(a, b uint64) uint64 {
		if a < b { // a counter never goes back; guard anyway
			return 0
		}
		return a - b
	}
	return routeCounts{sub(c.Allowed, o.Allowed), sub(c.Limited, o.Limited), sub(c.Failed, o.Failed), sub(c.Invalid, o.Invalid)}
}

// NewHistory returns a History of keep samples every step, read from
// gather at the instants clock gives. It starts nothing (see Run).
func NewHistory(gather prometheus.Gatherer, clock func() time.Time, step time.Duration, keep int) (*History, error) {
	if gather == nil || clock == nil {
		return nil, errors.New("creating history: nil gatherer or clock")
	}
	if step <= 0 || keep < 2 {
		return nil, errors.New("creating history: step must be > 0 and keep >= 2")
	}
	return &History{gather: gather, clock: clock, step: step, keep: keep}, nil
}

// Run samples every step until ctx is done.
func (h *History) Run(ctx context.Context) error {
	h.Sample()
	t := time.NewTicker(h.step)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			h.Sample()
		}
	}
}

// Sample records the counters now.
func (h *History) Sample() {
	routes, err := requestCounts(h.gather)
	if err != nil {
		return // the registry's own errors are /metrics's to show
	}
	at := h.clock()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = append(h.samples, sample{at: at, routes: routes})
	if len(h.samples) > h.keep {
		h.samples = append(h.samples[:0], h.samples[len(h.samples)-h.keep:]...)
	}
}

// seriesView is the history as the page draws it: per interval between
// two samples, what each route answered.
type seriesView struct {
	Step   string      `json:"step"`
	Points []pointView `json:"points"`
}

type pointView struct {
	// At is the end of the interval, Unix milliseconds.
	At     int64                  `json:"at"`
	Routes map[string]routeCounts `json:"routes"`
}

// series returns the intervals between the samples kept, from a zero
// point at the oldest, and a last, partial one up to now (counts as they
// are now, from the registry), so that a page opened after the traffic
// shows it at once.
func (h *History) series(now map[string]routeCounts) seriesView {
	at := h.clock()
	h.mu.Lock()
	defer h.mu.Unlock()
	v := seriesView{Step: h.step.String(), Points: []pointView{}}
	samples := h.samples
	if now != nil && len(samples) > 0 {
		samples = append(samples[:len(samples):len(samples)], sample{at: at, routes: now})
	}
	for i, cur := range samples {
		p := pointView{At: cur.at.UnixMilli(), Routes: map[string]routeCounts{}}
		if i > 0 {
			for r, c := range cur.routes {
				p.Routes[r] = c.minus(samples[i-1].routes[r])
			}
		}
		v.Points = append(v.Points, p)
	}
	return v
}

// requestCounts reads gateway_requests_total from g, per route.
func requestCounts(g prometheus.Gatherer) (map[string]routeCounts, error) {
	fams, err := g.Gather()
	if err != nil && len(fams) == 0 {
		return nil, err
	}
	out := map[string]routeCounts{}
	for _, f := range fams {
		if f.GetName() != "gateway_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			route, outcome := label(m.GetLabel(), "route"), label(m.GetLabel(), "outcome")
			n := uint64(m.GetCounter().GetValue())
			c := out[route]
			switch outcome {
			case "allowed", "shadow_limited":
				c.Allowed += n
			case "limited":
				c.Limited += n
			case "failed_open", "failed_closed", "error":
				c.Failed += n
			case "invalid":
				c.Invalid += n
			}
			out[route] = c
		}
	}
	return out, nil
}
