package main

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// killSlack is how late past one lease the first admission after a SIGKILL
// may come: the 20ms polls, and a loaded 2-core machine under -race.
const killSlack = time.Second

// TestSharedInFlightSlotsComeBackAfterKill kills a gateway holding every
// slot of a shared_concurrency limit with SIGKILL: its slots stay taken
// while their leases live, and come back after one lease, by Redis's clock,
// for the other gateway on the same Redis, which can then hold the whole
// limit again.
func TestSharedInFlightSlotsComeBackAfterKill(t *testing.T) {
	const (
		limit      = 4
		lease      = 500 * time.Millisecond
		renewEvery = lease / 3 // docs/configuration.md: a request renews its lease every third of it
	)
	leaks := goleak.IgnoreCurrent()
	// Registered first, so it runs after every other cleanup.
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })

	s := redistest.Start(t)
	rdb := newRedisReader(t, s.Addr())
	up := newHeldUpstream(t)
	path := writePressureConfig(t, fmt.Sprintf(inflightConfig, s.Addr(), up.url, limit, lease))
	a := startGatewayProcess(t, "gateway A", path)
	b := startGateway(t, "gateway B", path)
	c := clienttest.New(t, 16)
	var wg sync.WaitGroup
	// Runs first: held requests end (A's with A), then their goroutines.
	t.Cleanup(func() {
		up.stop()
		_ = a.cmd.Process.Kill()
		wg.Wait()
	})

	// A holds every slot.
	heldByA := make([]<-chan asyncReply, limit)
	for i := range heldByA {
		heldByA[i] = goSend(&wg, c, a.base, modeHold)
	}
	receiveN(t, up.arrived, limit, "requests through A held at the upstream")
	wantRefused(t, mustSend(t, c, http.MethodGet, b.base+"/", "X-Tenant", "a", "X-Mode", modeFast), inflightPolicy,
		"B while A holds every slot")
	if all, live := leaseCount(t, rdb, inflightPolicy); all != limit || live != limit {
		t.Fatalf("leases while A holds every slot: got %d (%d live), want %d", all, live, limit)
	}

	// A renews them: each lease's expiry moves on before A dies, so the
	// kill below cuts live, renewed leases (not ones about to lapse anyway).
	first, _ := leases(t, rdb, inflightPolicy)
	renewedIn := pollUntil(t, 5*time.Second, "every lease of A renewed", func() bool {
		now, _ := leases(t, rdb, inflightPolicy)
		for holder, ms := range first {
			if now[holder] <= ms {
				return false
			}
		}
		return true
	})

	killedAt := a.kill(t)
	// Right after the kill the leases still hold the slots (the clock
	// bounds when that must be so: a lease renewed at most renewEvery before
	// the kill lives at least lease - renewEvery after it).
	right := mustSend(t, c, http.MethodGet, b.base+"/", "X-Tenant", "a", "X-Mode", modeFast)
	rightAfter := time.Since(killedAt)
	if rightAfter < lease-renewEvery-latencySlack {
		wantRefused(t, right, inflightPolicy, fmt.Sprintf("B %s after A was killed", rightAfter.Round(time.Millisecond)))
	} else {
		t.Logf("the request right after the kill was answered %s after it, too late to judge (got %d)", rightAfter, right.status)
	}
	for i, ch := range heldByA {
		if r := receiveReply(t, ch, fmt.Sprintf("request %d held through A", i+1)); r.err == nil {
			t.Fatalf("request %d held through A: got %d %s after A was killed, want a broken connection", i+1, r.r.status, r.r.body)
		}
	}
	receiveN(t, up.gone, limit, "held requests of A ended at the upstream by the kill")

	// B polls until a slot lapsed.
	var polls int
	var admittedSent, admittedRecv time.Duration
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		sent := time.Since(killedAt)
		r := mustSend(t, c, http.MethodGet, b.base+"/", "X-Tenant", "a", "X-Mode", modeFast)
		polls++
		if r.status == http.StatusOK {
			admittedSent, admittedRecv = sent, time.Since(killedAt)
			break
		}
		wantRefused(t, r, inflightPolicy, fmt.Sprintf("B poll %d, %s after the kill", polls, sent.Round(time.Millisecond)))
		if sent > 5*time.Second {
			t.Fatalf("B admitted nothing within 5s of the kill (%d polls), want a slot back after the %s lease", polls, lease)
		}
		<-tick.C
	}
	t.Logf("lease %s, renewed every %s (A's leases renewed %s after the check): right after the kill B answered %d within %s; first admission through B after SIGKILL of A: sent %s, answered %s after the kill (%d polls); want between %s and %s",
		lease, renewEvery.Round(time.Millisecond), renewedIn.Round(time.Millisecond), right.status, rightAfter.Round(time.Millisecond),
		admittedSent.Round(time.Millisecond), admittedRecv.Round(time.Millisecond), polls,
		(lease - renewEvery - latencySlack).Round(time.Millisecond), lease+killSlack)
	if admittedRecv < lease-renewEvery-latencySlack {
		t.Errorf("first admission %s after the kill, want at least %s (lease %s - renewal interval %s - %s): the leases lapsed early",
			admittedRecv, lease-renewEvery-latencySlack, lease, renewEvery, latencySlack)
	}
	if admittedSent > lease+killSlack {
		t.Errorf("first admission sent %s after the kill, want at most %s (lease %s + %s)", admittedSent, lease+killSlack, lease, killSlack)
	}

	// Every lease of A lapses (by Redis's clock), and B holds the whole
	// limit again.
	pollUntil(t, lease+killSlack, "every lease of A lapsed", func() bool {
		_, live := leaseCount(t, rdb, inflightPolicy)
		return live == 0
	})
	holdAll(t, c, up, b.base, limit)
	// The slots are given back when the responses end, not left to lapse: a
	// lease renewed when it was taken lives lease - renewEvery at least.
	gaveBack := pollUntil(t, lease-renewEvery-latencySlack, "B's leases given back", func() bool {
		all, _ := leaseCount(t, rdb, inflightPolicy)
		return all == 0
	})
	all, _ := leaseCount(t, rdb, inflightPolicy)
	t.Logf("B then held %d at once and was refused the next; leases given back %s after the responses; ZCARD at the end %d; max in flight at the upstream %d (handlers running at most %d); renewal failures logged: A %d, B %d",
		limit, gaveBack.Round(time.Millisecond), all, up.maxInFlight.Load(), up.maxRunning.Load(),
		a.countLog(0, "renewing an in-flight lease failed"), b.countLog(0, "renewing an in-flight lease failed"))
	if got := up.maxInFlight.Load(); got > limit {
		t.Errorf("max in flight at the upstream: got %d, want at most %d", got, limit)
	}
	if got := up.unexpected.Load(); got != 0 {
		t.Errorf("requests the upstream could not serve as asked: got %d, want 0", got)
	}
}
