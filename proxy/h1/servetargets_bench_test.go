package h1_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/metrics"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy"
)

// BenchmarkServeTargets is make bench's gateway-nopolicy, gateway-local,
// gateway-nopolicy-post (the llm call's bytes on a route without llm work)
// and gateway-llm, in process: each served by h1.Server
// through the Handler (configured as the targets are, with metrics), one
// client connection held in memory (loopConn), the upstream reached through
// the transport gateway serve builds, over connections in memory that answer
// as make bench's nginx does (wireUpstream). What is measured is the
// gateway's whole path without sockets: the request's head and body read,
// the llm work, the request written upstream and its answer read, the
// answer written. local-stdserver, local-standard and local-stdboth are
// local with net/http's server (client_server: standard), net/http's
// transport (upstream_transport: standard) and both in place of the lean
// ones. Each sub-benchmark runs one target alone, for exact allocations,
// and for instruction counts under valgrind --tool=callgrind:
//
//	go test -run '^$' -bench BenchmarkServeTargets -benchmem ./proxy/h1/
func BenchmarkServeTargets(b *testing.B) {
	engine, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
	if err != nil {
		b.Fatal(err)
	}
	upstream := wireUpstream()
	standard := proxy.NewStandardTransport() // as upstream_transport: standard builds it
	standard.DialContext = blockingUpstreamDial
	b.Cleanup(standard.CloseIdleConnections)
	handler := func(cfg string, transports ...http.RoundTripper) *proxy.Handler {
		var transport http.RoundTripper = upstream
		if len(transports) > 0 {
			transport = transports[0]
		}
		snap, err := policies.Parse("gateway.yaml", []byte(cfg), policies.Options{})
		if err != nil {
			b.Fatal(err)
		}
		holder := &snapshotHolder{}
		holder.p.Store(snap)
		h, err := proxy.New(proxy.Config{Snapshots: holder, Limiter: engine, Transport: transport,
			Logger: slog.New(slog.DiscardHandler), Metrics: metrics.New()})
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	nopolicy := handler("routes:\n  - {name: bench, match: {path_prefix: /}, upstream: http://127.0.0.1:1, policies: []}\n")
	const localCfg = `routes:
  - {name: bench, match: {path_prefix: /}, upstream: http://127.0.0.1:1, policies: [gateway-local]}
policies:
  gateway-local: {key: ip, algorithm: token_bucket, rate: 10000000, per: 1s}
`
	local := handler(localCfg)
	localStandard := handler(localCfg, standard)
	noheaders := handler(`routes:
  - {name: bench, match: {path_prefix: /}, upstream: http://127.0.0.1:1, policies: [gateway-local], rate_limit_headers: none}
policies:
  gateway-local: {key: ip, algorithm: token_bucket, rate: 10000000, per: 1s}
`)
	llmRoute := handler(`routes:
  - name: bench
    match: {path_prefix: /v1/, methods: [POST]}
    upstream: http://127.0.0.1:1
    llm: openai
    policies: [gateway-llm]
policies:
  gateway-llm: {key: ip, cost: tokens, rate: 1000000000, per: 1s}
`)
	const body = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello there, mock!"}],"max_tokens":16}`
	post := "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	const get = "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
	for _, v := range []struct {
		name string
		h    *proxy.Handler
		req  string
		std  bool // served by net/http's server, not h1.Server
	}{
		{"nopolicy", nopolicy, get, false},
		{"local", local, get, false},
		{"local-noheaders", noheaders, get, false},
		{"nopolicy-post", nopolicy, post, false},
		{"llm", llmRoute, post, false},
		{"local-stdserver", local, get, true},
		{"local-standard", localStandard, get, false},
		{"local-stdboth", localStandard, get, true},
	} {
		var srv loopServer = leanServer(v.h)
		if v.std {
			srv = newStdServer(v.h)
		}
		c := serveLoopRequest(b, srv, v.req)
		c.send(b, http.StatusOK)
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.send(b, http.StatusOK)
			}
		})
	}
	// llm-new-prompt: the llm route, each request's prompt one the counts
	// have not seen (its number changes), so that the text is split into
	// its pieces rather than found whole in the count cache, as a
	// conversation's new turn is.
	prompt := "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(newPromptBody)) + "\r\n\r\n" + newPromptBody
	c := serveLoopRequest(b, leanServer(llmRoute), prompt)
	c.send(b, http.StatusOK)
	number := bytes.Index(c.req, []byte("00000000"))
	b.Run("llm-new-prompt", func(b *testing.B) {
		b.ReportAllocs()
		for i := 1; b.Loop(); i++ {
			for k, n := number+7, i; k >= number; k, n = k-1, n/10 {
				c.req[k] = '0' + byte(n%10)
			}
			c.send(b, http.StatusOK)
		}
	})
}

// newPromptBody is llm-new-prompt's call: a paragraph of prose and a
// question whose eight-digit number the benchmark changes.
const newPromptBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` +
	"The gateway counts the tokens of every prompt before it forwards the call, so that a tenant's budget is charged " +
	"for what the model will read. Most prompts are short questions about code, documents or data, written in plain " +
	"English with a few names and numbers in them; some carry a paragraph of context copied from an earlier answer. " +
	`Question 00000000?"}],"max_tokens":16}`
