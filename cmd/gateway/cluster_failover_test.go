package main

import (
	"cmp"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// The shape of the HTTP failover flood: 24 clients over 30 users (a
// fail-closed limit none reaches), every fourth request on one hot user of
// the master that dies, whose limit the flood exceeds.
const (
	failoverClients = 24
	failoverUsers   = 30
	// failoverRecover is the bound docs/redis.md states from a master's
	// SIGKILL to enforcement through its promoted replica, with
	// cluster-node-timeout 1000.
	failoverRecover = 5 * time.Second
	// failoverOverloaded is the share of the other masters' answers that
	// may be 429 overloaded (this instance too slow on a shared machine;
	// never a failure mode).
	failoverOverloaded = 0.01
	hotRate, hotBurst  = 50, 10
)

// failoverConfig's redis.timeout is far above a round trip, because a
// Cluster node writes and fsyncs nodes.conf in its main thread at each
// configuration change of a failover: on a loaded machine's disk that
// stalled the surviving masters for about 300 ms in runs, and a shorter
// deadline turns such a stall into the failure mode of the stalled node's
// keys (rightly, per node, but not what this test measures). A dead
// master's connections are refused at once, whatever the deadline.
const failoverConfig = `
server: {listen: "127.0.0.1:0"}
redis: {addrs: [%s], timeout: 1s}
routes:
  - {name: hot, match: {path_prefix: /hot/}, upstream: builtin:echo, policies: [hot]}
  - {name: users, match: {path_prefix: /}, upstream: builtin:echo, policies: [users]}
policies:
  users: {key: header:X-User, algorithm: gcra, rate: 1000000, per: 1s, on_redis_error: deny}
  hot: {key: header:X-User, algorithm: gcra, rate: %d, per: 1s, burst: %d, on_redis_error: deny}
`

// failoverAnswer is one answer of the flood; user is -1 for the hot user.
type failoverAnswer struct {
	user       int
	sent, recv time.Duration // since the flood started
	status     int
}

// ownerOf sends requests for user on path until one raised the script
// calls of exactly one master, and returns it: the master holding the
// user's key (the background check sends idle masters a PING, never a
// script, but the start's access check may still be running).
func ownerOf(t *testing.T, c *http.Client, g *gateway, masters []string, path, user string) string {
	t.Helper()
	for range 10 {
		before := make([]int64, len(masters))
		for i, m := range masters {
			before[i] = redistest.CommandCount(t, m, "evalsha", "eval")
		}
		if r := mustSend(t, c, "GET", g.base+path, "X-User", user); r.status != http.StatusOK {
			t.Fatalf("%s for %s: got %d %s, want 200", path, user, r.status, r.body)
		}
		var rose []string
		for i, m := range masters {
			if redistest.CommandCount(t, m, "evalsha", "eval") > before[i] {
				rose = append(rose, m)
			}
		}
		if len(rose) == 1 {
			return rose[0]
		}
	}
	t.Fatalf("%s for %s: no request raised the script calls of exactly one master", path, user)
	return ""
}

// A master of a 3-master Cluster (one replica each, cluster-node-timeout
// 1000, partial coverage) SIGKILLed under an HTTP flood of 24 clients over
// 30 users: only the users whose keys it held get 503s, for no longer than
// failoverRecover after the kill; the other users get 200 throughout; the
// hot user on the dead master stays within its limit (plus the one burst a
// lost state may give) and is enforced through the promoted replica
// afterwards.
func TestClusterFailoverOverHTTP(t *testing.T) {
	cl := redistest.StartClusterWith(t, redistest.ClusterOptions{Replicas: true, NodeTimeout: time.Second, PartialCoverage: true})
	masters := cl.Addrs()
	victim := cl.Servers[0]
	g := startGateway(t, "gateway", writePressureConfig(t, fmt.Sprintf(failoverConfig, strings.Join(masters, ", "), hotRate, hotBurst)))
	c := clienttest.New(t, failoverClients)

	owners := make([]string, failoverUsers)
	onVictim := 0
	for u := range owners {
		owners[u] = ownerOf(t, c, g, masters, "/", fmt.Sprintf("user-%d", u))
		if owners[u] == victim.Addr() {
			onVictim++
		}
	}
	hot := ""
	for i := 0; i < 200 && hot == ""; i++ {
		if k := fmt.Sprintf("hot-%d", i); ownerOf(t, c, g, masters, "/hot/", k) == victim.Addr() {
			hot = k
		}
	}
	if hot == "" || onVictim == 0 {
		t.Fatalf("the victim holds %d users and hot user %q; the test needs both", onVictim, hot)
	}

	const killAt, runFor = 1500 * time.Millisecond, 9500 * time.Millisecond
	start := time.Now()
	stop := start.Add(runFor)
	var mu sync.Mutex
	var all []failoverAnswer
	var firstErr error
	var wg sync.WaitGroup
	for w := range failoverClients {
		wg.Go(func() {
			var mine []failoverAnswer
			for i := 0; i < 1_000_000 && time.Now().Before(stop); i++ {
				a := failoverAnswer{user: (w*7 + i) % failoverUsers}
				path, user := "/", fmt.Sprintf("user-%d", a.user)
				if i%4 == 0 {
					a.user, path, user = -1, "/hot/", hot
				}
				a.sent = time.Since(start)
				r, err := send(c, "GET", g.base+path, "X-User", user)
				if err != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
					return
				}
				a.recv, a.status = time.Since(start), r.status
				if r.status == http.StatusServiceUnavailable && r.header.Get("Retry-After") == "" {
					a.status = -r.status // a 503 without Retry-After: counted apart
				}
				mine = append(mine, a)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	<-time.After(killAt) // the flood runs meanwhile
	victim.Kill()
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("a request failed: %v", firstErr)
	}

	var (
		affected                                = map[int]bool{}
		others, othersOverloaded, othersFailed  int
		lastVictimFail                          time.Duration
		hotAdmitted, hotAfter                   int
		hotFirst, hotLast, afterFirst, afterEnd time.Duration = -1, 0, -1, 0
		badStatus                                             = map[int]int{}
		othersFirst                             []string
	)
	for _, a := range all {
		switch {
		case a.user >= 0 && owners[a.user] == victim.Addr():
			if a.status != http.StatusOK {
				affected[a.user] = true
				lastVictimFail = max(lastVictimFail, a.recv)
			}
			if a.status != http.StatusOK && a.status != http.StatusServiceUnavailable && a.status != http.StatusTooManyRequests {
				badStatus[a.status]++
			}
		case a.user >= 0:
			if a.sent < killAt {
				continue
			}
			others++
			switch a.status {
			case http.StatusOK:
			case http.StatusTooManyRequests:
				othersOverloaded++
			default:
				othersFailed++
				affected[a.user] = true
				if len(othersFirst) < 10 {
					othersFirst = append(othersFirst, fmt.Sprintf("%s-%s:%d", a.sent.Round(time.Millisecond), a.recv.Round(time.Millisecond), a.status))
				}
			}
		}
	}
	afterFrom := lastVictimFail + time.Second
	for _, a := range all {
		if a.user >= 0 {
			continue
		}
		if hotFirst < 0 {
			hotFirst = a.sent
		}
		hotFirst, hotLast = min(hotFirst, a.sent), max(hotLast, a.recv)
		if a.status == http.StatusOK {
			hotAdmitted++
		}
		if a.sent >= afterFrom {
			if afterFirst < 0 {
				afterFirst = a.sent
			}
			afterFirst, afterEnd = min(afterFirst, a.sent), max(afterEnd, a.recv)
			if a.status == http.StatusOK {
				hotAfter++
			}
		}
	}
	hotSpan, afterSpan := hotLast-hotFirst, max(0, afterEnd-afterFirst)
	hotBound := 2*hotBurst + hotRate*hotSpan.Seconds() + 1
	t.Logf("%d answers; victim holds %d of %d users, %d users affected; other users after the kill: %d answers, %d overloaded, %d failed %v; "+
		"last failure on the victim's users %s after the kill; hot user admitted %d over %s (bound %.0f), %d over the %s after recovery + 1s",
		len(all), onVictim, failoverUsers, len(affected), others, othersOverloaded, othersFailed, othersFirst,
		(lastVictimFail - killAt).Round(time.Millisecond), hotAdmitted, hotSpan.Round(time.Millisecond), hotBound, hotAfter, afterSpan.Round(time.Millisecond))

	if othersFailed > 0 {
		t.Errorf("the other masters' users got %d answers other than 200 and 429, want 0", othersFailed)
	}
	if float64(othersOverloaded) > failoverOverloaded*float64(others) {
		t.Errorf("the other masters' users got %d of %d answers 429, want at most %.0f%%", othersOverloaded, others, 100*failoverOverloaded)
	}
	if len(badStatus) > 0 {
		t.Errorf("the victim's users got answers other than 200, 429 and 503 with Retry-After: %v", badStatus)
	}
	if len(affected) > onVictim {
		t.Errorf("%d users affected, want at most the %d the dead master held", len(affected), onVictim)
	}
	if lastVictimFail == 0 {
		t.Fatalf("the dead master's users never got a failure answer: the kill was not noticed")
	}
	if got := lastVictimFail - killAt; got > failoverRecover {
		t.Errorf("the dead master's users got failure answers until %s after the kill, want at most %s", got, failoverRecover)
	}
	if float64(hotAdmitted) > hotBound {
		t.Errorf("hot user admitted %d over %s, want at most %.0f", hotAdmitted, hotSpan, hotBound)
	}
	if floor := 0.5 * hotRate * afterSpan.Seconds(); float64(hotAfter) < floor {
		t.Errorf("hot user admitted %d over the %s after recovery, want at least %.0f (enforced again, not refused)", hotAfter, afterSpan, floor)
	}
}
