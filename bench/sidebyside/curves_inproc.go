package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tiktoken-go/tokenizer"

	"github.com/ratelimit-gateway/gateway/bench/internal/llmload"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// The curves measured in this process, where HTTP cannot reach the rate or
// the figure is not a rate (start time, memory).

// curvePoint is one measured point of a curve.
type curvePoint struct {
	x      float64 // what grows: policies, routes, keys, bytes
	label  string
	values map[string]float64 // by metric name
}

// liveHeap is the live heap after a collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// keysCounts are the API key counts of the keys curve.
var keysCounts = []int{100, 10_000, 100_000}

// apiKey is the n-th key of the keys curve, as clients present it.
func apiKey(n int) string { return fmt.Sprintf("sk-curve-%07d", n) }

// writeKeysConfig writes a config whose keys file holds n key digests (one
// tenant per key, three plans), with a per-tenant policy, and returns its
// path. listen and upstream make it servable.
func writeKeysConfig(dir string, n int, listen, upstream string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s tenant-%d plan-%d\n", policies.KeyDigest(apiKey(i)), i, i%3)
	}
	if err := os.WriteFile(filepath.Join(dir, "tenants.keys"), []byte(b.String()), 0o644); err != nil {
		return "", err
	}
	cfg := fmt.Sprintf(`# keys curve: %d API keys in a keys file
server: {listen: %q}
admin: {listen: ""}
tenants: {keys_file: tenants.keys}
routes:
  - {name: bench, match: {path_prefix: /}, upstream: %q, policies: [per-tenant]}
policies:
  per-tenant: {key: tenant, rate: 10000000, per: 1s, on_missing_key: reject}
`, n, listen, upstream)
	path := filepath.Join(dir, "gateway.yaml")
	return path, os.WriteFile(path, []byte(cfg), 0o644)
}

// measureKeys is the keys curve in process: for each count, the load of
// the config (start), a reload after one key changed (the old snapshot in
// force meanwhile, as in a running gateway), the live heap per key, and a
// lookup of a key.
func measureKeys(dir string) ([]curvePoint, error) {
	var out []curvePoint
	for _, n := range keysCounts {
		path, err := writeKeysConfig(filepath.Join(dir, fmt.Sprint("keys-", n)), n, "127.0.0.1:1", "http://127.0.0.1:1")
		if err != nil {
			return nil, err
		}
		base := liveHeap()
		start, cpu := time.Now(), cpuTime()
		snap, err := policies.Load(path, policies.Options{})
		took, tookCPU := time.Since(start), cpuTime()-cpu
		if err != nil {
			return nil, err
		}
		heap := liveHeap() - base

		cur := policies.NewCurrent(snap)
		w, err := policies.NewWatcher(policies.WatcherConfig{Loader: policies.Loader{Path: path}, Current: cur,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return nil, err
		}
		keysPath := filepath.Join(filepath.Dir(path), "tenants.keys")
		data, err := os.ReadFile(keysPath)
		if err != nil {
			return nil, err
		}
		data = append(data, policies.KeyDigest("one more")+" tenant-new\n"...)
		if err := os.WriteFile(keysPath, data, 0o644); err != nil {
			return nil, err
		}
		start, cpu = time.Now(), cpuTime()
		if err := w.Reload(); err != nil {
			return nil, err
		}
		reload, reloadCPU := time.Since(start), cpuTime()-cpu
		if cur.Load() == snap {
			return nil, fmt.Errorf("keys curve: the reload with %d keys applied nothing", n)
		}

		key := apiKey(n / 2)
		var known bool
		lookup := opCPU(func() { _, known = snap.Tenants.Lookup(key) })
		if !known {
			return nil, fmt.Errorf("keys curve: %s unknown", key)
		}
		runtime.KeepAlive(snap)
		out = append(out, curvePoint{x: float64(n), label: fmt.Sprint(n), values: map[string]float64{
			"start_ms": ms64(took), "reload_ms": ms64(reload), "start_cpu_ms": ms64(tookCPU), "reload_cpu_ms": ms64(reloadCPU),
			"bytes_per_key": float64(heap) / float64(n), "lookup_ns": lookup,
		}})
	}
	return out, nil
}

// cpuTime is the CPU time this process has used, user and system, GC
// workers included: on a loaded machine, what a step cost apart from how
// long it waited for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// opCPU is the median over three passes of the CPU time one call of op
// takes on its thread, in ns: on a shared machine a thread waits for a core
// for longer than it runs, and wall time would measure the wait. Each pass
// runs op often enough to take about 100ms of CPU (at least once). The
// runtime's background GC work is on other threads and not counted here.
func opCPU(op func()) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n := 1
	for {
		t := threadCPU()
		for range n {
			op()
		}
		if d := threadCPU() - t; d >= 10*time.Millisecond || n >= 1<<30 {
			n = max(1, int(float64(n)*float64(100*time.Millisecond)/float64(max(d, time.Microsecond))))
			break
		}
		n *= 10
	}
	var ns []float64
	for range 3 {
		t := threadCPU()
		for range n {
			op()
		}
		ns = append(ns, float64(threadCPU()-t)/float64(n))
	}
	slices.Sort(ns)
	return ns[1]
}

// threadCPU is the CPU time the calling thread has used.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rusageThread is Linux's RUSAGE_THREAD.
const rusageThread = 1

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// routeCounts are the route counts of the routes curve.
var routeCounts = []int{10, 100, 1000}

// routesConfig is a config of n prefix routes, /svc/0 … /svc/<n-1>, in
// that order; listen and upstream make it servable.
func routesConfig(n int, listen, upstream string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# routes curve: %d prefix routes\nserver: {listen: %q}\nadmin: {listen: \"\"}\nroutes:\n", n, listen)
	for i := range n {
		fmt.Fprintf(&b, "  - {name: svc-%d, match: {path_prefix: /svc/%d}, upstream: %q, policies: [per-ip]}\n", i, i, upstream)
	}
	b.WriteString("policies:\n  per-ip: {key: ip, rate: 10000000, per: 1s}\n")
	return b.String()
}

// measureRouteMatch times Snapshot.Match on the first and the last route
// of each count, in process.
func measureRouteMatch() ([]curvePoint, error) {
	var out []curvePoint
	for _, n := range routeCounts {
		snap, err := policies.Parse("routes.yaml", []byte(routesConfig(n, "127.0.0.1:1", "http://127.0.0.1:1")), policies.Options{})
		if err != nil {
			return nil, err
		}
		at := func(i int) float64 {
			r := httptest.NewRequest(http.MethodGet, fmt.Sprintf("/svc/%d/items/42", i), nil)
			if snap.Match(r) == nil {
				panic("routes curve: no route for " + r.URL.Path)
			}
			return opCPU(func() { snap.Match(r) })
		}
		out = append(out, curvePoint{x: float64(n), label: fmt.Sprint(n), values: map[string]float64{
			"match_first_ns": at(0), "match_last_ns": at(n - 1)}})
	}
	return out, nil
}

// clientKeyCounts are the distinct client key counts of the local curve.
var clientKeyCounts = []int{1, 100, 10_000, 100_000, 1_000_000}

// ipKey writes the i-th client network as an ip policy keys it.
func ipKey(i int) string {
	return fmt.Sprintf("10.%d.%d.%d/32", byte(i>>16), byte(i>>8), byte(i))
}

// measureClientKeys decides n distinct local keys through an Engine (a
// fixed instant, so no bucket idles out), then times decisions cycling over
// those held keys, and reports the live heap per key. The eviction point
// sends 1M distinct keys at a cap of 100k, so that every decision past the
// cap evicts another key.
func measureClientKeys() ([]curvePoint, error) {
	now := time.Unix(1_800_000_000, 0)
	rule := &limiter.Rule{Name: "per-ip"}
	lim := limiter.Limit{Rate: 1 << 40, Period: time.Second, Burst: 1 << 40}
	ctx := context.Background()
	run := func(capKeys, n, decisions int) (nsPerDecision, bytesPerKey float64, err error) {
		keys := make([]string, min(n, decisions))
		for i := range keys {
			keys[i] = ipKey(i)
		}
		base := liveHeap()
		local := limiter.NewLocal(capKeys)
		e, err := limiter.NewEngine(func() time.Time { return now }, local, nil)
		if err != nil {
			return 0, 0, err
		}
		checks := []limiter.Check{{Rule: rule, Limit: lim, Cost: 1}}
		fill := min(n, capKeys)
		for i := range fill {
			checks[0].Key = keys[i%len(keys)]
			if v, err := e.Decide(ctx, checks); err != nil || !v.Allowed {
				return 0, 0, fmt.Errorf("key %d: allowed %v, err %v", i, v.Allowed, err)
			}
		}
		heap := liveHeap() - base
		// The median of three passes, in the thread's CPU time (see
		// opCPU); each pass cycles over every key.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var passes []float64
		for range 3 {
			t := threadCPU()
			for i := range decisions {
				checks[0].Key = keys[i%len(keys)]
				if _, err := e.Decide(ctx, checks); err != nil {
					return 0, 0, err
				}
			}
			passes = append(passes, float64(threadCPU()-t)/float64(decisions))
		}
		slices.Sort(passes)
		runtime.KeepAlive(e)
		return passes[1], float64(heap) / float64(fill), nil
	}
	// Unmeasured: the first decisions of the process pay for what every
	// later one shares.
	if _, _, err := run(2_000_000, 1000, 200_000); err != nil {
		return nil, err
	}
	var out []curvePoint
	for _, n := range clientKeyCounts {
		ns, b, err := run(2_000_000, n, max(n, 200_000))
		if err != nil {
			return nil, err
		}
		out = append(out, curvePoint{x: float64(n), label: fmt.Sprint(n), values: map[string]float64{"decide_ns": ns, "bytes_per_key": b}})
	}
	// 1M distinct keys against a cap of 100k: the first 100k fill it, then
	// every decision is a key not held, which evicts one.
	ns, b, err := run(100_000, 1_000_000, 1_000_000)
	if err != nil {
		return nil, err
	}
	out = append(out, curvePoint{x: 1_000_000, label: "1M at cap 100k", values: map[string]float64{"decide_ns": ns, "bytes_per_key": b, "evicting": 1}})
	return out, nil
}

// promptSizes are the prompt sizes of the llm curve.
var promptSizes = []int{1 << 10, 10 << 10, 100 << 10, 1 << 20}

// promptRing is how many bytes of distinct texts each prompt size cycles
// through: four times what the gateway's count memory holds (two
// generations of 128 KiB in each of 16 shards, per vocabulary).
const promptRing = 16 << 20

// promptBody is a chat completion whose one message is text.
func promptBody(text string) []byte {
	return []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + text + `"}],"max_tokens":16}`)
}

// measurePrompts times llm.ParseRequest (JSON, then o200k counting) on one
// goroutine for each prompt size: tokens counted per second per core.
// Beside it, in this process: Count on the 1 MiB text alone, and on 4 KiB
// of letters without a space (the input of the library's own
// BenchmarkLongPiece/latin, which runLibraryBench runs as the library
// wrote it).
//
// The gateway remembers the counts of texts it counted lately (a call
// resends its system prompt and earlier turns), so one text parsed again
// and again would time that memory, not the counting: each size takes its
// turns over promptRing bytes of distinct texts, far more than the memory
// keeps, so that every parse counts.
func measurePrompts() ([]curvePoint, map[string]float64, error) {
	var out []curvePoint
	for _, n := range promptSizes {
		text := llmload.Text(n)
		bodies := make([][]byte, max(promptRing/n, 2))
		for i := range bodies {
			// A distinct first word, the size kept.
			w := strconv.Itoa(i) + " "
			bodies[i] = promptBody(w + text[len(w):])
		}
		// Tokens a parse: the mean over a sample of the texts (they
		// differ by their first word).
		var tokens float64
		sample := min(len(bodies), 16)
		for _, b := range bodies[:sample] {
			req, err := llm.ParseRequest(llm.ChatCompletions, b)
			if err != nil {
				return nil, nil, err
			}
			tokens += float64(req.PromptTokens) / float64(sample)
		}
		next := sample
		sec := opCPU(func() {
			_, _ = llm.ParseRequest(llm.ChatCompletions, bodies[next%len(bodies)])
			next++
		}) / 1e9
		out = append(out, curvePoint{x: float64(n), label: byteSize(n), values: map[string]float64{
			"tokens": tokens, "parse_ms": sec * 1e3,
			"tokens_per_s": tokens / sec, "mb_per_s": float64(len(bodies[0])) / sec / 1e6,
		}})
	}
	tok, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		return nil, nil, err
	}
	lib := map[string]float64{}
	for name, text := range map[string]string{"count-4KiB-letters": letters(4096), "count-1MiB-text": llmload.Text(1 << 20)} {
		count, err := tok.Count(text)
		if err != nil {
			return nil, nil, err
		}
		sec := opCPU(func() { _, _ = tok.Count(text) }) / 1e9
		lib[name+"_mb_per_s"] = float64(len(text)) / sec / 1e6
		lib[name+"_tokens_per_s"] = float64(count) / sec
	}
	return out, lib, nil
}

// letters is n random lower-case letters and no space: one long piece, the
// kind of input the tokenizer library's BenchmarkLongPiece feeds it.
func letters(n int) string {
	rng := rand.New(rand.NewPCG(3, 5))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return string(b)
}

func byteSize(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}
