package pool

import "sync/atomic"

// Budget bounds the retries in flight to a share of the requests in flight,
// and at least a floor: when a whole pool fails, the retries stay a
// fraction of the traffic instead of multiplying it. Every retry of the
// process draws on it: a pool's on another member, and the lean
// transport's of a request whose kept-alive connection closed before
// answering. It is safe for concurrent use.
type Budget struct {
	share float64
	floor int64

	inflight, retries atomic.Int64
	granted, refused  atomic.Int64
	peak              atomic.Int64
}

// NewBudget returns a Budget of share (0.2: a fifth) of the requests in
// flight, and at least floor retries.
func NewBudget(share float64, floor int64) *Budget {
	return &Budget{share: share, floor: floor}
}

// Begin counts a request in flight; End, its end.
func (b *Budget) Begin() { b.inflight.Add(1) }

// End counts the end of a request that Begin counted.
func (b *Budget) End() { b.inflight.Add(-1) }

// TryRetry takes a retry from the budget and reports whether there was one;
// RetryDone gives it back when the retry ends.
func (b *Budget) TryRetry() bool {
	limit := max(b.floor, int64(b.share*float64(b.inflight.Load())))
	if b.retries.Add(1) > limit {
		b.retries.Add(-1)
		b.refused.Add(1)
		return false
	}
	b.granted.Add(1)
	n := b.retries.Load()
	for p := b.peak.Load(); n > p && !b.peak.CompareAndSwap(p, n); p = b.peak.Load() {
	}
	return true
}

// RetryDone gives back a retry TryRetry took.
func (b *Budget) RetryDone() { b.retries.Add(-1) }

// BudgetStats is what a Budget has done.
type BudgetStats struct {
	// Granted and Refused count the retries asked for; InFlight is the
	// requests in flight now, Retrying the retries; Peak is the most
	// retries that were ever in flight at once.
	Granted, Refused, InFlight, Retrying, Peak int64
}

// Stats reads the budget's counters.
func (b *Budget) Stats() BudgetStats {
	return BudgetStats{Granted: b.granted.Load(), Refused: b.refused.Load(), InFlight: b.inflight.Load(), Retrying: b.retries.Load(), Peak: b.peak.Load()}
}
