package main

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Helpers of the limit-under-pressure suite over HTTP: floods of many
// concurrent connections against a real in-process gateway.

// pressureSlack is the documented tolerance of every upper bound: one
// request, for GCRA's and the token bucket's discrete emission and for the
// instants at which the gateway, Redis and the test read the clock.
const pressureSlack = 1

// pressureLower is the share of the bound a saturated limit must admit.
const pressureLower = 0.95

// writePressureConfig writes a config file into a temp dir.
func writePressureConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// answer is one response of a flood.
type answer struct {
	sent, recv time.Time
	status     int
	retryAfter int    // Retry-After header in seconds, -1 when absent
	retryMs    int64  // retry_after_ms of the JSON body, -1 when absent
	policy     string // the JSON body's policy on 429 and 503
	// overloaded marks a 429 the gateway answered because the limit could
	// not be checked in time (its queue or Redis's reply ran late), not
	// because the limit was spent.
	overloaded bool
}

// floodAnswers is what one HTTP flood saw.
type floodAnswers struct {
	answers []answer // sorted by send time
	err     error    // the first transport error, if any
}

// httpFlood sends GET url with headers (name, value pairs) from clients
// goroutines at once, each one request after another, until d has passed
// or maxRequests were sent in all. It returns when every client stopped.
func httpFlood(c *http.Client, url string, headers []string, clients int, d time.Duration, maxRequests int64) floodAnswers {
	var (
		n    atomic.Int64
		mu   sync.Mutex
		res  floodAnswers
		wg   sync.WaitGroup
		stop = time.Now().Add(d)
	)
	for range clients {
		wg.Go(func() {
			var mine []answer
			var firstErr error
			for n.Add(1) <= maxRequests {
				sent := time.Now()
				if !sent.Before(stop) {
					break
				}
				a, err := pressureSend(c, url, headers)
				if err != nil {
					firstErr = err
					break
				}
				a.sent, a.recv = sent, time.Now()
				mine = append(mine, a)
			}
			mu.Lock()
			defer mu.Unlock()
			res.answers = append(res.answers, mine...)
			if res.err == nil {
				res.err = firstErr
			}
		})
	}
	wg.Wait()
	slices.SortFunc(res.answers, func(a, b answer) int { return a.sent.Compare(b.sent) })
	return res
}

// pressureSend makes one request and reads what the flood needs of the
// answer: status, Retry-After, and the JSON error body's policy and retry.
func pressureSend(c *http.Client, url string, headers []string) (answer, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return answer{}, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	a := answer{status: res.StatusCode, retryAfter: -1, retryMs: -1}
	if v := res.Header.Get("Retry-After"); v != "" {
		if a.retryAfter, err = strconv.Atoi(v); err != nil {
			a.retryAfter = math.MaxInt32 // unreadable: counts as too long
		}
	}
	if res.StatusCode == http.StatusOK {
		_, err = io.Copy(io.Discard, res.Body)
		return a, err
	}
	var body struct {
		Message      string `json:"message"`
		Policy       string `json:"policy"`
		RetryAfterMs *int64 `json:"retry_after_ms"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err == nil {
		a.policy = body.Policy
		a.overloaded = res.StatusCode == http.StatusTooManyRequests && strings.Contains(body.Message, "could not be checked in time")
		if body.RetryAfterMs != nil {
			a.retryMs = *body.RetryAfterMs
		}
	}
	return a, nil
}

// flooded are a flood's counts and timing. outer runs from the first
// request sent to the last answer (every decision was made inside it: the
// upper bounds use it); inner from the first answer to the last request
// sent (decisions were being made over at least that long: the lower
// bounds use it).
type flooded struct {
	admitted, limited int
	// overloaded counts the 429s (among limited) answered because the
	// check ran late: a reply that came too late may still have spent a
	// unit in Redis, so each can stand for one unit no one got.
	overloaded   int
	other        map[int]int // statuses other than 200 and 429
	outer, inner time.Duration
	p50, p99     time.Duration // latency, for the log
}

func summarize(as []answer) flooded {
	f := flooded{other: map[int]int{}}
	var firstSent, lastSent, firstRecv, lastRecv time.Time
	for i, a := range as {
		switch a.status {
		case http.StatusOK:
			f.admitted++
		case http.StatusTooManyRequests:
			f.limited++
			if a.overloaded {
				f.overloaded++
			}
		default:
			f.other[a.status]++
		}
		if i == 0 || a.sent.Before(firstSent) {
			firstSent = a.sent
		}
		if i == 0 || a.sent.After(lastSent) {
			lastSent = a.sent
		}
		if i == 0 || a.recv.Before(firstRecv) {
			firstRecv = a.recv
		}
		if i == 0 || a.recv.After(lastRecv) {
			lastRecv = a.recv
		}
	}
	f.outer = lastRecv.Sub(firstSent)
	f.inner = max(0, lastSent.Sub(firstRecv))
	if len(as) > 0 {
		lat := make([]time.Duration, len(as))
		for i, a := range as {
			lat[i] = a.recv.Sub(a.sent)
		}
		slices.Sort(lat)
		f.p50, f.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return f
}

// bucketLimits are the bounds of a token bucket or GCRA limit of rate per
// second and burst over a flood: at most burst + rate × outer + slack, at
// least 95% of burst + rate × inner.
func bucketLimits(rate, burst float64, f flooded) (upper, lower float64) {
	return burst + rate*f.outer.Seconds() + pressureSlack, math.Floor(pressureLower * (burst + rate*f.inner.Seconds()))
}

// countLog counts the gateway's log lines from index from on that contain
// s.
func (g *gateway) countLog(from int, s string) int {
	g.log.mu.Lock()
	defer g.log.mu.Unlock()
	n := 0
	for _, line := range g.log.lines[min(from, len(g.log.lines)):] {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}
