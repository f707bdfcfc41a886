// Package servetest gives the serving benchmarks of proxy and proxy/h1
// (which test the handler from outside, through h1's server and
// transport) their shared parts: an upstream in memory and turn-taking
// timing.
package servetest

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// MemoryUpstream answers every request with a small 200 from memory.
type MemoryUpstream struct{}

// RoundTrip answers r with "ok\n".
func (MemoryUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"text/plain"}},
		Body:          io.NopCloser(strings.NewReader("ok\n")),
		ContentLength: 3, Request: r,
	}, nil
}

// TakeTurns runs the two in blocks that take turns within one loop, so
// that a busy machine slows both alike, each timed by clock (a thread's
// or the process's CPU time, see internal/stat). It returns each one's ns
// per call, or 0, 0 when the loop ran too short for both to be timed.
func TakeTurns(b *testing.B, clock func() time.Duration, serve [2]func()) (first, second float64) {
	const block = 64
	b.ReportAllocs()
	var took [2]time.Duration
	var count [2]int
	i := 0
	for b.Loop() {
		which := (i / block) % 2
		start := clock()
		serve[which]()
		took[which] += clock() - start
		count[which]++
		i++
	}
	if count[0] == 0 || count[1] == 0 {
		return 0, 0
	}
	return float64(took[0]) / float64(count[0]), float64(took[1]) / float64(count[1])
}
