package redislimit

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/limiter"

	"go.uber.org/goleak"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// failTimeout is the decision deadline of the failure tests: the default's
// order of magnitude, with room for a loaded machine under -race.
const failTimeout = 50 * time.Millisecond

// slack is what a decision may take beyond the deadline on a loaded 2-core
// machine under -race (timer and scheduling latency).
const slack = 40 * time.Millisecond

// logCounter is a slog handler that keeps the messages, to show that an
// outage does not flood the log.
type logCounter struct {
	mu    sync.Mutex
	msgs  []string
	lines []string // each record's message and attributes, "msg k=v ..."
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logCounter) WithGroup(string) slog.Handler            { return l }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	l.lines = append(l.lines, line)
	return nil
}

// text is every record, one a line, with its attributes.
func (l *logCounter) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func (l *logCounter) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

// timed runs one decision through e, the Engine that owns the fallback
// shares, and measures it.
func timed(e *limiter.Engine, checks ...limiter.Check) ([]limiter.Decision, time.Duration) {
	start := time.Now()
	v, _ := e.Decide(context.Background(), checks)
	return v.Decisions, time.Since(start)
}

func TestFailureModesWithRedisKilled(t *testing.T) {
	s := redistest.Start(t)
	leaks := goleak.IgnoreCurrent()
	c := newTestClient(t, failTimeout, s.Addr())
	local := limiter.NewLocal(0)
	lim := limiter.Limit{Rate: 30, Period: time.Minute}

	tests := []struct {
		mode        limiter.FailureMode
		wantAllowed int // of 15 decisions
		wantReason  limiter.Reason
	}{
		{limiter.FailAllow, 15, limiter.ReasonFailedOpen},
		{limiter.FailDeny, 0, limiter.ReasonUnavailable},
		{limiter.FailLocal, 10, limiter.ReasonLocalFallback}, // 30 * 0.34 = 10.2 -> 10 for this instance
	}
	// Warm the pool while Redis is up, then kill it.
	warm := newTestRedis(t, c, Config{Timeout: failTimeout})
	if d := decideOne(t, warm, limiter.Check{Rule: policy("warm", limiter.GCRA), Limit: lim, Key: "k"}); !d.Allowed {
		t.Fatalf("warm-up: got denied (reason %d), want admitted", d.Reason)
	}
	s.Kill()

	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			// A fresh Redis per mode: a closed breaker, so the first
			// decisions really try the dead server.
			r := newTestRedis(t, c, Config{Timeout: failTimeout, Logger: slog.New(&logCounter{})})
			e, err := limiter.NewEngine(time.Now, local, r) // the engine owns the fallback share
			if err != nil {
				t.Fatal(err)
			}
			chk := limiter.Check{Rule: &limiter.Rule{Name: "p-" + string(tt.mode), Algorithm: limiter.GCRA, OnRedisError: tt.mode, LocalShare: 0.34}, Limit: lim, Key: "10.0.0.1"}
			allowed := 0
			var tried, failFast []time.Duration
			for i := 0; i < 15; i++ {
				start := time.Now()
				v, err := e.Decide(context.Background(), []limiter.Check{chk})
				took := time.Since(start)
				if err != nil {
					t.Fatal(err)
				}
				d := v.Decisions[0]
				if d.Allowed {
					allowed++
				}
				if d.Reason != tt.wantReason {
					t.Fatalf("decision %d: got reason %d, want %d", i, d.Reason, tt.wantReason)
				}
				if took > failTimeout+slack {
					t.Fatalf("decision %d took %s, want at most %s + %s", i, took, failTimeout, slack)
				}
				if i < DefaultBreakerFailures {
					tried = append(tried, took)
				} else {
					failFast = append(failFast, took)
				}
			}
			if allowed != tt.wantAllowed {
				t.Fatalf("got %d of 15 allowed, want %d", allowed, tt.wantAllowed)
			}
			st := r.Stats()
			if !st.BreakerOpen || st.FailFast != 15-DefaultBreakerFailures {
				t.Fatalf("got breaker open=%v and %d fail-fast decisions, want open and %d", st.BreakerOpen, st.FailFast, 15-DefaultBreakerFailures)
			}
			t.Logf("redis killed, on_redis_error=%s: %d/15 allowed; latency while trying redis max %s, with breaker open max %s",
				tt.mode, allowed, slices.Max(tried).Round(time.Microsecond), slices.Max(failFast).Round(time.Microsecond))
		})
	}
	c.Close()
	goleak.VerifyNone(t, leaks)
}

// A hung Redis (SIGSTOP) accepts connections and never answers: every
// decision is bounded by the timeout, the breaker stops paying it, and once
// Redis runs again enforcement is back within a second.
func TestRedisHungDecisionsBoundedAndRecover(t *testing.T) {
	s := redistest.Start(t)
	leaks := goleak.IgnoreCurrent()
	c := newTestClient(t, failTimeout, s.Addr())
	logs := &logCounter{}
	r := newTestRedis(t, c, Config{Timeout: failTimeout, Logger: slog.New(logs)})
	e := newTestEngine(t, r)
	lim := limiter.Limit{Rate: 1000, Period: time.Minute}
	modes := []struct {
		mode   limiter.FailureMode
		reason limiter.Reason
	}{{limiter.FailDeny, limiter.ReasonUnavailable}, {limiter.FailAllow, limiter.ReasonFailedOpen}, {limiter.FailLocal, limiter.ReasonLocalFallback}}
	checks := make([]limiter.Check, len(modes))
	for i, m := range modes {
		checks[i] = limiter.Check{Rule: &limiter.Rule{Name: "hung-" + string(m.mode), Algorithm: limiter.SlidingWindow, OnRedisError: m.mode, LocalShare: 0.5}, Limit: lim, Key: "k"}
		if ds, _ := timed(e, checks[i]); !ds[0].Allowed || ds[0].Reason != limiter.ReasonNone {
			t.Fatalf("before the hang: got allowed=%v reason %d, want admitted by redis", ds[0].Allowed, ds[0].Reason)
		}
	}

	s.Stop()
	hungAt := time.Now()
	var slow, fast, overloadedBeforeOpen, late, decisions int
	maxSlow := make([]time.Duration, len(modes))
	maxFast := make([]time.Duration, len(modes))
	for n := 0; time.Since(hungAt) < 1200*time.Millisecond; n++ {
		i := n % len(modes)
		opened := r.Stats().BreakerOpens > 0 // before the decision: the breaker opens in the background
		ds, took := timed(e, checks[i])
		switch got := ds[0].Reason; {
		case got == modes[i].reason:
		case got == limiter.ReasonOverloaded && modes[i].mode == limiter.FailAllow && !opened:
			// A timeout is only suspect until Redis has also left a direct
			// check unanswered for breaker_cooldown: until then it denies
			// rather than failing open.
			overloadedBeforeOpen++
		default:
			t.Fatalf("while hung, on_redis_error=%s: got reason %d, want %d", modes[i].mode, got, modes[i].reason)
		}
		// Every decision is bounded; on a starved machine one now and then
		// waits for a CPU past the slack, which is not Redis's time.
		if took > failTimeout+slack {
			late++
			if took > failTimeout+4*slack {
				t.Fatalf("while hung: a decision took %s, want at most %s + %s (4 × %s at the worst)", took, failTimeout, slack, slack)
			}
		}
		decisions++
		if took >= failTimeout/2 {
			slow++
			maxSlow[i] = max(maxSlow[i], took)
		} else {
			fast++
			maxFast[i] = max(maxFast[i], took)
		}
		// Pace the loop: a request every 2ms is plenty to show the breaker.
		<-time.After(2 * time.Millisecond)
	}
	hungFor := time.Since(hungAt)
	if limit := max(2, decisions/100); late > limit {
		t.Fatalf("while hung: %d of %d decisions took more than %s + %s, want at most %d", late, decisions, failTimeout, slack, limit)
	}
	// Slow: the timeouts until the breaker opens (the suspect window, then
	// the direct check's cooldown), then one probe per cooldown.
	detect := suspectWindowFactor*failTimeout + DefaultBreakerCooldown + 2*failTimeout
	if limit := int(detect/failTimeout) + int(hungFor/DefaultBreakerCooldown) + 1; slow > limit {
		t.Fatalf("got %d decisions that paid the timeout, want at most %d (until detection + one probe per cooldown)", slow, limit)
	}
	if limit := int(detect / failTimeout); overloadedBeforeOpen > limit {
		t.Fatalf("got %d fail-open decisions denied as overloaded, want at most %d, those before the breaker opened", overloadedBeforeOpen, limit)
	}
	if fast < 100 {
		t.Fatalf("got %d fail-fast decisions, want many", fast)
	}
	t.Logf("redis hung (SIGSTOP) for %s, timeout %s: %d decisions paid the timeout, %d failed fast",
		hungFor.Round(time.Millisecond), failTimeout, slow, fast)
	for i, m := range modes {
		t.Logf("  on_redis_error=%s: max latency when paying the timeout %s, with breaker open %s",
			m.mode, maxSlow[i].Round(time.Microsecond), maxFast[i].Round(time.Microsecond))
	}

	s.Cont()
	recovery := waitEnforced(t, r, checks[0], time.Now())
	t.Logf("redis resumed: enforcement back after %s", recovery.Round(time.Millisecond))
	if recovery > time.Second {
		t.Fatalf("enforcement came back after %s, want within 1s", recovery)
	}
	if msgs := logs.messages(); len(msgs) > 2+int(hungFor/time.Second)+1 {
		t.Fatalf("got %d log lines %q, want at most one per state change and per second", len(msgs), msgs)
	}
	r.Close()
	c.Close()
	goleak.VerifyNone(t, leaks)
}

// waitEnforced decides until Redis answers again (no failure reason) and
// returns how long that took since from; it gives up after a few seconds.
func waitEnforced(t *testing.T, r *Limiter, chk limiter.Check, from time.Time) time.Duration {
	t.Helper()
	for time.Since(from) < 5*time.Second {
		ds, _ := r.Decide(context.Background(), []limiter.Check{chk}, nil)
		if ds[0].Reason == limiter.ReasonNone || ds[0].Reason == limiter.ReasonLimited {
			return time.Since(from)
		}
		<-time.After(2 * time.Millisecond) // pace the probing requests
	}
	t.Fatalf("enforcement did not come back within 5s")
	return 0
}

func TestRedisRestartedEnforcementResumes(t *testing.T) {
	s := redistest.Start(t)
	leaks := goleak.IgnoreCurrent()
	c := newTestClient(t, failTimeout, s.Addr())
	r := newTestRedis(t, c, Config{Timeout: failTimeout, Logger: slog.New(&logCounter{})})
	e := newTestEngine(t, r)
	chk := limiter.Check{Rule: &limiter.Rule{Name: "restart", Algorithm: limiter.GCRA, OnRedisError: limiter.FailAllow}, Limit: limiter.Limit{Rate: 5, Period: time.Minute}, Key: "k"}
	if d := decideOne(t, r, chk); !d.Allowed {
		t.Fatalf("before the restart: got denied (reason %d), want admitted", d.Reason)
	}

	s.Kill()
	downAt := time.Now()
	for time.Since(downAt) < 700*time.Millisecond {
		if ds, _ := timed(e, chk); ds[0].Reason != limiter.ReasonFailedOpen {
			t.Fatalf("while down: got reason %d, want ReasonFailedOpen", ds[0].Reason)
		}
		<-time.After(2 * time.Millisecond)
	}
	s.Restart()
	recovery := waitEnforced(t, r, chk, time.Now())
	t.Logf("redis restarted: enforcement back after %s", recovery.Round(time.Millisecond))
	if recovery > time.Second {
		t.Fatalf("enforcement came back after %s, want within 1s", recovery)
	}
	// The restart forgot the key's state (no persistence): a fresh burst,
	// then the limit holds again.
	allowed := 1 // the decision that showed recovery was admitted
	for i := 0; i < 10; i++ {
		if d := decideOne(t, r, chk); d.Allowed {
			allowed++
		} else if d.Reason != limiter.ReasonLimited && d.Reason != limiter.ReasonDenialCached {
			t.Fatalf("after restart: got reason %d, want a limit decision", d.Reason)
		}
	}
	if allowed != 5 {
		t.Fatalf("after restart: got %d admitted, want 5 (one fresh burst)", allowed)
	}
	c.Close()
	goleak.VerifyNone(t, leaks)
}

// A long outage makes the breaker's probes fail to dial many times over the
// pool size. go-redis would then stop dialing and re-dial only once a second;
// the gateway's dialer keeps that gate shut, so enforcement comes back at the
// first probe after Redis does (the breaker cooldown, not a second more).
func TestLongOutageDoesNotDelayRecovery(t *testing.T) {
	s := redistest.Start(t)
	leaks := goleak.IgnoreCurrent()
	c, err := redisclient.New(redisclient.Options{Addrs: []string{s.Addr()}, Timeout: failTimeout, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	const cooldown = 20 * time.Millisecond
	r := newTestRedis(t, c, Config{Timeout: failTimeout, BreakerCooldown: cooldown, Logger: slog.New(&logCounter{})})
	e := newTestEngine(t, r)
	chk := limiter.Check{Rule: &limiter.Rule{Name: "long-outage", Algorithm: limiter.GCRA, OnRedisError: limiter.FailAllow}, Limit: limiter.Limit{Rate: 1000, Period: time.Second}, Key: "k"}
	if d := decideOne(t, r, chk); !d.Allowed {
		t.Fatalf("before the outage: got denied (reason %d), want admitted", d.Reason)
	}

	s.Kill()
	downAt := time.Now()
	for time.Since(downAt) < 500*time.Millisecond { // ~25 probes: far over the pool size of 2
		if ds, _ := timed(e, chk); ds[0].Reason != limiter.ReasonFailedOpen {
			t.Fatalf("while down: got reason %d, want ReasonFailedOpen", ds[0].Reason)
		}
		<-time.After(2 * time.Millisecond)
	}
	if st := r.Stats(); st.Errors < 10 {
		t.Fatalf("got %d failed round trips during the outage, want the probes to have failed >= 10 times", st.Errors)
	}
	s.Restart()
	recovery := waitEnforced(t, r, chk, time.Now())
	t.Logf("after a %s outage with pool size 2: enforcement back %s after redis was", time.Since(downAt).Round(time.Millisecond), recovery.Round(time.Millisecond))
	if limit := 10 * cooldown; recovery > limit {
		t.Fatalf("enforcement came back after %s, want within %s (a few breaker cooldowns)", recovery, limit)
	}
	c.Close()
	goleak.VerifyNone(t, leaks)
}
