package h1_test

import (
	"sync/atomic"

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

// completionBody is make bench's upstream's answer to a chat call: a
// finished chat completion and its usage.
const completionBody = `{"id":"chatcmpl-bench","object":"chat.completion","created":1764720000,"model":"gpt-4o-mini",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et"},"finish_reason":"length"}],` +
	`"usage":{"prompt_tokens":11,"completion_tokens":16,"total_tokens":27}}`
