package limiter

import (
	"context"
	"errors"
	"time"
)

// Backend decides checks whose state is shared (see redislimit). It returns
// one decision per check. When one of them denies, none of the checks
// consumed anything and undo is nil; otherwise undo, when not nil, gives
// back everything the request took. Failure modes are the implementation's
// business: it never returns an error for an unreachable Redis, only
// decisions with the matching Reason.
type Backend interface {
	Decide(ctx context.Context, checks []Check) (decisions []Decision, undo func(context.Context))
}

// Engine is the Limiter used by the proxy: in-process token buckets for local
// policies and, when configured, a Backend for the shared ones. Local checks
// run first, so a request they deny never reaches Redis. Engine is safe for
// concurrent use.
type Engine struct {
	clock  func() time.Time
	local  *Local
	shared Backend
}

var _ Limiter = (*Engine)(nil)

// ErrNoSharedBackend is returned by Decide for a shared algorithm when the
// engine was built without Redis (the config rejects this earlier).
var ErrNoSharedBackend = errors.New("limiter: policy needs redis but none is configured")

// NewEngine returns an Engine. clock is required; shared may be nil when no
// Redis is configured.
func NewEngine(clock func() time.Time, local *Local, shared Backend) (*Engine, error) {
	if clock == nil {
		return nil, errors.New("limiter: nil clock")
	}
	if local == nil {
		return nil, errors.New("limiter: nil local buckets")
	}
	return &Engine{clock: clock, local: local, shared: shared}, nil
}

// Decide asks every check and returns one verdict. A request denied by one
// check consumes nothing from the others.
func (e *Engine) Decide(ctx context.Context, checks []Check) (Verdict, error) {
	v := Verdict{Allowed: true, Denied: -1, Decisions: make([]Decision, len(checks))}
	for i, c := range checks {
		if c.Rule == nil {
			return Verdict{}, errors.New("limiter: check without policy")
		}
		v.Decisions[i] = notAsked(c)
	}

	now := e.clock()
	var undos []func()
	var undone []int // local decisions to correct when their tokens go back
	var sharedIdx []int
	for i, c := range checks {
		if c.Rule.Algorithm.Shared() {
			sharedIdx = append(sharedIdx, i)
			continue
		}
		d, undo := e.local.Reserve(now, BucketGroup{Policy: c.Rule.Name, Limit: c.Limit}, c.Key, c.Units())
		v.Decisions[i] = d
		if !d.Allowed {
			runAll(undos)
			v.refunded(checks, undone)
			v.Allowed, v.Denied = false, i
			return v, nil
		}
		if undo != nil {
			undos = append(undos, undo)
			undone = append(undone, i)
		}
	}
	if len(sharedIdx) == 0 {
		return v, nil
	}
	if e.shared == nil {
		runAll(undos)
		return Verdict{}, ErrNoSharedBackend
	}

	sc := make([]Check, len(sharedIdx))
	for j, i := range sharedIdx {
		sc[j] = checks[i]
	}
	// Shared checks come last, so nothing after them can deny the request:
	// their undo is never needed here.
	ds, _ := e.shared.Decide(ctx, sc)
	for j, i := range sharedIdx {
		v.Decisions[i] = ds[j]
		if !ds[j].Allowed && v.Allowed && ds[j].Reason != ReasonNotAsked {
			v.Allowed, v.Denied = false, i
		}
	}
	if !v.Allowed {
		runAll(undos)
		v.refunded(checks, undone)
	}
	return v, nil
}

// refunded corrects the Remaining of decisions whose cost was given back, so
// the headers of a denied request show what those policies really have left.
func (v *Verdict) refunded(checks []Check, idx []int) {
	for _, i := range idx {
		d := &v.Decisions[i]
		d.Remaining = min(d.Remaining+checks[i].Units(), d.Limit.Quota())
	}
}

func runAll(fs []func()) {
	for _, f := range fs {
		f()
	}
}
