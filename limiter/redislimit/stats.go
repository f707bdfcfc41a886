package redislimit

import (
	"sync/atomic"
	"time"
)

// Stats are Redis's counters since it was created, for metrics and
// tests. The zero value means nothing happened.
type Stats struct {
	// RoundTrips counts decisions that asked Redis.
	RoundTrips uint64
	// Pipelines counts the pipelines sent: with gathering on, one carries
	// the script calls of every decision waiting for it, so under load
	// there are fewer pipelines than round trips.
	Pipelines uint64
	// Errors counts round trips in which at least one command failed.
	Errors uint64
	// Timeouts counts the round trips among Errors that ran out of time
	// (their deadline, or a socket timeout), whether Redis was too slow or
	// this instance was (see Overloaded). A round trip whose caller's
	// context had ended is not counted: it says nothing about Redis.
	Timeouts uint64
	// FailFast counts decisions answered by the failure modes without asking
	// Redis because the circuit breaker was open.
	FailFast uint64
	// FailedOpen, FailedClosed and LocalFallbacks count checks decided by
	// each failure mode (allow, deny, local).
	FailedOpen     uint64
	FailedClosed   uint64
	LocalFallbacks uint64
	// Overloaded counts decisions denied because the instance could not get
	// them answered in time: no round-trip slot within the queue timeout, or
	// a timeout while Redis was answering others.
	Overloaded uint64
	// DenialCacheHits counts requests denied from the denial cache.
	DenialCacheHits uint64
	// Refunds and RefundErrors count the adjustments of admitted requests
	// (given back or charged after the fact) that ran or failed.
	Refunds      uint64
	RefundErrors uint64
	// ScriptReloads counts round trips that had to re-send scripts as EVAL
	// because Redis had lost its script cache.
	ScriptReloads uint64
	// LeasesLost counts in-flight leases a renewal found lapsed (their
	// requests were still running); RenewErrors counts renewals that failed.
	LeasesLost  uint64
	RenewErrors uint64
	// BreakerOpens counts how often a circuit breaker opened (each node
	// has its own; see Nodes).
	BreakerOpens uint64
	// BreakerOpen reports whether a node's breaker is open or probing now.
	BreakerOpen bool
	// Nodes is each Redis server's health, by address: one entry on a
	// standalone server or Sentinel, one per master seen on a Cluster.
	Nodes []NodeStats
	// DenialCacheKeys is how many keys the denial cache holds now.
	DenialCacheKeys int
}

type redisCounters struct {
	roundTrips, errors, failFast             atomic.Uint64
	failedOpen, failedClosed, localFallbacks atomic.Uint64
	denialHits, refunds, refundErrors        atomic.Uint64
	scriptReloads, overloaded                atomic.Uint64
	pipelines, leasesLost, renewErrors       atomic.Uint64
	timeouts                                 atomic.Uint64
}

// Stats returns a snapshot of the counters. It is safe for concurrent use.
func (r *Limiter) Stats() Stats {
	c := &r.stats
	s := Stats{
		RoundTrips:      c.roundTrips.Load(),
		Pipelines:       c.pipelines.Load(),
		LeasesLost:      c.leasesLost.Load(),
		RenewErrors:     c.renewErrors.Load(),
		Errors:          c.errors.Load(),
		Timeouts:        c.timeouts.Load(),
		FailFast:        c.failFast.Load(),
		FailedOpen:      c.failedOpen.Load(),
		FailedClosed:    c.failedClosed.Load(),
		LocalFallbacks:  c.localFallbacks.Load(),
		Overloaded:      c.overloaded.Load(),
		DenialCacheHits: c.denialHits.Load(),
		Refunds:         c.refunds.Load(),
		RefundErrors:    c.refundErrors.Load(),
		ScriptReloads:   c.scriptReloads.Load(),
		DenialCacheKeys: r.denials.len(),
	}
	for _, n := range r.nodes.all() {
		ns := n.stats()
		s.Nodes = append(s.Nodes, ns)
		s.BreakerOpens += ns.BreakerOpens
		s.BreakerOpen = s.BreakerOpen || ns.Breaker != breakerClosed.String()
	}
	return s
}

// logThrottle lets at most one log line through per second and counts the
// ones it held back, so a Redis outage under load does not flood the log.
type logThrottle struct {
	last       atomic.Int64 // Unix ns of the last line let through
	suppressed atomic.Uint64
}

// allow reports whether a line may be written now, and how many were
// suppressed since the last one.
func (t *logThrottle) allow(now time.Time) (suppressed uint64, ok bool) {
	n := now.UnixNano()
	last := t.last.Load()
	if n-last < int64(time.Second) || !t.last.CompareAndSwap(last, n) {
		t.suppressed.Add(1)
		return 0, false
	}
	return t.suppressed.Swap(0), true
}
