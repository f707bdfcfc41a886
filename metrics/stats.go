package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// statsCollector exposes a backend's stats as const metrics, read through
// one function per scrape: the backends keep their own atomic counters, so
// nothing is counted twice and their hot paths pay nothing for metrics. The
// metrics are a table of stat rows; the same collector serves the local
// buckets, the Redis backend, the lean transport and the idempotency store.
type statsCollector[T any] struct {
	f     atomic.Pointer[func() T]
	stats []stat[T]
}

// stat is one metric of a statsCollector: read emits its series from the
// stats, each with its label value if the metric has a label.
type stat[T any] struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	read func(st T, emit func(v float64, label ...string))
}

type number interface {
	~int | ~int64 | ~uint64 | ~float64
}

func newStatsCollector[T any](stats ...stat[T]) *statsCollector[T] {
	return &statsCollector[T]{stats: stats}
}

// watch replaces the stats function; nil stops exposing the stats.
func (c *statsCollector[T]) watch(f func() T) {
	if f == nil {
		c.f.Store(nil)
		return
	}
	c.f.Store(&f)
}

// Describe implements prometheus.Collector.
func (c *statsCollector[T]) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range c.stats {
		ch <- s.desc
	}
}

// Collect implements prometheus.Collector.
func (c *statsCollector[T]) Collect(ch chan<- prometheus.Metric) {
	f := c.f.Load()
	if f == nil {
		return
	}
	st := (*f)()
	for _, s := range c.stats {
		s.read(st, func(v float64, label ...string) {
			ch <- prometheus.MustNewConstMetric(s.desc, s.kind, v, label...)
		})
	}
}

// gauge is a stat of one series read from a field.
func gauge[T any, N number](name, help string, v func(T) N) stat[T] {
	return single(name, help, prometheus.GaugeValue, v)
}

// counter is a stat of one series read from a monotonic count.
func counter[T any, N number](name, help string, v func(T) N) stat[T] {
	return single(name, help, prometheus.CounterValue, v)
}

func single[T any, N number](name, help string, kind prometheus.ValueType, v func(T) N) stat[T] {
	return stat[T]{
		desc: prometheus.NewDesc(name, help, nil, nil),
		kind: kind,
		read: func(st T, emit func(float64, ...string)) { emit(float64(v(st))) },
	}
}

// labelled is a stat of one series per value of label, each emitted by read.
func labelled[T any](name, help, label string, kind prometheus.ValueType, read func(T, func(v float64, label ...string))) stat[T] {
	return stat[T]{desc: prometheus.NewDesc(name, help, []string{label}, nil), kind: kind, read: read}
}

// flag is 1 for true and 0 for false.
func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
