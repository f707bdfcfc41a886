package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// floodTally counts the outcomes of a flood of in-flight requests. It is
// safe for concurrent use.
type floodTally struct {
	sent, completed, refused, hungUp, cut atomic.Int64

	mu    sync.Mutex
	other map[int]int // statuses other than 200 and 429
	err   error       // the first request that went wrong otherwise
}

func (f *floodTally) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *floodTally) status(code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.other[code]++
}

// floodMode gives request i its mode: of ten, three clients hang up while
// the upstream holds the request, two hang up after the first bytes of the
// body, and five wait for the answer, three of them while the upstream
// holds the request until the limit is full there (so the slots are full
// often), two answered at once.
func floodMode(i int64) string {
	switch i % 10 {
	case 0, 1, 2:
		return modeHangUp
	case 3, 4:
		return modeCut
	case 5, 6, 7:
		return modeSlow
	default:
		return modeFast
	}
}

// floodOne sends request i as tenant "a" and counts its outcome.
func floodOne(c *http.Client, u *heldUpstream, base string, limit int64, i int64, f *floodTally) {
	mode := floodMode(i)
	id := strconv.FormatInt(i, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
	if err != nil {
		f.fail(err)
		return
	}
	req.Header.Set("X-Tenant", "a")
	req.Header.Set("X-Mode", mode)
	req.Header.Set("X-Request", id)
	if mode == modeHangUp {
		u.hangUps.Store(id, cancel)
	}
	f.sent.Add(1)
	res, err := c.Do(req)
	if mode == modeHangUp {
		if _, waiting := u.hangUps.LoadAndDelete(id); !waiting {
			// The upstream took the request and hung us up.
			if errors.Is(err, context.Canceled) {
				f.hungUp.Add(1)
			} else {
				f.fail(fmt.Errorf("request %d, hung up by the upstream: got %v, want context.Canceled", i, err))
			}
			if err == nil {
				res.Body.Close()
			}
			return
		}
	}
	if err != nil {
		f.fail(fmt.Errorf("request %d (%s): %w", i, mode, err))
		return
	}
	defer res.Body.Close()
	switch res.StatusCode {
	case http.StatusOK:
		switch mode {
		case modeCut:
			buf := make([]byte, len(firstBytes))
			if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != firstBytes {
				f.fail(fmt.Errorf("request %d (cut): got %q %v, want the first bytes %q", i, buf, err, firstBytes))
				return
			}
			cancel() // hangs up mid-body
			f.cut.Add(1)
		case modeFast, modeSlow:
			if _, err := io.Copy(io.Discard, res.Body); err != nil {
				f.fail(fmt.Errorf("request %d: reading the body: %w", i, err))
				return
			}
			f.completed.Add(1)
		default:
			f.fail(fmt.Errorf("request %d (%s): got 200, want the upstream to hang it up", i, mode))
		}
	case http.StatusTooManyRequests:
		var e errorReply
		if err := json.NewDecoder(res.Body).Decode(&e); err != nil || e.Code != 42900 || e.Policy != inflightPolicy {
			f.fail(fmt.Errorf("request %d: 429 with code %d naming %q (%v), want 42900 naming %q", i, e.Code, e.Policy, err, inflightPolicy))
			return
		}
		f.refused.Add(1)
		// Slow requests pile up until they fill the limit at the
		// upstream; from then on each refusal lets one of them answer.
		if u.inFlight.Load() >= limit {
			select {
			case u.release <- struct{}{}:
			default:
			}
		}
	default:
		f.status(res.StatusCode)
	}
}

// TestSharedInFlightNoSlotLeaked floods a shared_concurrency limit of 4
// over HTTP with 10,000 requests from 64 clients, half of them hanging
// up mid-request (while the upstream holds it, or after the first bytes of
// the body): the upstream never serves more than 4 at once, every hang-up
// reaches it, and afterwards every lease is gone from Redis and the limit
// holds 4 requests again, no fewer. The lease is long, so a slot that was
// not given back would still be taken at those checks.
func TestSharedInFlightNoSlotLeaked(t *testing.T) {
	const (
		limit   = 4
		lease   = 10 * time.Second
		total   = 10_000
		clients = 64
		bound   = 2 * time.Minute // the whole flood
		settle  = 3 * time.Second // for every lease to be given back, well under one lease
	)
	leaks := goleak.IgnoreCurrent()
	// Registered first, so it runs after every other cleanup: no renewal
	// goroutine of the gateway may outlive it.
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })

	s := redistest.Start(t)
	rdb := newRedisReader(t, s.Addr())
	up := newHeldUpstream(t)
	g := startGateway(t, "gateway", writePressureConfig(t, fmt.Sprintf(inflightConfig, s.Addr(), up.url, limit, lease)))
	t.Cleanup(up.stop) // held requests end before the gateway drains
	c := clienttest.New(t, clients)

	f := &floodTally{other: map[int]int{}}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(bound)
	for range clients {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > total || time.Now().After(deadline) {
					// No more refusals to release the slow
					// requests still held: they answer now.
					up.letGo()
					return
				}
				floodOne(c, up, g.base, limit, i, f)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)

	if f.err != nil {
		t.Fatal(f.err)
	}
	if got := f.sent.Load(); got != total {
		t.Fatalf("sent %d requests within %s, want %d", got, bound, total)
	}
	// Every handler sees its hang-up and returns.
	pollUntil(t, settle, "upstream handlers returned", func() bool { return up.running.Load() == 0 })
	idleIn := pollUntil(t, settle, "every lease given back", func() bool {
		all, _ := leaseCount(t, rdb, inflightPolicy)
		return all == 0
	})
	idle, _ := leaseCount(t, rdb, inflightPolicy)
	admitted := f.completed.Load() + f.hungUp.Load() + f.cut.Load()
	t.Logf("%d requests from %d clients in %s, limit %d, lease %s: admitted %d (completed %d, hung up while held %d, hung up mid-body %d), refused %d, other %v; "+
		"max in flight at the upstream %d (handlers running at most %d); hang-ups seen by the upstream %d held, %d mid-body; ZCARD when idle %d (reached %s after the flood); renewal failures logged %d",
		f.sent.Load(), clients, took.Round(time.Millisecond), limit, lease,
		admitted, f.completed.Load(), f.hungUp.Load(), f.cut.Load(), f.refused.Load(), f.other,
		up.maxInFlight.Load(), up.maxRunning.Load(), up.hungUp.Load(), up.cut.Load(), idle, idleIn.Round(time.Millisecond),
		g.countLog(0, "renewing an in-flight lease failed"))

	if len(f.other) > 0 {
		t.Errorf("answers other than 200 and 429: %v", f.other)
	}
	if got := up.maxInFlight.Load(); got > limit {
		t.Errorf("max in flight at the upstream: got %d, want at most %d", got, limit)
	}
	if got := up.unexpected.Load(); got != 0 {
		t.Errorf("requests the upstream could not serve as asked: got %d, want 0", got)
	}
	if got, want := up.hungUp.Load(), f.hungUp.Load(); got != want {
		t.Errorf("hang-ups while held seen by the upstream: got %d, want %d (one per client that hung up)", got, want)
	}
	if got, want := up.cut.Load(), f.cut.Load(); got != want {
		t.Errorf("hang-ups mid-body seen by the upstream: got %d, want %d (one per client that hung up)", got, want)
	}
	if f.hungUp.Load() == 0 || f.cut.Load() == 0 || f.completed.Load() == 0 {
		t.Errorf("want every kind of admitted request at least once: completed %d, hung up while held %d, mid-body %d",
			f.completed.Load(), f.hungUp.Load(), f.cut.Load())
	}
	if t.Failed() {
		return
	}

	// Nothing in flight: the limit holds exactly 4 again.
	holdAll(t, c, up, g.base, limit)
	pollUntil(t, settle, "the leases of the last 4 given back", func() bool {
		all, _ := leaseCount(t, rdb, inflightPolicy)
		return all == 0
	})
}
