package metrics

import "sync/atomic"

// watched holds the stats function a collector reads once per scrape: the
// backends keep their own atomic counters, so nothing is counted twice and
// their hot paths pay nothing for metrics.
type watched[T any] struct{ f atomic.Pointer[func() T] }

// set replaces the function; nil stops exposing the stats.
func (w *watched[T]) set(f func() T) {
	if f == nil {
		w.f.Store(nil)
		return
	}
	w.f.Store(&f)
}

// read calls the function; ok is false when there is none.
func (w *watched[T]) read() (st T, ok bool) {
	f := w.f.Load()
	if f == nil {
		return st, false
	}
	return (*f)(), true
}
