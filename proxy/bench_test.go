package proxy

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/servetest"
	"github.com/ratelimit-gateway/gateway/internal/stat"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// BenchmarkProxy sends the same requests to the same upstream through the
// gateway Handler (route match, identity, one local token bucket, headers)
// and through a bare httputil.ReverseProxy, the anchor. Both use a transport
// from newLeanTransport, so the difference is the gateway's own work. Compare
// ns/op of gateway against bare within one run:
//
//	go test -run '^$' -bench BenchmarkProxy -benchmem ./proxy/
func BenchmarkProxy(b *testing.B) {
	up := newUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok\n")
	}))
	upURL, err := url.Parse(up.URL)
	if err != nil {
		b.Fatal(err)
	}

	bareTransport := newTestTransport()
	b.Cleanup(bareTransport.CloseIdleConnections)
	bare := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upURL)
			pr.SetXForwarded()
		},
		Transport:  bareTransport,
		BufferPool: newBufferPool(), // as the gateway's, and bench/bareproxy's
	})
	b.Cleanup(bare.Close)

	// A limit no benchmark reaches: every request is decided and allowed.
	huge := limiter.Limit{Rate: 1 << 40, Period: time.Second, Burst: 1 << 40}
	engine, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
	if err != nil {
		b.Fatal(err)
	}
	snap := testSnapshot(b, nil, testRoute(b, "default", "/", up.URL,
		testPolicy(b, "per-ip", "ip", huge, policies.MissingReject)))
	gw, _ := newGateway(b, snap, engine, gatewayOpts{})
	// The same Handler work without a policy: the difference to gateway is
	// the limiting layer's cost (decision, keys, headers).
	nopolicy, _ := newGateway(b, testSnapshot(b, nil, testRoute(b, "default", "/", up.URL)), engine, gatewayOpts{})

	for _, mode := range []struct {
		name     string
		parallel bool
	}{{"serial", false}, {"parallel", true}} {
		for _, target := range []struct{ name, url string }{{"bare", bare.URL}, {"gateway-nopolicy", nopolicy.URL}, {"gateway", gw.URL}} {
			b.Run(mode.name+"/"+target.name, func(b *testing.B) {
				tr := newTestTransport()
				defer tr.CloseIdleConnections()
				client := &http.Client{Transport: tr}
				get := func() error {
					resp, err := client.Get(target.url + "/bench?x=1")
					if err != nil {
						return err
					}
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status: got %d, want 200", resp.StatusCode)
					}
					return err
				}
				b.ReportAllocs()
				if !mode.parallel {
					for b.Loop() {
						if err := get(); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := get(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkServePolicies prices each extra local policy on a route. A
// route with N token buckets keyed by the client IP (as a config gives
// it, parsed from YAML, with the default rate-limit headers) is served by
// the Handler, its upstream answered in memory so that sockets and the
// scheduler (most of a request's time, and most of its noise on a busy
// machine) stay out of the measure: the fraction below is of the
// gateway's own work, which overstates it as a fraction of a whole
// request. It takes turns (see takeTurns) with a route of one policy, the
// anchor; N=1 with a route of none. It reports each one's CPU ns/op and
// the cost of each policy past the anchor's, in ns and as a fraction of
// the anchor's request, (t(N)/t(anchor) − 1) / (N − anchor's N):
//
//	go test -run '^$' -bench BenchmarkServePolicies ./proxy/
func BenchmarkServePolicies(b *testing.B) {
	engine, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 2, 4, 8} {
		anchor := 1
		if n == 1 {
			anchor = 0
		}
		hs := [2]*Handler{policiesHandler(b, engine, anchor), policiesHandler(b, engine, n)}
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			base, with := takeTurns(b, [2]func(){plainGet(b, hs[0]), plainGet(b, hs[1])})
			b.ReportMetric(base, "anchor-ns/op")
			b.ReportMetric(with, "policies-ns/op")
			b.ReportMetric((with-base)/float64(n-anchor), "ns/extra-policy")
			b.ReportMetric((with/base-1)/float64(n-anchor), "per-policy/request")
		})
	}
}

// policiesHandler is a Handler whose one route has n token buckets keyed
// by the client IP, as a config gives them (parsed from YAML, with the
// default rate-limit headers), its upstream answered in memory.
func policiesHandler(b testing.TB, lim Limiter, n int) *Handler {
	b.Helper()
	var names, defs strings.Builder
	for i := range n {
		if i > 0 {
			names.WriteString(", ")
		}
		fmt.Fprintf(&names, "p%d", i)
		fmt.Fprintf(&defs, "  p%d: {key: ip, algorithm: token_bucket, rate: 10000000, per: 1s}\n", i)
	}
	cfg := "routes:\n  - name: bench\n    match: {path_prefix: /}\n    upstream: http://127.0.0.1:1\n" +
		"    policies: [" + names.String() + "]\n"
	if n > 0 {
		cfg += "policies:\n" + defs.String()
	}
	return configHandler(b, cfg, lim, servetest.MemoryUpstream{})
}

// BenchmarkLLMCall prices a small chat call on an llm route (body read,
// parsed and tokenized, tokens reserved, the usage read back from the
// response and settled) against a plain request on a route without a
// policy, the anchor, as gateway-llm and gateway-nopolicy of make bench do:
// the same Handler path, upstreams answered in memory, taking turns (see
// takeTurns). It reports each one's CPU ns/op, llm/anchor, and each one's
// allocations and bytes per call (the benchmark's own allocs/op and B/op
// are of both together):
//
//	go test -run '^$' -bench BenchmarkLLMCall ./proxy/
//
// Every call sends the same message, as make bench does, so the
// tokenizer's count of it is remembered; BenchmarkLLMCallDistinct sends a
// message never seen before each time.
func BenchmarkLLMCall(b *testing.B) { benchLLMCall(b, false) }

// BenchmarkLLMCallDistinct is BenchmarkLLMCall with a new message each call:
// its prompt is counted by the tokenizer every time.
func BenchmarkLLMCallDistinct(b *testing.B) { benchLLMCall(b, true) }

func benchLLMCall(b *testing.B, distinct bool) {
	engine, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
	if err != nil {
		b.Fatal(err)
	}
	nopolicy := configHandler(b, "routes:\n  - {name: bench, match: {path_prefix: /}, upstream: http://127.0.0.1:1, policies: []}\n",
		engine, servetest.MemoryUpstream{})
	llmRoute := configHandler(b, `routes:
  - name: bench
    match: {path_prefix: /v1/, methods: [POST]}
    upstream: http://127.0.0.1:1
    llm: openai
    policies: [tokens]
policies:
  tokens: {key: ip, cost: tokens, rate: 1000000000, per: 1s}
`, engine, completionUpstream{})
	const body = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello there, mock!"}],"max_tokens":16}`
	seq := 0
	call := func() {
		b := body
		if distinct {
			seq++
			b = strings.Replace(body, "mock!", "mock "+strconv.Itoa(seq)+"!", 1)
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = "10.1.2.3:4000"
		rec := httptest.NewRecorder()
		llmRoute.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			panic(fmt.Sprintf("status: got %d, want 200: %s", rec.Code, rec.Body))
		}
	}
	serve := [2]func(){plainGet(b, nopolicy), call}
	base, with := takeTurns(b, serve)
	b.ReportMetric(base, "anchor-ns/op")
	b.ReportMetric(with, "llm-ns/op")
	b.ReportMetric(with/base, "llm/anchor")
	allocs, bytes := allocsOf(serve[0])
	b.ReportMetric(allocs, "anchor-allocs/op")
	b.ReportMetric(bytes, "anchor-B/op")
	allocs, bytes = allocsOf(serve[1])
	b.ReportMetric(allocs, "llm-allocs/op")
	b.ReportMetric(bytes, "llm-B/op")
}

// allocsOf returns the heap allocations and bytes of one call of f, the
// mean of 200.
func allocsOf(f func()) (allocs, bytes float64) {
	const runs = 200
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / runs, float64(after.TotalAlloc-before.TotalAlloc) / runs
}

// plainGet serves a GET through h, which must answer 200.
func plainGet(b testing.TB, h *Handler) func() {
	return func() {
		req := httptest.NewRequest(http.MethodGet, "/bench", nil)
		req.RemoteAddr = "10.1.2.3:4000"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status: got %d, want 200", rec.Code)
		}
	}
}

// configHandler is a Handler over the configuration cfg (YAML).
func configHandler(b testing.TB, cfg string, lim Limiter, up http.RoundTripper) *Handler {
	b.Helper()
	snap, err := policies.Parse("gateway.yaml", []byte(cfg), policies.Options{})
	if err != nil {
		b.Fatal(err)
	}
	holder := &snapshotHolder{}
	holder.p.Store(snap)
	h, err := New(Config{Snapshots: holder, Limiter: lim, Transport: up, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// takeTurns runs the two in blocks that take turns within one loop, so
// that a busy machine slows both alike, each timed by its thread's CPU
// clock (on Linux), which a wait for a core does not advance. It returns
// each one's CPU ns per call; the first call of each is a warm-up.
func takeTurns(b *testing.B, serve [2]func()) (first, second float64) {
	for _, s := range serve {
		s()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return servetest.TakeTurns(b, stat.ThreadClock(), serve)
}

// completionBody is make bench's upstream's answer to a chat call: a
// finished chat completion and its usage.
const completionBody = `{"id":"chatcmpl-bench","object":"chat.completion","created":1764720000,"model":"gpt-4o-mini",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et"},"finish_reason":"length"}],` +
	`"usage":{"prompt_tokens":11,"completion_tokens":16,"total_tokens":27}}`

// completionUpstream answers every call with completionBody, as make
// bench's upstream does.
type completionUpstream struct{}

func (completionUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(completionBody)),
		ContentLength: int64(len(completionBody)), Request: r,
	}, nil
}
