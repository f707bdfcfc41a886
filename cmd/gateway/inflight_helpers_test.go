package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Helpers of the end-to-end tests of shared_concurrency over HTTP: an
// upstream that holds requests until the test lets them go, and a look at
// the lease sets on Redis.

// inflightConfig is one route to an upstream (%[2]s) under one
// shared_concurrency policy, "inflight", keyed on X-Tenant, of limit %[3]d
// and lease %[4]s, on the Redis at %[1]s. The decision deadline is long and
// a failed decision denies, so that a slow machine under -race shows up as
// a 503, never as a request let through unchecked.
const inflightConfig = `
server:
  listen: 127.0.0.1:0
redis:
  addrs: [%[1]s]
  timeout: 1s
  queue_timeout: 2s
routes:
  - name: held
    match: {path_prefix: /}
    upstream: %[2]s
    policies: [inflight]
policies:
  inflight: {key: "header:X-Tenant", algorithm: shared_concurrency, limit: %[3]d, lease: %[4]s, on_redis_error: deny}
`

// inflightPolicy is the policy of inflightConfig.
const inflightPolicy = "inflight"

// What the held upstream does with a request, chosen by its X-Mode header.
const (
	modeFast   = "fast"   // answers at once
	modeHold   = "hold"   // answers when released; ends early if the request ends
	modeSlow   = "slow"   // answers when released, or at once after letGo
	modeHangUp = "hangup" // hangs the client up (its X-Request id) while holding it
	modeCut    = "cut"    // sends the first bytes of the body, then waits for the client to hang up
)

// firstBytes is what a modeCut request gets before its client hangs up.
const firstBytes = "first bytes\n"

// heldUpstream is an upstream on loopback that counts what it serves. It
// never sleeps: held requests wait for the test (release), for their
// context, or for the test's end.
type heldUpstream struct {
	url     string
	release chan struct{} // each value lets one held request answer
	arrived chan struct{} // one value per modeHold request that reached it
	gone    chan struct{} // one value per modeHold request whose context ended first
	quit    chan struct{} // closed by stop: every handler returns
	once    sync.Once
	unheld  chan struct{} // closed by letGo: modeSlow requests answer at once
	letOnce sync.Once

	// hangUps maps the X-Request id of a modeHangUp request to the cancel
	// function of the client's request context.
	hangUps sync.Map

	// inFlight counts requests the upstream works on: from arrival to the
	// answer, or, for a client that hangs up, to the instant the upstream
	// hangs it up (modeHangUp) or sent it its first bytes (modeCut). From
	// then on the handler only waits to see the hang-up, which reaches it
	// after the gateway gave the slot back (and maybe after another request
	// took it): running counts handlers until they return.
	inFlight, maxInFlight atomic.Int64
	running, maxRunning   atomic.Int64

	hungUp, cut atomic.Int64 // hang-ups the upstream saw as the end of r.Context()
	unexpected  atomic.Int64 // requests it could not serve as asked
}

// newHeldUpstream starts a heldUpstream on 127.0.0.1. It stops when the
// test ends; call stop earlier (in a later Cleanup) to let held requests end
// before a gateway drains.
func newHeldUpstream(t *testing.T) *heldUpstream {
	u := &heldUpstream{
		release: make(chan struct{}),
		arrived: make(chan struct{}, 64),
		gone:    make(chan struct{}, 64),
		quit:    make(chan struct{}),
		unheld:  make(chan struct{}),
	}
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	t.Cleanup(u.stop) // before srv.Close, which waits for the handlers
	u.url = srv.URL
	return u
}

// stop makes every handler return; it may be called more than once.
func (u *heldUpstream) stop() { u.once.Do(func() { close(u.quit) }) }

// letGo makes modeSlow requests answer without waiting for a release; it
// may be called more than once.
func (u *heldUpstream) letGo() { u.letOnce.Do(func() { close(u.unheld) }) }

// note sends on ch unless the test ended.
func (u *heldUpstream) note(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	case <-u.quit:
	}
}

func raise(m *atomic.Int64, n int64) {
	for {
		old := m.Load()
		if n <= old || m.CompareAndSwap(old, n) {
			return
		}
	}
}

func (u *heldUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raise(&u.maxRunning, u.running.Add(1))
	defer u.running.Add(-1)
	raise(&u.maxInFlight, u.inFlight.Add(1))
	left := false
	leave := func() {
		if !left {
			left = true
			u.inFlight.Add(-1)
		}
	}
	defer leave()

	switch r.Header.Get("X-Mode") {
	case modeFast:
		io.WriteString(w, "ok")
	case modeHold:
		u.note(u.arrived)
		select {
		case <-u.release:
			io.WriteString(w, "ok")
		case <-r.Context().Done():
			leave()
			u.note(u.gone)
		case <-u.quit:
		}
	case modeSlow:
		select {
		case <-u.release:
		case <-u.unheld:
		case <-r.Context().Done():
			return
		case <-u.quit:
			return
		}
		io.WriteString(w, "ok")
	case modeHangUp:
		cancel, ok := u.hangUps.LoadAndDelete(r.Header.Get("X-Request"))
		if !ok {
			u.unexpected.Add(1)
			http.Error(w, "no client to hang up", http.StatusInternalServerError)
			return
		}
		leave()
		cancel.(context.CancelFunc)()
		select {
		case <-r.Context().Done():
			u.hungUp.Add(1)
		case <-u.quit:
		}
	case modeCut:
		leave()
		io.WriteString(w, firstBytes)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			u.cut.Add(1)
		case <-u.quit:
		}
	default:
		u.unexpected.Add(1)
		http.Error(w, "unknown X-Mode", http.StatusBadRequest)
	}
}

// asyncReply is the outcome of a request sent by goSend.
type asyncReply struct {
	r   reply
	err error
}

// goSend sends GET base/ as tenant "a" with mode, in a goroutine of wg; the
// outcome arrives on the returned channel.
func goSend(wg *sync.WaitGroup, c *http.Client, base, mode string) <-chan asyncReply {
	ch := make(chan asyncReply, 1)
	wg.Go(func() {
		r, err := send(c, http.MethodGet, base+"/", "X-Tenant", "a", "X-Mode", mode)
		ch <- asyncReply{r, err}
	})
	return ch
}

// receiveN waits for n values on ch, failing after 10s.
func receiveN(t *testing.T, ch <-chan struct{}, n int, what string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for i := range n {
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s: got %d within 10s, want %d", what, i, n)
		}
	}
}

// receiveReply waits for one outcome of goSend, failing after 10s.
func receiveReply(t *testing.T, ch <-chan asyncReply, what string) asyncReply {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer within 10s", what)
		return asyncReply{}
	}
}

// wantRefused fails unless r is the 429 of a full in-flight limit: code
// 42900 naming policy, Retry-After 1.
func wantRefused(t *testing.T, r reply, policy, what string) {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("%s: got %d %s, want 429", what, r.status, r.body)
	}
	if e := r.errorBody(t); e.Code != 42900 || e.Policy != policy {
		t.Fatalf("%s: got code %d naming %q, want 42900 naming %q", what, e.Code, e.Policy, policy)
	}
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Fatalf("%s: got Retry-After %q, want 1", what, got)
	}
}

// newRedisReader returns a client of the Redis at addr for inspecting the
// gateway's keys; it is closed when the test ends.
func newRedisReader(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// leases reads every lease set of policy (rl:{<policy>:<digest>}:cc) and
// returns each lease's expiry, in Redis's Unix milliseconds, by holder, and
// Redis's time.
func leases(t *testing.T, rdb *redis.Client, policy string) (expiry map[string]int64, now time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := rdb.Keys(ctx, "rl:{"+policy+":*}"+":cc").Result()
	if err != nil {
		t.Fatalf("listing the lease sets of %s: %v", policy, err)
	}
	expiry = map[string]int64{}
	for _, k := range keys {
		zs, err := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		if err != nil {
			t.Fatalf("reading lease set %s: %v", k, err)
		}
		for _, z := range zs {
			member, ok := z.Member.(string)
			if !ok {
				t.Fatalf("lease set %s: member %v is a %T, want a string", k, z.Member, z.Member)
			}
			expiry[k+" "+member] = int64(z.Score)
		}
	}
	if now, err = rdb.Time(ctx).Result(); err != nil {
		t.Fatalf("redis TIME: %v", err)
	}
	return expiry, now
}

// leaseCount returns how many leases policy's lease sets hold (ZCARD, over
// every set) and how many of them have not lapsed by Redis's clock.
func leaseCount(t *testing.T, rdb *redis.Client, policy string) (all, live int) {
	t.Helper()
	expiry, now := leases(t, rdb, policy)
	for _, ms := range expiry {
		if ms > now.UnixMilli() { // the script trims scores <= now
			live++
		}
	}
	return len(expiry), live
}

// pollUntil calls cond every 10ms until it returns true, failing after
// bound; it returns how long that took.
func pollUntil(t *testing.T, bound time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %s", what, bound.Round(time.Millisecond))
		}
		<-tick.C
	}
	return time.Since(start)
}

// holdAll proves that the limit is whole again: limit requests through base
// are held at u at once, one more is refused naming the policy, and once
// released all of them answer 200.
func holdAll(t *testing.T, c *http.Client, u *heldUpstream, base string, limit int) {
	t.Helper()
	var wg sync.WaitGroup
	defer func() {
		if t.Failed() {
			u.stop() // the held requests end, so their goroutines do
		}
		wg.Wait()
	}()
	held := make([]<-chan asyncReply, limit)
	for i := range held {
		held[i] = goSend(&wg, c, base, modeHold)
	}
	receiveN(t, u.arrived, limit, fmt.Sprintf("requests held at the upstream out of %d", limit))
	wantRefused(t, mustSend(t, c, http.MethodGet, base+"/", "X-Tenant", "a", "X-Mode", modeFast), inflightPolicy,
		"request "+strconv.Itoa(limit+1)+" while "+strconv.Itoa(limit)+" are held")
	for range held {
		select {
		case u.release <- struct{}{}:
		case <-time.After(10 * time.Second):
			t.Fatal("no held request took its release within 10s")
		}
	}
	for i, ch := range held {
		a := receiveReply(t, ch, fmt.Sprintf("held request %d", i+1))
		if a.err != nil || a.r.status != http.StatusOK {
			t.Fatalf("held request %d after its release: got %d %s (%v), want 200", i+1, a.r.status, a.r.body, a.err)
		}
	}
}
