package h1_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/policies"
)

// The gateway's handler (package proxy) served by this package's server
// and transport, as gateway serve builds them: the benchmarks of make
// bench's targets in process live here, where both are known.

// snapshotHolder is a proxy.Snapshots holding one snapshot.
type snapshotHolder struct {
	p atomic.Pointer[policies.Snapshot]
}

func (s *snapshotHolder) Load() *policies.Snapshot { return s.p.Load() }

// memoryUpstream answers every request with a small 200 from memory.
type memoryUpstream struct{}

func (memoryUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
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

// takeTurnsOn runs the two in blocks that take turns within one loop, so
// that a busy machine slows both alike, each timed by clock. It returns
// each one's ns per call, or 0, 0 when the loop ran too short for both to
// be timed.
func takeTurnsOn(b *testing.B, clock func() time.Duration, serve [2]func()) (first, second float64) {
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

// completionBody is make bench's upstream's answer to a chat call: a
// finished chat completion and its usage.
const completionBody = `{"id":"chatcmpl-bench","object":"chat.completion","created":1764720000,"model":"gpt-4o-mini",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et"},"finish_reason":"length"}],` +
	`"usage":{"prompt_tokens":11,"completion_tokens":16,"total_tokens":27}}`
