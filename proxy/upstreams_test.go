package proxy

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy/pool"
)

// floodClients is how many clients a flood runs at once.
const floodClients = 64

// poolGateway serves a gateway whose one route, /, is the pool of members
// with the route settings extra (YAML, "key: value, ..."), its pools on
// clock (nil: the real one).
func poolGateway(t *testing.T, members map[string]string, extra string, clock func() time.Time) (*httptest.Server, *Handler) {
	t.Helper()
	var b strings.Builder
	for _, name := range []string{"a", "b", "c"} {
		if u, ok := members[name]; ok {
			fmt.Fprintf(&b, "{name: %s, url: %q}, ", name, u)
		}
	}
	snap := compileYAML(t, "routes:\n  - {name: api, match: {path_prefix: /}, upstreams: ["+strings.TrimSuffix(b.String(), ", ")+"]"+extra+"}\n")
	holder := &snapshotHolder{}
	holder.p.Store(snap)
	var pools *pool.Pools
	if clock != nil {
		pools = pool.New(pool.Config{Snapshots: holder, Now: clock})
	}
	return newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{pools: pools})
}

// floodResult is what a flood's clients got: each request's status by its
// id ("METHOD n"), 0 for a transport error.
type floodResult struct {
	mu     sync.Mutex
	status map[string]int
}

func (f *floodResult) failed(method string) (ids []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, s := range f.status {
		if strings.HasPrefix(id, method+" ") && s != http.StatusOK {
			ids = append(ids, fmt.Sprintf("%s: %d", id, s))
		}
	}
	return ids
}

// flood sends perClient requests from each of floodClients clients to
// base: every postEvery-th a POST with a small body (0: none), the rest
// GETs, each with a unique X-Request-Id and the header extra. after, when
// set, is called with the count of answers so far after each.
func flood(t *testing.T, base string, perClient, postEvery int, extra http.Header, after func(done int64)) *floodResult {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: floodClients}, Timeout: 20 * time.Second}
	defer client.CloseIdleConnections()
	res := &floodResult{status: map[string]int{}}
	var done atomic.Int64
	var wg sync.WaitGroup
	for c := range floodClients {
		wg.Go(func() {
			for i := range perClient {
				n := c*perClient + i
				method, body := http.MethodGet, io.Reader(nil)
				if postEvery > 0 && n%postEvery == 0 {
					method, body = http.MethodPost, strings.NewReader(`{"n":`+fmt.Sprint(n)+`}`)
				}
				id := fmt.Sprintf("%s %d", method, n)
				req, _ := http.NewRequest(method, base+"/x", body)
				req.Header.Set("X-Request-Id", fmt.Sprint(n))
				for k, v := range extra {
					req.Header[k] = v
				}
				status := 0
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				res.mu.Lock()
				res.status[id] = status
				res.mu.Unlock()
				if d := done.Add(1); after != nil {
					after(d)
				}
			}
		})
	}
	wg.Wait()
	return res
}

func memberStats(h *Handler, name string) pool.MemberStats {
	for _, s := range h.pools.Stats() {
		if s.Member == name {
			return s
		}
	}
	return pool.MemberStats{}
}

// TestPoolMemberKilledMidFlood: one of three members, each a process of
// its own, is killed with SIGKILL while 64 clients send GETs and POSTs.
// Every GET is answered 200 (retried on another member when it broke on
// the dead one, unless the retry budget was spent), no POST reaches the
// members twice, the other two take the traffic, and the dead one is
// ejected.
func TestPoolMemberKilledMidFlood(t *testing.T) {
	a, b, c := startMember(t, "a"), startMember(t, "b"), startMember(t, "c")
	srv, h := poolGateway(t, map[string]string{"a": a.url, "b": b.url, "c": c.url}, ", retry: {attempts: 3}", nil)
	const perClient, postEvery = 40, 4
	var once sync.Once
	var bAtKill, aAtKill, cAtKill int
	res := flood(t, srv.URL, perClient, postEvery, nil, func(done int64) {
		if done == floodClients*perClient/3 {
			once.Do(func() {
				b.kill(t)
				aAtKill, bAtKill, cAtKill = a.received(), b.received(), c.received()
			})
		}
	})
	if bAtKill == 0 {
		t.Fatal("b was not killed mid-flood")
	}
	budget := h.pools.Budget().Stats()
	failedGets := res.failed(http.MethodGet)
	if int64(len(failedGets)) > budget.Refused {
		t.Errorf("%d GETs failed, more than the %d retries the budget refused: %v", len(failedGets), budget.Refused, failedGets)
	}
	failedPosts := res.failed(http.MethodPost)
	total := floodClients * perClient
	for n := 0; n < total; n += postEvery {
		id := fmt.Sprintf("POST %d", n)
		if got := a.times(id) + b.times(id) + c.times(id); got > 1 {
			t.Errorf("%s reached the members %d times", id, got)
		}
	}
	if a.received() == aAtKill || c.received() == cAtKill {
		t.Errorf("after the kill a got %d more, c %d more: want both to take traffic", a.received()-aAtKill, c.received()-cAtKill)
	}
	if st := memberStats(h, "b"); st.Health != pool.Ejected {
		t.Errorf("b after the flood: %s, want ejected", st.Health)
	}
	t.Logf("%d requests; b received %d before the kill; failed: %d GETs, %d POSTs (may have reached b); retries: %+v",
		total, bAtKill, len(failedGets), len(failedPosts), budget)
}

// hungListener accepts connections and never answers; it counts them.
func hungListener(t *testing.T) (url string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int64)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String(), accepted
}

// countingMember answers 200 with its name, or what fail says, and counts
// what it received by X-Request-Id.
type countingMember struct {
	name string
	fail atomic.Int64 // a status to answer instead of 200; 0: none
	n    atomic.Int64
	mu   sync.Mutex
	got  map[string]int
	// answer, when set, answers instead.
	answer func(w http.ResponseWriter, r *http.Request)
}

func newCountingMember(t *testing.T, name string) (*countingMember, string) {
	m := &countingMember{name: name, got: map[string]int{}}
	srv := newUpstream(t, m)
	return m, srv.URL
}

func (m *countingMember) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	m.n.Add(1)
	m.mu.Lock()
	m.got[r.Method+" "+r.Header.Get("X-Request-Id")]++
	m.mu.Unlock()
	if m.answer != nil {
		m.answer(w, r)
		return
	}
	if s := m.fail.Load(); s != 0 {
		w.WriteHeader(int(s))
		return
	}
	io.WriteString(w, m.name)
}

func (m *countingMember) times(id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.got[id]
}

// TestPoolHungMember: a member that accepts and never answers costs the
// requests sent to it a 504 each, failures in a row, then it is ejected
// and the others take everything.
func TestPoolHungMember(t *testing.T) {
	hung, accepted := hungListener(t)
	_, urlB := newCountingMember(t, "b")
	_, urlC := newCountingMember(t, "c")
	clock := newTestClock()
	srv, h := poolGateway(t, map[string]string{"a": hung, "b": urlB, "c": urlC},
		", timeout: 1s, health: {failures: 3}, retry: {}", clock.Now)
	client := srv.Client()
	timeouts := 0
	for range 9 { // round robin: a, b, c three times
		r := do(t, client, http.MethodGet, srv.URL+"/x", nil, nil)
		switch r.status {
		case http.StatusOK:
		case http.StatusGatewayTimeout:
			timeouts++
		default:
			t.Fatalf("got %d, want 200 or 504", r.status)
		}
	}
	if timeouts != 3 {
		t.Errorf("got %d timeouts, want 3 (the hung member's turns)", timeouts)
	}
	if st := memberStats(h, "a"); st.Health != pool.Ejected || st.Errors != 3 {
		t.Fatalf("hung member: %+v, want ejected after 3 errors", st)
	}
	before := accepted.Load()
	res := flood(t, srv.URL, 5, 0, nil, nil)
	if failed := res.failed(http.MethodGet); len(failed) > 0 {
		t.Errorf("with the hung member ejected, %d requests failed: %v", len(failed), failed)
	}
	if n := accepted.Load(); n != before {
		t.Errorf("the ejected member got %d more connections", n-before)
	}
}

// TestPool503Storm: one member answers 503 to everything, with or without
// a Retry-After; 64 clients get 200 from the others, and the member is
// taken out.
func TestPool503Storm(t *testing.T) {
	for _, tc := range []struct {
		name, retryAfter string
		want             pool.Health
	}{{"without Retry-After", "", pool.Ejected}, {"with Retry-After", "60", pool.Held}} {
		t.Run(tc.name, func(t *testing.T) {
			storm, urlA := newCountingMember(t, "a")
			storm.answer = func(w http.ResponseWriter, r *http.Request) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			_, urlB := newCountingMember(t, "b")
			_, urlC := newCountingMember(t, "c")
			clock := newTestClock()
			srv, h := poolGateway(t, map[string]string{"a": urlA, "b": urlB, "c": urlC}, ", retry: {}", clock.Now)
			res := flood(t, srv.URL, 20, 0, nil, nil)
			if failed := res.failed(http.MethodGet); len(failed) > int(h.pools.Budget().Stats().Refused) {
				t.Errorf("%d requests failed (budget refused %d): %v", len(failed), h.pools.Budget().Stats().Refused, failed)
			}
			if st := memberStats(h, "a"); st.Health != tc.want {
				t.Errorf("the storming member: %s, want %s", st.Health, tc.want)
			}
			if n := storm.n.Load(); n > floodClients+10 {
				t.Errorf("the storming member got %d of %d requests: it was not taken out", n, 20*floodClients)
			}
		})
	}
}

// TestPoolAllDownBudgetCapsRetries: every member answers 503. Each request
// may try all three, but the retries in flight stay within the budget (at
// most a fifth of the requests in flight, at least 3), and every attempt
// the members received is a request or a retry the budget granted.
func TestPoolAllDownBudgetCapsRetries(t *testing.T) {
	release := make(chan struct{})
	slow503 := func(w http.ResponseWriter, r *http.Request) {
		// Held until many requests are in flight, so that their retries
		// meet the budget at once.
		select {
		case <-release:
		case <-time.After(20 * time.Millisecond):
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	members := map[string]string{}
	var all []*countingMember
	for _, name := range []string{"a", "b", "c"} {
		m, u := newCountingMember(t, name)
		m.answer = slow503
		members[name] = u
		all = append(all, m)
	}
	srv, h := poolGateway(t, members, ", retry: {attempts: 3}, health: {failures: 1000}", newTestClock().Now)
	const perClient = 10
	res := flood(t, srv.URL, perClient, 0, nil, nil)
	close(release)
	total := floodClients * perClient
	if failed := res.failed(http.MethodGet); len(failed) != total {
		t.Errorf("%d of %d requests failed, want all (every member answers 503)", len(failed), total)
	}
	budget := h.pools.Budget().Stats()
	var attempts int64
	for _, m := range all {
		attempts += m.n.Load()
	}
	if attempts != int64(total)+budget.Granted {
		t.Errorf("members received %d attempts, want %d requests + %d retries granted", attempts, total, budget.Granted)
	}
	if budget.Refused == 0 {
		t.Error("the budget refused no retry while the whole pool was down")
	}
	share := policies.DefaultRetryBudgetShare
	if limit := max(int64(policies.DefaultRetryBudgetMin), int64(share*floodClients)); budget.Peak > limit {
		t.Errorf("%d retries in flight at once, want at most %d", budget.Peak, limit)
	}
	if budget.Granted >= int64(2*total) {
		t.Errorf("%d retries granted: every request retried twice, the budget capped nothing", budget.Granted)
	}
	t.Logf("%d requests, %d attempts: %+v", total, attempts, budget)
}

// TestPoolPostNeverSentTwice: a POST that may have reached a member is
// sent to another only when it carries an Idempotency-Key that the route
// says its members honour; one that never left (a connect error) always
// is. Counted at the members, with 64 clients.
func TestPoolPostNeverSentTwice(t *testing.T) {
	resetAfterRead := func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			conn.Close()
		}
	}
	for _, tc := range []struct {
		name        string
		bad         string // 503, reset, or refused (nothing listens)
		key         bool   // the POSTs carry an Idempotency-Key
		honoured    bool   // retry.idempotency_key
		twiceAllowd bool
	}{
		{"503 without a key", "503", false, false, false},
		{"503 with a key not honoured", "503", true, false, false},
		{"503 with a key honoured", "503", true, true, true},
		{"reset after reading", "reset", false, false, false},
		{"connect refused", "refused", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad, urlA := newCountingMember(t, "a")
			switch tc.bad {
			case "503":
				bad.fail.Store(http.StatusServiceUnavailable)
			case "reset":
				bad.answer = resetAfterRead
			case "refused":
				urlA = closedURL(t)
			}
			b, urlB := newCountingMember(t, "b")
			c, urlC := newCountingMember(t, "c")
			extra := ", retry: {attempts: 3}"
			if tc.honoured {
				extra = ", retry: {attempts: 3, idempotency_key: true}"
			}
			srv, h := poolGateway(t, map[string]string{"a": urlA, "b": urlB, "c": urlC}, extra, newTestClock().Now)
			var header http.Header
			if tc.key {
				header = http.Header{"Idempotency-Key": {"k"}}
			}
			const perClient = 6
			res := flood(t, srv.URL, perClient, 1, header, nil)
			twice, failed := 0, 0
			for n := range floodClients * perClient {
				id := fmt.Sprintf("POST %d", n)
				got := bad.times(id) + b.times(id) + c.times(id)
				switch {
				case got == 0 && res.status[id] == http.StatusOK:
					t.Errorf("%s reached no member, yet was answered", id)
				case got == 0 && tc.bad != "refused":
					t.Errorf("%s reached no member", id)
				case got > 1:
					twice++
				}
				if res.status[id] != http.StatusOK {
					failed++
				}
			}
			if twice > 0 && !tc.twiceAllowd {
				t.Errorf("%d POSTs reached the members twice", twice)
			}
			switch tc.bad {
			case "refused":
				// A connect error is always retried, within the budget.
				if refused := h.pools.Budget().Stats().Refused; int64(failed) > refused {
					t.Errorf("%d POSTs failed, more than the %d retries the budget refused", failed, refused)
				}
			default:
				if !tc.twiceAllowd && int64(failed) != bad.n.Load() {
					t.Errorf("%d POSTs failed, want the %d that reached the bad member", failed, bad.n.Load())
				}
				if bad.n.Load() == 0 {
					t.Error("no POST reached the bad member: the test tested nothing")
				}
			}
			t.Logf("POSTs reaching two members: %d, failed: %d", twice, failed)
		})
	}
}

// TestPoolMemberBackAfterEjection: a member that failed and was ejected
// takes requests again as soon as its ejection (30s, by the injected
// clock) ends, with nothing probing it.
func TestPoolMemberBackAfterEjection(t *testing.T) {
	flaky, urlA := newCountingMember(t, "a")
	flaky.fail.Store(http.StatusInternalServerError)
	_, urlB := newCountingMember(t, "b")
	_, urlC := newCountingMember(t, "c")
	clock := newTestClock()
	srv, h := poolGateway(t, map[string]string{"a": urlA, "b": urlB, "c": urlC}, "", clock.Now)
	client := srv.Client()
	for flaky.n.Load() < 5 {
		do(t, client, http.MethodGet, srv.URL+"/x", nil, nil)
	}
	if st := memberStats(h, "a"); st.Health != pool.Ejected {
		t.Fatalf("after 5 answers of 500: %s, want ejected", st.Health)
	}
	flaky.fail.Store(0) // recovered
	clock.Advance(29 * time.Second)
	for range 6 {
		do(t, client, http.MethodGet, srv.URL+"/x", nil, nil)
	}
	if n := flaky.n.Load(); n != 5 {
		t.Fatalf("29s into its ejection the member got %d requests, want 5", n)
	}
	clock.Advance(time.Second)
	for range 3 { // round robin over three: its turn comes
		if r := do(t, client, http.MethodGet, srv.URL+"/x", nil, nil); r.status != http.StatusOK {
			t.Fatalf("got %d, want 200", r.status)
		}
	}
	if n := flaky.n.Load(); n != 6 {
		t.Errorf("30s on, the member got %d requests in three, want 1 (back)", n-5)
	}
	if st := memberStats(h, "a"); st.Health != pool.Healthy {
		t.Errorf("the recovered member: %s, want healthy", st.Health)
	}
}

// TestPoolRetryChargedOnce: a request that took two attempts (the first
// member answered 503) is decided, and charged, once: the tenant's
// remaining count falls by one a request.
func TestPoolRetryChargedOnce(t *testing.T) {
	bad, urlA := newCountingMember(t, "a")
	bad.fail.Store(http.StatusServiceUnavailable)
	good, urlB := newCountingMember(t, "b")
	snap := compileYAML(t, `
log: {access: true}
routes:
  - {name: api, match: {path_prefix: /}, policies: [per-ip], retry: {}, health: {failures: 1000},
     upstreams: [{name: a, url: "`+urlA+`"}, {name: b, url: "`+urlB+`"}]}
policies:
  per-ip: {key: ip, rate: 100, per: 1m}
`)
	srv, h := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	var logBuf syncBuffer
	h.access = slog.New(slog.NewJSONHandler(&logBuf, nil))
	for i := 1; i <= 10; i++ {
		r := do(t, srv.Client(), http.MethodGet, srv.URL+"/x", nil, nil)
		if r.status != http.StatusOK {
			t.Fatalf("request %d: got %d, want 200 (retried on b)", i, r.status)
		}
		if got, want := r.header.Get("X-RateLimit-Remaining"), fmt.Sprint(100-i); got != want {
			t.Fatalf("request %d: remaining %s, want %s", i, got, want)
		}
	}
	if bad.n.Load() != 5 || good.n.Load() != 10 {
		t.Errorf("a got %d, b %d; want 5 (every other turn) and 10", bad.n.Load(), good.n.Load())
	}
	// The access log names the member that answered, and its retries.
	if n := logBuf.count(`"upstream_member":"b","upstream_retries":1`); n != 5 {
		t.Errorf("%d access log lines name b after a retry, want 5", n)
	}
	if n := logBuf.count(`"upstream_member":"b","upstream_retries":0`); n != 5 {
		t.Errorf("%d access log lines name b at once, want 5", n)
	}
}

// TestExplainPool: explain names the pool's members, their health as the
// running gateway's pools know it, and the member balance: hash sends the
// request to, which is the one serving picks.
func TestExplainPool(t *testing.T) {
	snap := compileYAML(t, `
routes:
  - {name: api, match: {path_prefix: /}, balance: hash, hash_key: "header:X-User", health: {failures: 1},
     upstreams: [{name: a, url: "http://10.0.0.1"}, {name: b, url: "http://10.0.0.2"}, {name: c, url: "http://10.0.0.3"}]}
`)
	holder := &snapshotHolder{}
	holder.p.Store(snap)
	clock := newTestClock()
	pools := pool.New(pool.Config{Snapshots: holder, Now: clock.Now})
	st := pools.For(snap, snap.Routes[0])
	st.Begin(1)
	st.End(1, clock.Now(), pool.Failure, 0, 0) // b ejected
	r := httptest.NewRequest(http.MethodGet, "http://gw/x", nil)
	r.Header.Set("X-User", "u-42")
	e := Explain(snap, r, ExplainOptions{Pools: pools})
	if e.Route == nil || e.Route.Pool == nil {
		t.Fatalf("got route %+v, want a pool", e.Route)
	}
	ep := e.Route.Pool
	var health []string
	for _, m := range ep.Members {
		health = append(health, m.Name+"="+m.Health)
	}
	if got := strings.Join(health, " "); got != "a=healthy b=ejected c=healthy" || !ep.LiveHealth {
		t.Errorf("got %s (live %v), want b ejected, live", got, ep.LiveHealth)
	}
	want := snap.Routes[0].Pool.Members[st.HashPick("u-42")].Name
	if ep.HashPick != want || ep.HashKey != "header:X-User" {
		t.Errorf("got hash pick %q by %q, want %q", ep.HashPick, ep.HashKey, want)
	}
	offline := Explain(snap, r, ExplainOptions{})
	if p := offline.Route.Pool; p.LiveHealth || p.Members[1].Health != "healthy" || p.HashPick != want {
		t.Errorf("offline: got %+v, want every member healthy, not live, the same pick", p)
	}
}

// TestPoolNoRetryOnceTheAnswerStarted: a member that sends its answer's
// headers and part of its body, then drops the connection, is not retried
// even for a GET: the answer is the client's from its headers on.
func TestPoolNoRetryOnceTheAnswerStarted(t *testing.T) {
	cut, urlA := newCountingMember(t, "a")
	cut.answer = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "first bytes")
		http.NewResponseController(w).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}
	other, urlB := newCountingMember(t, "b")
	srv, _ := poolGateway(t, map[string]string{"a": urlA, "b": urlB}, ", retry: {attempts: 2}", newTestClock().Now)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/x", nil)
	req.Header.Set("X-Request-Id", "1")
	// The gateway relays the answer as it comes, and cuts it when the
	// member does: the client sees a broken answer (the headers, when they
	// were flushed, then a cut), never a second member's.
	if resp, err := srv.Client().Do(req); err == nil {
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr == nil || string(body) == "b" {
			t.Errorf("got %d %q, read error %v; want a cut answer", resp.StatusCode, body, rerr)
		}
	}
	if cut.times("GET 1") != 1 || other.n.Load() != 0 {
		t.Errorf("a got it %d times, b %d requests; want 1 and 0: no retry once the answer started", cut.times("GET 1"), other.n.Load())
	}
}

// TestPoolLeastRequestCountsStreams: under least_request a member is busy
// for as long as its answer flows, not only until its headers: while a
// stream is open on it, the requests go to the idle members.
func TestPoolLeastRequestCountsStreams(t *testing.T) {
	release := make(chan struct{})
	streaming := make(chan struct{}, 64)
	slow, urlA := newCountingMember(t, "a")
	slow.answer = func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first")
		http.NewResponseController(w).Flush()
		streaming <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	t.Cleanup(func() { close(release) })
	_, urlB := newCountingMember(t, "b")
	_, urlC := newCountingMember(t, "c")
	srv, _ := poolGateway(t, map[string]string{"a": urlA, "b": urlB, "c": urlC}, ", balance: least_request", nil)
	client := srv.Client()
	// Requests until one lands on a and streams there (the others return).
	var open []*http.Response
	t.Cleanup(func() {
		for _, r := range open {
			r.Body.Close()
		}
	})
	for len(streaming) == 0 {
		resp, err := client.Get(srv.URL + "/stream")
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 5)
		io.ReadFull(resp.Body, buf)
		open = append(open, resp) // a's stays open; b's and c's are read whole
	}
	before := slow.n.Load()
	for range 30 {
		if r := do(t, client, http.MethodGet, srv.URL+"/x", nil, nil); r.status != http.StatusOK {
			t.Fatalf("got %d, want 200", r.status)
		}
	}
	if n := slow.n.Load() - before; n != 0 {
		t.Errorf("a got %d of 30 requests while a stream was open on it, want 0", n)
	}
}
