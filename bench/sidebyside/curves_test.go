package main

import (
	"math"
	"testing"
	"time"
)

// A target's CPU time per response over its curve's first point is the
// median of the rounds' own ratios: a machine that was slower in some
// rounds than in others slows both targets of those rounds, and no
// ratio of two medians taken from different rounds is reported.
func TestCPURatioPairsTheRounds(t *testing.T) {
	us := func(v ...float64) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x * float64(time.Microsecond))
		}
		return d
	}
	c := curves{cpuRounds: map[string][]time.Duration{
		// Rounds 1 and 3 ran on a slow machine; in every round the point
		// costs 2 % more than the first.
		"first": us(100, 80, 120, 80, 81),
		"point": us(102, 81.6, 122.4, 81.6, 82.62),
		// Here the rounds disagree; the ratio of the two medians (82 / 81)
		// pairs round 2 with round 5.
		"drift": us(90, 82, 70, 79, 83),
	}}
	c.cpuPerReq = map[string]time.Duration{}
	for name, ds := range c.cpuRounds {
		c.cpuPerReq[name] = median(ds)
	}
	if got := c.cpuRatio("point", "first"); math.Abs(got-1.02) > 1e-6 {
		t.Errorf("cpuRatio(point, first) = %v, want 1.02", got)
	}
	// Round ratios 0.90, 1.025, 0.583, 0.9875, 1.0247: median 0.9875.
	if got := c.cpuRatio("drift", "first"); math.Abs(got-0.9875) > 1e-6 {
		t.Errorf("cpuRatio(drift, first) = %v, want the median of the rounds' ratios, 0.9875", got)
	}
	// Without rounds to pair (an even count here), the ratio of medians.
	c.cpuRounds = map[string][]time.Duration{"point": us(102, 81.6)}
	if got := c.cpuRatio("point", "first"); math.Abs(got-float64(c.cpuPerReq["point"])/float64(c.cpuPerReq["first"])) > 1e-9 {
		t.Errorf("cpuRatio without paired rounds = %v, want the ratio of the medians", got)
	}
}
