// Package limiter decides whether a request may pass. It knows nothing about
// HTTP: callers hand it checks (a rule, a key, a cost, the limit that
// applies) and get back one Verdict value from which every header and status
// is rendered.
//
// It holds the vocabulary (Limit, Rule, Check, Decision, Verdict), the
// in-process token buckets (Local, the short path for a library user:
// Local.Allow(key, limit, cost)), and the Engine that decides a request's
// checks, local ones first, then the shared ones through a Backend (package
// limiter/redislimit), and alone keeps the in-process share a FailLocal
// policy falls back to while Redis cannot answer. What an admitted request
// took is one Reservation, settled once its real cost is known. It imports
// no Redis client.
package limiter

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// Algorithm names how a policy counts.
type Algorithm string

// The algorithms a policy can use. TokenBucket and Concurrency are
// in-process; the others are shared by every gateway instance through Redis.
// Concurrency and SharedConcurrency count requests in flight rather than
// requests per period: Limit.Rate is the number of slots, and a request holds
// one from its admission until its Reservation is settled.
// SharedConcurrency's slots are leases of Limit.Period on Redis, renewed
// while the request runs (see Reservation.KeepAlive).
const (
	TokenBucket       Algorithm = "token_bucket"
	GCRA              Algorithm = "gcra"
	SlidingWindow     Algorithm = "sliding_window"
	FixedWindow       Algorithm = "fixed_window"
	Concurrency       Algorithm = "concurrency"
	SharedConcurrency Algorithm = "shared_concurrency"
)

// Algorithms lists every algorithm, in the order the docs give them.
var Algorithms = []Algorithm{TokenBucket, GCRA, SlidingWindow, FixedWindow, Concurrency, SharedConcurrency}

// Shared reports whether the algorithm keeps its state in Redis.
func (a Algorithm) Shared() bool { return a == GCRA || a.Windowed() || a == SharedConcurrency }

// InFlight reports whether the algorithm counts requests in flight (slots
// held until the request ends) rather than requests per period.
func (a Algorithm) InFlight() bool { return a == Concurrency || a == SharedConcurrency }

// Windowed reports whether the algorithm counts Rate per window of Period
// (sliding or fixed) rather than refilling a bucket continuously.
func (a Algorithm) Windowed() bool { return a == SlidingWindow || a == FixedWindow }

// FailureMode says what a shared policy does when Redis cannot answer.
type FailureMode string

// The failure modes. The zero value behaves as FailAllow.
const (
	FailAllow FailureMode = "allow" // forward the request (fail open)
	FailDeny  FailureMode = "deny"  // answer 503 (fail closed)
	FailLocal FailureMode = "local" // enforce an in-process share of the limit
)

// Limit is Rate events per Period with bursts of up to Burst. It is a value:
// callers pass it with every check, so changing a limit never touches state.
// The zero Rate denies everything. The window algorithms admit Rate per
// window: their Burst is left zero (or equal to Rate).
type Limit struct {
	Rate   int64
	Period time.Duration
	Burst  int64
	// Calendar, when set, makes a fixed window a calendar period in UTC;
	// Period is then its nominal length (MonthPeriod for a month), which
	// headers show and a local fallback share enforces.
	Calendar Calendar
}

// Calendar is a calendar period a fixed window can follow instead of
// multiples of its Period. The zero value is none.
type Calendar uint8

// The calendar periods. Days need none: windows of 24h are UTC days.
const (
	NoCalendar    Calendar = iota
	CalendarMonth          // from the first of a month, 00:00 UTC, to the next
)

// MonthPeriod is a calendar month's nominal length.
const MonthPeriod = 30 * 24 * time.Hour

// Quota is the most a key can spend at once: Burst, or Rate when Burst is
// zero. It is the bucket size of the token bucket and GCRA and the count of
// a window.
func (l Limit) Quota() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return max(l.Rate, 0)
}

// DenyAll reports whether the limit admits nothing.
func (l Limit) DenyAll() bool { return l.Rate <= 0 || l.Period <= 0 }

// String renders the limit as "10 per 1m, burst 20".
func (l Limit) String() string {
	return fmt.Sprintf("%d per %s, burst %d", l.Rate, l.Per(), l.Burst)
}

// Per names the period as people read it: "month" for a calendar month,
// else as ShortDuration ("1m", "24h").
func (l Limit) Per() string {
	if l.Calendar == CalendarMonth {
		return "month"
	}
	return ShortDuration(l.Period)
}

// ShortDuration renders whole hours and minutes without trailing zero units
// ("1h", "1m", "90s"), and anything else as time.Duration does.
func ShortDuration(d time.Duration) string {
	switch {
	case d > 0 && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d > 0 && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

// Rule is what the limiter needs to know about one configured policy. It is
// immutable once compiled and shared by every request of a snapshot.
type Rule struct {
	// Name identifies the policy in headers, bodies and Redis keys. It is
	// validated by the config to [A-Za-z0-9_.-].
	Name string
	// Algorithm selects the counting method. The zero value is TokenBucket.
	Algorithm Algorithm
	// OnRedisError applies to shared algorithms only. The zero value is FailAllow.
	OnRedisError FailureMode
	// LocalShare is the fraction of each limit enforced in-process when
	// OnRedisError is FailLocal (for example 0.34 with three instances).
	LocalShare float64
	// Shadow marks a rule being tried on live traffic: the limiter decides
	// and counts it like any other, and its caller does not enforce its
	// denials (the proxy decides again without it).
	Shadow bool

	// store is the in-process bucket store this rule's checks last used
	// (see Local.storeFor): found through the rule, a pointer load and a
	// comparison, rather than by hashing the group on every check.
	store atomic.Pointer[ruleStore]
}

// Check asks whether Cost units may pass for Key under Rule at Limit. A
// check of an InFlight algorithm takes one slot whatever its Cost.
type Check struct {
	// Rule is the policy that asks; required.
	Rule *Rule
	// Limit is the limit that applies to this key (it may depend on the plan).
	Limit Limit
	// Key identifies the bucket within the policy. It must already be bounded
	// in length; shared backends hash it before it reaches Redis.
	Key string
	// Cost is the number of units the request takes; values below 1 count as 1.
	Cost int64
}

// Units is what the check takes: Cost, or 1 when Cost is below 1 or the
// check counts slots (one per request).
func (c Check) Units() int64 {
	if c.Cost < 1 || (c.Rule != nil && c.Rule.Algorithm.InFlight()) {
		return 1
	}
	return c.Cost
}

// Reason says why a decision denied or degraded.
type Reason int

// Reasons carried by a Decision.
const (
	ReasonNone          Reason = iota
	ReasonLimited              // the key is over its limit
	ReasonDenyAll              // the policy's rate is zero
	ReasonCostTooHigh          // the cost exceeds what the limit can ever admit at once
	ReasonUnavailable          // Redis failed and the policy fails closed
	ReasonFailedOpen           // Redis failed and the policy fails open
	ReasonLocalFallback        // Redis failed and a local share decided
	ReasonDenialCached         // denied from the denial cache without asking Redis
	ReasonOverloaded           // the instance could not get the check answered in time; denied, not failed open
	ReasonNotAsked             // another check denied the request first: this one was not decided
)

var reasonNames = [...]string{
	ReasonNone: "none", ReasonLimited: "limited", ReasonDenyAll: "deny_all", ReasonCostTooHigh: "cost_too_high",
	ReasonUnavailable: "unavailable", ReasonFailedOpen: "failed_open", ReasonLocalFallback: "local_fallback",
	ReasonDenialCached: "denial_cached", ReasonOverloaded: "overloaded", ReasonNotAsked: "not_asked",
}

// String names the reason as logs, spans and tests show it ("limited",
// "failed_open", ...).
func (r Reason) String() string {
	if r >= 0 && int(r) < len(reasonNames) && reasonNames[r] != "" {
		return reasonNames[r]
	}
	return "reason_" + strconv.Itoa(int(r))
}

// StaticDenial denies what no state could admit: a limit whose rate is zero,
// or a cost above the limit's quota. ok is false for any other check.
func (c Check) StaticDenial() (d Decision, ok bool) {
	if reason := c.Limit.refusal(c.Units()); reason != ReasonNone {
		return staticDenial(c.Rule.Name, c.Limit, reason), true
	}
	return Decision{}, false
}

// refusal says why no state could admit units under l (ReasonDenyAll,
// ReasonCostTooHigh), or ReasonNone. It is the one test of both backends,
// kept cheap: it runs on every decision.
func (l Limit) refusal(units int64) Reason {
	switch {
	case l.DenyAll():
		return ReasonDenyAll
	case units > l.Quota():
		return ReasonCostTooHigh
	}
	return ReasonNone
}

func staticDenial(policy string, lim Limit, reason Reason) Decision {
	d := Decision{Policy: policy, Limit: lim, Reason: reason, RetryAfter: lim.Period}
	if d.RetryAfter <= 0 {
		d.RetryAfter = time.Second
	}
	return d
}

// notAsked is the decision of a check that was not decided because another
// one denied the request first.
func notAsked(c Check) Decision {
	return Decision{Policy: c.Rule.Name, Limit: c.Limit, Reason: ReasonNotAsked}
}

// Decision is the outcome of one check. Headers and bodies are rendered from
// it and nowhere else.
type Decision struct {
	Policy  string
	Allowed bool
	Limit   Limit
	// Remaining is how many units could pass right now after this decision.
	Remaining int64
	// ResetAfter is how long until the key is back to its full quota.
	ResetAfter time.Duration
	// RetryAfter is how long until a request of the same cost could pass; zero
	// when Allowed.
	RetryAfter time.Duration
	Reason     Reason
	// Shadow is set on the decision of a Shadow rule: reported, never
	// enforced.
	Shadow bool
}

// Verdict is the outcome of all checks of one request. The zero value
// denies with no check named; Verdict{Allowed: true} admits with no checks.
// A denial by one check is built with DeniedBy.
type Verdict struct {
	// Allowed is true when every check allowed the request.
	Allowed bool
	// Decisions holds one decision per check, in the order of the checks.
	// When a check denied, the checks after it may not have been asked and
	// carry only their Policy and Limit.
	Decisions []Decision
	// deniedBy is one more than the index of the check that denied the
	// request, so that zero means none.
	deniedBy int
}

// DeniedBy returns the verdict of a request that check i denied, with one
// decision per check.
func DeniedBy(i int, decisions []Decision) Verdict {
	return Verdict{Decisions: decisions, deniedBy: i + 1}
}

// deny marks v denied by check i.
func (v *Verdict) deny(i int) { v.Allowed, v.deniedBy = false, i+1 }

// DeniedBy returns the index of the check that denied the request; ok is
// false when none did (the request was allowed, or refused without a check).
func (v Verdict) DeniedBy() (i int, ok bool) {
	return v.deniedBy - 1, v.deniedBy > 0
}

// Deciding returns the decision that denied the request or, when allowed, the
// most restrictive one (fewest remaining units) that is not Shadow. ok is
// false when there is none.
func (v Verdict) Deciding() (d Decision, ok bool) {
	if i := v.deciding(); i >= 0 {
		return v.Decisions[i], true
	}
	return Decision{}, false
}

// deciding is the index of Deciding's decision, -1 for none. It keeps the
// index, not a copy of each better decision: it runs on every response
// with rate-limit headers, once per policy. On a tie the first one decides.
func (v Verdict) deciding() int {
	if i, denied := v.DeniedBy(); denied && i < len(v.Decisions) {
		return i
	}
	best := -1
	for i := range v.Decisions {
		// Shadow decisions are reports, not limits: they never decide.
		if d := &v.Decisions[i]; !d.Shadow && (best < 0 || d.Remaining < v.Decisions[best].Remaining) {
			best = i
		}
	}
	return best
}

// Unavailable reports whether the request was refused because a fail-closed
// policy could not reach Redis (rendered as 503, not 429).
func (v Verdict) Unavailable() bool {
	d, ok := v.Deciding()
	return ok && !v.Allowed && d.Reason == ReasonUnavailable
}

// Limiter decides a request's checks. Implementations are safe for
// concurrent use.
type Limiter interface {
	Decide(ctx context.Context, checks []Check) (Verdict, error)
}
