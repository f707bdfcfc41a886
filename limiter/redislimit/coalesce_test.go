package redislimit

import (
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// 200 concurrent calls while the first pipeline is held: every command is
// sent exactly once, every call returns with its reply, no more than max
// pipelines are ever in flight, and the waiting calls share pipelines.
func TestCoalescerSendsEveryCallOnceInSharedPipelines(t *testing.T) {
	const calls, max = 200, 2
	hold := make(chan struct{})
	var inFlight, peak, pipelines atomic.Int64
	sent := sync.Map{}
	co := newCoalescer(max, 0, func(ctx context.Context, cmds []redis.Cmder) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if pipelines.Add(1) <= max {
			<-hold
		}
		for _, c := range cmds {
			if _, dup := sent.LoadOrStore(c, true); dup {
				t.Errorf("command %v sent twice", c.Args())
			}
			c.(*redis.Cmd).SetVal(c.Args()[1])
		}
		inFlight.Add(-1)
	}, nil)
	var wg sync.WaitGroup
	var queued atomic.Int64
	for i := range calls {
		wg.Go(func() {
			cmd := redis.NewCmd(context.Background(), "echo", i)
			queued.Add(1)
			co.do(context.Background(), []redis.Cmder{cmd})
			if v, err := cmd.Result(); err != nil || v != i {
				t.Errorf("call %d: reply %v, %v", i, v, err)
			}
		})
	}
	// Let the calls pile up behind the held pipelines, then release them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		co.mu.Lock()
		waiting := len(co.queue)
		co.mu.Unlock()
		if waiting >= calls-max || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	close(hold)
	wg.Wait()
	if peak.Load() > max {
		t.Fatalf("%d pipelines in flight at once, want at most %d", peak.Load(), max)
	}
	if p := pipelines.Load(); p >= calls/10 {
		t.Fatalf("%d pipelines for %d calls, want them shared (under %d)", p, calls, calls/10)
	}
	t.Logf("%d calls in %d pipelines, at most %d at once", calls, pipelines.Load(), peak.Load())
}

// pingThrough sends one command through co and checks that the fake exec
// of the coalescer tests answered it "ok".
func pingThrough(t *testing.T, co *coalescer) {
	cmd := redis.NewCmd(context.Background(), "ping")
	co.do(context.Background(), []redis.Cmder{cmd})
	if v, err := cmd.Result(); err != nil || v != "ok" {
		t.Errorf("reply %v, %v", v, err)
	}
}

// waitFor polls cond until it holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
}

// Under load (the recent pipelines carried gatherAt calls or more), one
// pipeline carries the calls until a full batch waits: behind a held
// pipeline, maxBatch-1 waiting calls start none, the next one sends them
// all in a second.
func TestCoalescerUnderLoadStartsAnotherPipelineOnlyForAFullBatch(t *testing.T) {
	const max = 4
	hold := make(chan struct{})
	var sizes sync.Map // pipeline number -> calls carried
	var pipelines atomic.Int64
	co := newCoalescer(max, 0, func(ctx context.Context, cmds []redis.Cmder) {
		n := pipelines.Add(1)
		sizes.Store(n, len(cmds))
		if n == 1 {
			<-hold
		}
		for _, c := range cmds {
			c.(*redis.Cmd).SetVal("ok")
		}
	}, nil)
	co.avg = 16 * gatherAt // as after pipelines of gatherAt calls each
	var wg sync.WaitGroup
	call := func() { wg.Go(func() { pingThrough(t, co) }) }
	queued := func() int {
		co.mu.Lock()
		defer co.mu.Unlock()
		return len(co.queue)
	}
	call()
	waitFor(t, "the first pipeline", func() bool { return pipelines.Load() == 1 })
	for range maxBatch - 1 {
		call()
	}
	waitFor(t, "a batch less one queued", func() bool { return queued() == maxBatch-1 })
	if p := pipelines.Load(); p != 1 {
		t.Fatalf("%d pipelines with %d calls waiting, want 1", p, maxBatch-1)
	}
	call()
	waitFor(t, "a second pipeline", func() bool { return pipelines.Load() == 2 })
	if n, _ := sizes.Load(int64(2)); n != maxBatch {
		t.Fatalf("the second pipeline carried %v calls, want %d", n, maxBatch)
	}
	if q := queued(); q != 0 {
		t.Fatalf("%d calls still waiting", q)
	}
	close(hold)
	wg.Wait()
	if p := pipelines.Load(); p != 2 {
		t.Fatalf("%d pipelines for %d calls, want 2", p, maxBatch+1)
	}
}

// Under light load (the recent pipelines carried a call or two), a call
// does not wait a round trip behind a pipeline in flight: behind a held
// one, calls start their own until max are in flight, and only then queue.
func TestCoalescerUnderLightLoadStartsPipelinesAtOnce(t *testing.T) {
	const max = 4
	hold := make(chan struct{})
	var pipelines atomic.Int64
	co := newCoalescer(max, 0, func(ctx context.Context, cmds []redis.Cmder) {
		if pipelines.Add(1) <= max {
			<-hold
		}
		for _, c := range cmds {
			c.(*redis.Cmd).SetVal("ok")
		}
	}, nil)
	var wg sync.WaitGroup
	call := func() { wg.Go(func() { pingThrough(t, co) }) }
	for i := range max {
		call()
		waitFor(t, "a pipeline of its own", func() bool { return pipelines.Load() == int64(i+1) })
	}
	const queued = 2 * gatherAt
	for range queued {
		call()
	}
	waitFor(t, "the calls to queue", func() bool {
		co.mu.Lock()
		defer co.mu.Unlock()
		return len(co.queue) == queued
	})
	if p := pipelines.Load(); p != max {
		t.Fatalf("%d pipelines, want %d", p, max)
	}
	close(hold)
	wg.Wait()
	// The queued calls left together, in one pipeline.
	if p := pipelines.Load(); p != max+1 {
		t.Fatalf("%d pipelines for %d calls, want %d", p, max+queued, max+1)
	}
}

// On a real Redis, 64 goroutines deciding one gcra key at once: every
// decision is right (admitted exactly the burst), and the decisions shared
// pipelines (fewer pipelines than round trips).
func TestPipelinesGatherConcurrentDecisions(t *testing.T) {
	s := redistest.Start(t)
	r := newTestRedis(t, newTestClient(t, 2*time.Second, s.Addr()), Config{Timeout: 2 * time.Second})
	e := newTestEngine(t, r)
	rule := &limiter.Rule{Name: "gathered", Algorithm: limiter.GCRA}
	lim := limiter.Limit{Rate: 100, Period: time.Hour, Burst: 100}
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range 64 {
		wg.Go(func() {
			for range 10 {
				v, err := e.Decide(context.Background(), []limiter.Check{{Rule: rule, Limit: lim, Key: "k"}})
				if err != nil {
					t.Error(err)
					return
				}
				if v.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	st := r.Stats()
	if admitted.Load() != 100 {
		t.Fatalf("admitted %d of 640, want exactly the burst of 100", admitted.Load())
	}
	if st.Pipelines >= st.RoundTrips {
		t.Fatalf("pipelines %d for %d round trips: want them shared", st.Pipelines, st.RoundTrips)
	}
	t.Logf("640 decisions: %d round trips in %d pipelines, %d denied from the cache", st.RoundTrips, st.Pipelines, st.DenialCacheHits)
}

// Merged decisions are the decisions made one by one: on a real Redis, a
// pipeline of decideScript calls merged into one decideManyScript call
// gives each call its own reply, each request all or nothing, in order
// (the second request on a key of burst 1 sees the first one's record),
// and leaves other commands alone.
func TestMergedDecisionsAreSequential(t *testing.T) {
	s := redistest.Start(t)
	client := newTestClient(t, 2*time.Second, s.Addr())
	r := newTestRedis(t, client, Config{Timeout: 2 * time.Second})
	ctx := context.Background()
	one := limiter.Check{Rule: &limiter.Rule{Name: "m-gcra", Algorithm: limiter.GCRA}, Limit: limiter.Limit{Rate: 1, Period: time.Hour, Burst: 1}}
	win := limiter.Check{Rule: &limiter.Rule{Name: "m-fixed", Algorithm: limiter.FixedWindow}, Limit: limiter.Limit{Rate: 5, Period: time.Hour, Burst: 5}}
	ping := redis.NewCmd(ctx, "ping")
	cmds := []redis.Cmder{
		decideCall(t, "a", one, win), // admitted: both recorded
		ping,
		decideCall(t, "a", one, win), // gcra denies: nothing recorded, the window keeps 4
		decideCall(t, "b", one),      // another key: admitted
	}
	execMerged(t, r, cmds, 2) // the ping and one script call
	if v, err := ping.Result(); err != nil || v != "PONG" {
		t.Fatalf("ping: %v %v", v, err)
	}
	want := []struct {
		allowed  []bool
		recorded bool
	}{{[]bool{true, true}, true}, {[]bool{false, true}, false}, {[]bool{true}, true}}
	for i, c := range []redis.Cmder{cmds[0], cmds[2], cmds[3]} {
		checkDecideReply(t, i, c, want[i].allowed, want[i].recorded)
	}
	// The window counted the first request only.
	v, err := client.Get(ctx, redisBaseKey("m-fixed", digestKey("a"))+fixedSuffix).Int64()
	if err != nil || v != 1 {
		t.Fatalf("fixed window count %d %v, want 1", v, err)
	}
}

// A merged call walks checks of every algorithm, whose keys and arguments
// differ in number (the sliding window has two keys, the sliding window
// and leases a member): each request gets its own replies and records all
// or nothing, whatever its neighbours carry.
func TestMergedCallCarriesEveryAlgorithm(t *testing.T) {
	s := redistest.Start(t)
	client := newTestClient(t, 2*time.Second, s.Addr())
	r := newTestRedis(t, client, Config{Timeout: 2 * time.Second})
	ctx := context.Background()
	hour := func(name string, alg limiter.Algorithm, n int64) limiter.Check {
		return limiter.Check{Rule: &limiter.Rule{Name: name, Algorithm: alg}, Limit: limiter.Limit{Rate: n, Period: time.Hour, Burst: n}}
	}
	sw, cc := hour("e-sw", limiter.SlidingWindow, 2), hour("e-cc", limiter.SharedConcurrency, 1)
	g, fw := hour("e-gcra", limiter.GCRA, 5), hour("e-fw", limiter.FixedWindow, 5)
	cmds := []redis.Cmder{
		decideCall(t, "k", sw, g),     // admitted: the log 1, the TAT one interval ahead
		decideCall(t, "k", cc, fw),    // admitted: the lease held, the window 1
		decideCall(t, "k", cc, sw),    // the lease is taken: nothing recorded
		decideCall(t, "k", sw, fw, g), // admitted: the log 2, the window 2
		decideCall(t, "k", g, sw),     // the log is full: nothing recorded
	}
	execMerged(t, r, cmds, 1)
	want := []struct {
		allowed  []bool
		recorded bool
	}{
		{[]bool{true, true}, true},
		{[]bool{true, true}, true},
		{[]bool{false, true}, false},
		{[]bool{true, true, true}, true},
		{[]bool{true, false}, false},
	}
	for i, c := range cmds {
		checkDecideReply(t, i, c, want[i].allowed, want[i].recorded)
	}
	base := func(c limiter.Check) string { return redisBaseKey(c.Rule.Name, digestKey("k")) }
	for _, st := range []struct {
		what string
		got  func() (int64, error)
		want int64
	}{
		{"sliding log entries", client.ZCard(ctx, base(sw)+slidingLogSuffix).Result, 2},
		{"sliding sum", client.Get(ctx, base(sw)+slidingSumSuffix).Int64, 2},
		{"leases", client.ZCard(ctx, base(cc)+concurrencySuffix).Result, 1},
		{"fixed window count", client.Get(ctx, base(fw)+fixedSuffix).Int64, 2},
	} {
		if n, err := st.got(); err != nil || n != st.want {
			t.Errorf("%s: %d %v, want %d", st.what, n, err, st.want)
		}
	}
	// Two GCRA requests were recorded: the key's TAT is two intervals (24
	// minutes at 5 an hour) ahead of now, give or take the test's time.
	ttl, err := client.TTL(ctx, gcraKeyPrefix+base(g)).Result()
	if err != nil || ttl < 23*time.Minute || ttl > 25*time.Minute {
		t.Errorf("gcra key TTL %v %v, want about 24m", ttl, err)
	}
}

// A merged call that carries many requests of one hot GCRA key reads its
// TAT once and writes it once, and still decides as one by one: each
// request sees the records of the ones before it, a request another check
// denies moves nothing, and what is written at the end is the last
// record's TAT with its expiry.
func TestMergedHotKeyIsDecidedInOrder(t *testing.T) {
	s := redistest.Start(t)
	client := newTestClient(t, 2*time.Second, s.Addr())
	r := newTestRedis(t, client, Config{Timeout: 2 * time.Second})
	ctx := context.Background()
	g := limiter.Check{Rule: &limiter.Rule{Name: "hot-gcra", Algorithm: limiter.GCRA}, Limit: limiter.Limit{Rate: 1, Period: time.Hour, Burst: 3}}
	w := limiter.Check{Rule: &limiter.Rule{Name: "hot-fixed", Algorithm: limiter.FixedWindow}, Limit: limiter.Limit{Rate: 1, Period: time.Hour, Burst: 1}}
	base := func(c limiter.Check) string { return redisBaseKey(c.Rule.Name, digestKey("hot")) }
	cmds := []redis.Cmder{
		decideCall(t, "hot", g),    // admitted: the TAT one hour ahead
		decideCall(t, "hot", g, w), // both admitted: two hours
		decideCall(t, "hot", g, w), // the window denies: nothing moves
		decideCall(t, "hot", g),    // admitted: three hours, the burst used up
		decideCall(t, "hot", g),    // denied for an hour
	}
	execMerged(t, r, cmds, 1)
	want := []struct {
		allowed  []bool
		resetH   float64 // the GCRA check's reset after, in hours
		recorded bool
	}{
		{[]bool{true}, 1, true},
		{[]bool{true, true}, 2, true},
		{[]bool{true, false}, 3, false},
		{[]bool{true}, 3, true},
		{[]bool{false}, 3, false},
	}
	for i, c := range cmds {
		replies := checkDecideReply(t, i, c, want[i].allowed, want[i].recorded)
		// A denied check's reset is the TAT it found; an admitted one's the
		// TAT it would leave.
		if got := replies[0].resetAfter.Hours(); math.Abs(got-want[i].resetH) > 1e-3 {
			t.Fatalf("call %d: reset after %.4fh, want %vh", i, got, want[i].resetH)
		}
	}
	// Written once at the end: the last record's TAT, three hours ahead,
	// and its expiry; the window counted the second request only.
	ttl, err := client.TTL(ctx, gcraKeyPrefix+base(g)).Result()
	if err != nil || ttl < 3*time.Hour-time.Minute || ttl > 3*time.Hour {
		t.Fatalf("GCRA key TTL %v %v, want 3h", ttl, err)
	}
	if n, err := client.Get(ctx, base(w)+fixedSuffix).Int64(); err != nil || n != 1 {
		t.Fatalf("fixed window count %d %v, want 1", n, err)
	}
	// A lone call after it finds the burst used up.
	lone := decideCall(t, "hot", g)
	r.execOn(ctx, r.single, []redis.Cmder{lone})
	v, err := lone.Result()
	if err != nil {
		t.Fatal(err)
	}
	if replies, _, err := parseDecideReply(v, 1); err != nil || replies[0].allowed {
		t.Fatalf("lone call after the merged one: %+v %v, want denied", replies, err)
	}
}

// decideCall builds the decideScript call of one request whose checks
// are all on key, as decideAll would.
func decideCall(t testing.TB, key string, checks ...limiter.Check) *redis.IntSliceCmd {
	t.Helper()
	return decideCallMode(t, key, modeRecord, checks...)
}

// decideCallMode is decideCall in a mode of choice (record or peek).
func decideCallMode(t testing.TB, key string, mode scriptMode, checks ...limiter.Check) *redis.IntSliceCmd {
	t.Helper()
	ops := make([]*sharedOp, len(checks))
	for i, c := range checks {
		d := digestKey(key)
		ops[i] = &sharedOp{check: c, cost: 1, digest: d, base: redisBaseKey(c.Rule.Name, d)}
		ops[i].memberID = "m" + strconv.FormatInt(testMembers.Add(1), 10)
	}
	cmd, err := decideCmd(context.Background(), ops, mode)
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// testMembers numbers decideCall's log entries and leases.
var testMembers atomic.Int64

// execMerged merges cmds as a shared pipeline does, checks that they
// became want commands, runs them and hands each call its reply.
func execMerged(t *testing.T, r *Limiter, cmds []redis.Cmder, want int) {
	t.Helper()
	merged, split := mergeDecides(cmds)
	if len(merged) != want {
		t.Fatalf("merged into %d commands, want %d", len(merged), want)
	}
	r.execOn(context.Background(), r.single, merged)
	split()
}

// checkDecideReply fails the test unless call i's decideScript reply
// admits as allowed says, check by check, and was recorded or not; it
// returns the parsed replies.
func checkDecideReply(t *testing.T, i int, cmd redis.Cmder, allowed []bool, recorded bool) []scriptReply {
	t.Helper()
	c, ok := cmd.(*redis.IntSliceCmd)
	if !ok {
		t.Fatalf("call %d: a %T, want a decideScript call", i, cmd)
	}
	v, err := c.Result()
	if err != nil {
		t.Fatalf("call %d: %v", i, err)
	}
	replies, rec, err := parseDecideReply(v, len(allowed))
	if err != nil {
		t.Fatalf("call %d: %v", i, err)
	}
	for j, rep := range replies {
		if rep.allowed != allowed[j] {
			t.Fatalf("call %d check %d: allowed %v, want %v", i, j, rep.allowed, allowed[j])
		}
	}
	if rec != recorded {
		t.Fatalf("call %d: recorded %v, want %v", i, rec, recorded)
	}
	return replies
}

// With pipelines, decisions beyond the pool size ride in the pipelines
// instead of queueing for a connection: a pool of one, a queue timeout of a
// millisecond, Redis holding every client (CLIENT PAUSE) while 64
// goroutines decide at once. Each decision holding a slot of its own would
// leave 63 of them overloaded (429) after a millisecond; gathered, every one
// is decided by Redis, exactly (the burst of 40 admitted, the rest denied),
// in pipelines shared by many.
func TestGatheredDecisionsDoNotQueueForConnections(t *testing.T) {
	s := redistest.Start(t)
	client := newTestClient(t, 5*time.Second, s.Addr())
	r := newTestRedis(t, client, Config{Timeout: 5 * time.Second, MaxInFlight: 1, QueueTimeout: time.Millisecond, Pipelines: 1})
	e := newTestEngine(t, r)
	rule := &limiter.Rule{Name: "paused", Algorithm: limiter.GCRA}
	lim := limiter.Limit{Rate: 40, Period: time.Hour, Burst: 40}
	pauser := newTestClient(t, 5*time.Second, s.Addr())
	if err := pauser.ClientPause(context.Background(), 300*time.Millisecond).Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	const n = 64
	var wg sync.WaitGroup
	var admitted, denied atomic.Int64
	for range n {
		wg.Go(func() {
			v, err := e.Decide(context.Background(), []limiter.Check{{Rule: rule, Limit: lim, Key: "k"}})
			if err != nil {
				t.Error(err)
				return
			}
			d := v.Decisions[0]
			switch {
			case d.Reason == limiter.ReasonOverloaded:
				t.Errorf("a decision was overloaded: it queued for a connection instead of riding a pipeline")
			case v.Allowed:
				admitted.Add(1)
			default:
				denied.Add(1)
			}
		})
	}
	wg.Wait()
	st := r.Stats()
	if admitted.Load() != 40 || denied.Load() != n-40 {
		t.Fatalf("admitted %d, denied %d, want exactly the burst of 40 and %d", admitted.Load(), denied.Load(), n-40)
	}
	if st.Overloaded != 0 || st.Pipelines >= n/2 {
		t.Fatalf("overloaded %d, %d pipelines for %d decisions: want none overloaded, pipelines shared", st.Overloaded, st.Pipelines, n)
	}
	t.Logf("%d decisions: %d round trips in %d pipelines", n, st.RoundTrips, st.Pipelines)
}

// A pipeline has the whole timeout from when it is sent, whatever its
// members spent waiting for it: a call whose own deadline has nearly passed
// (it waited behind other pipelines) does not make the round trip look
// slow. A member's later deadline (a probe's) still wins.
func TestPipelineHasTheTimeoutFromWhenItIsSent(t *testing.T) {
	const timeout = time.Hour
	var got time.Time
	co := newCoalescer(1, timeout, func(ctx context.Context, cmds []redis.Cmder) {
		got, _ = ctx.Deadline()
		for _, c := range cmds {
			c.(*redis.Cmd).SetVal("ok")
		}
	}, nil)
	for _, tt := range []struct {
		name    string
		own     time.Duration // the member's deadline, from now
		atLeast time.Duration
	}{
		{"waited: nearly out of time", time.Millisecond, timeout - time.Minute},
		{"a later deadline of its own", 2 * timeout, 2*timeout - time.Minute},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), tt.own)
		before := time.Now()
		co.do(ctx, []redis.Cmder{redis.NewCmd(ctx, "ping")})
		cancel()
		if got.Sub(before) < tt.atLeast {
			t.Errorf("%s: the pipeline's deadline was %s after it was sent, want at least %s", tt.name, got.Sub(before), tt.atLeast)
		}
	}
}

// A deadline-only context says the earlier deadline and keeps its parent's
// cancellation and values; it starts no timer (it is never Done by itself).
func TestWithDeadlineSaysTheEarlierDeadline(t *testing.T) {
	type key struct{}
	base := time.Now()
	parent, cancel := context.WithDeadline(context.WithValue(context.Background(), key{}, "v"), base.Add(time.Hour))
	defer cancel()

	ctx := withDeadline(parent, base.Add(time.Second))
	if dl, ok := ctx.Deadline(); !ok || !dl.Equal(base.Add(time.Second)) {
		t.Errorf("deadline %v %v, want the second from now", dl, ok)
	}
	if ctx.Value(key{}) != "v" {
		t.Error("the parent's value is lost")
	}
	if dl, _ := withDeadline(parent, base.Add(2*time.Hour)).Deadline(); !dl.Equal(base.Add(time.Hour)) {
		t.Errorf("a later deadline replaced the parent's earlier one: %v", dl)
	}
	past := withDeadline(context.Background(), base.Add(-time.Second))
	if past.Err() != nil {
		t.Error("a deadline-only context ended by itself")
	}
	cancel()
	if ctx.Err() != context.Canceled {
		t.Errorf("Err after the parent's cancel = %v, want Canceled", ctx.Err())
	}
}
