package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/bench/plot"
)

// chartFile is one SVG written next to the results file: its name is the
// results file's with suffix in place of ".txt", then ".svg".
type chartFile struct {
	suffix string
	charts []plot.Chart
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runCharts are the run's charts: the closed loop's throughput, latency and
// (when measured) CPU time a request side by side, and, when measured, the
// open loop's latency added over the upstream against the rate.
func runCharts(sums []summary, open *openRun, openSums []openSummary) []chartFile {
	labels := make([]string, len(sums))
	rps := make([]float64, len(sums))
	p50 := make([]float64, len(sums))
	p99 := make([]float64, len(sums))
	cpu := make([][]float64, 4) // own, Redis, upstream, wrk
	for i := range cpu {
		cpu[i] = make([]float64, len(sums))
	}
	measured := false
	for i, s := range sums {
		labels[i], rps[i], p50[i], p99[i] = s.name, s.rps, msf(s.p50), msf(s.p99)
		for j, d := range []time.Duration{s.cpu.own, s.redisCPU(), s.cpu.upstream, s.cpu.generator} {
			cpu[j][i] = usec(d)
			measured = measured || d > 0
		}
	}
	out := []chartFile{{suffix: "", charts: []plot.Chart{
		plot.Bars{Title: "Closed loop: throughput (median of rounds)", XLabel: "requests/s (a deny target's are 429s)", Labels: labels,
			Series: []plot.BarSeries{{Name: "rps", Values: rps}}},
		plot.Bars{Title: "Closed loop: latency (median of rounds)", XLabel: "ms", Labels: labels,
			Series: []plot.BarSeries{{Name: "p50", Values: p50}, {Name: "p99", Values: p99}}},
	}}}
	if measured {
		out[0].charts = append(out[0].charts, plot.Bars{Title: "Closed loop: CPU time a request (median of rounds)", XLabel: "µs", Labels: labels,
			Series: []plot.BarSeries{{Name: "the target's own", Values: cpu[0]}, {Name: "its Redis", Values: cpu[1]},
				{Name: "the upstream", Values: cpu[2]}, {Name: "wrk", Values: cpu[3]}}})
	}
	if open == nil {
		return out
	}
	p50Added := plot.Line{Title: "Open loop: p50 added over the upstream", XLabel: "requests/s", YLabel: "ms"}
	p99Added := plot.Line{Title: "Open loop: p99 added over the upstream", XLabel: "requests/s", YLabel: "ms"}
	for _, name := range open.targets {
		if name == tUpstream {
			continue
		}
		a50 := plot.Series{Name: name}
		a99 := plot.Series{Name: name}
		for _, s := range openSums {
			if s.target != name || !s.addedOK {
				continue
			}
			a50.X, a50.Y = append(a50.X, float64(s.rate)), append(a50.Y, msf(s.p50Added))
			a99.X, a99.Y = append(a99.X, float64(s.rate)), append(a99.Y, msf(s.p99Added))
		}
		p50Added.Series = append(p50Added.Series, a50)
		p99Added.Series = append(p99Added.Series, a99)
	}
	pcts := make([]string, len(open.pcts))
	for i, p := range open.pcts {
		pcts[i] = fmt.Sprint(p)
	}
	note := fmt.Sprintf(" (%s %% of %s's %.0f/s)", strings.Join(pcts, ", "), open.slowest, open.capacity)
	p99Added.XLabel += note
	p50Added.XLabel += note
	return append(out, chartFile{suffix: "-openloop", charts: []plot.Chart{p99Added, p50Added}})
}
