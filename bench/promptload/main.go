// Command promptload measures what counting large prompts costs the small
// llm calls beside them: an admitted small chat call's latency, one call at
// a time, idle and while K clients keep 1 MiB prompts (o200k, of a known
// key) in flight, against a gateway started as a child process with an llm
// route in front of an upstream in this process that reads each call and
// answers a fixed completion at once (builtin:openai-mock would count the
// large prompts again, outside the gateway's bound, and pace its answer).
// With -rates, the points are large prompts started at fixed rates instead
// (each on its own, at most maxRateInFlight at once): the same load for
// every gateway, where K in flight is more load for a gateway that answers
// them sooner. It prints p50 and p99 per point
// and each point's p99 over the idle p99 of the same round; with several
// rounds (points in turn: idle, then each K or rate), the medians of those ratios.
//
//	go run ./bench/promptload                      # builds ./cmd/gateway
//	go run ./bench/promptload -gateway ./gw -rounds 3 -phase 4s
//	go run ./bench/promptload -gateway ./new -base ./old  # both, in turn in every round
//	go run ./bench/promptload -rates 5,10                 # 5 and 10 large prompts a second
//	go run ./bench/promptload -rates 5 -shares 0.25,0.5   # each prompt_count_share in the same rounds
//
// Every point is bounded: at most -calls small calls, for -phase from the
// first large prompt's answer (which must come within -phase).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ratelimit-gateway/gateway/bench/internal/llmload"
	"github.com/ratelimit-gateway/gateway/internal/stat"
)

// completion is the upstream's answer to every call, usage included.
const completion = `{"id":"chatcmpl-bench","object":"chat.completion","created":1764720000,"model":"gpt-4o-mini",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"lorem ipsum dolor sit amet"},"finish_reason":"length"}],` +
	`"usage":{"prompt_tokens":11,"completion_tokens":16,"total_tokens":27}}`

func main() {
	gateway := flag.String("gateway", "", "gateway binary to start (default: go build ./cmd/gateway into a temporary directory)")
	base := flag.String("base", "", "other gateway binaries (comma-separated) measured in the same rounds, for before/after")
	inFlight := flag.String("inflight", "1,2", "large prompts kept in flight, per point after idle (comma-separated)")
	rates := flag.String("rates", "", "instead of -inflight: large prompts started a second, per point after idle (comma-separated)")
	rounds := flag.Int("rounds", 3, "rounds of idle and every in-flight point")
	calls := flag.Int("calls", 4000, "at most this many small calls per point")
	phase := flag.Duration("phase", 6*time.Second, "how long each point measures, once the large prompts' first answer came")
	every := flag.Duration("every", 2*time.Millisecond, "start a small call this often (one at a time)")
	size := flag.Int("size", 1<<20, "bytes of the large prompt's text")
	lang := flag.String("lang", "en", "the large prompt's language: en (English words) or ja (Japanese, no spaces)")
	shares := flag.String("shares", "", "server.prompt_count_share values (comma-separated): each gateway runs once with each, in the same rounds (default: the config's default)")
	flag.Parse()
	var shareList []string
	if *shares != "" {
		for _, f := range strings.Split(*shares, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || v <= 0 || v > 1 {
				fail(fmt.Errorf("-shares: %q is not a share in (0, 1]", f))
			}
			shareList = append(shareList, strconv.FormatFloat(v, 'f', -1, 64))
		}
	}
	var ks []load
	if *rates != "" {
		for _, f := range strings.Split(*rates, ",") {
			r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || r <= 0 || r > 1000 {
				fail(fmt.Errorf("-rates: %q is not a rate in (0, 1000]", f))
			}
			ks = append(ks, load{rate: r})
		}
	} else {
		for _, f := range strings.Split(*inFlight, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || k < 1 {
				fail(fmt.Errorf("-inflight: %q is not a positive count", f))
			}
			ks = append(ks, load{inFlight: k})
		}
	}
	var text string
	switch *lang {
	case "en":
		text = llmload.Text(*size)
	case "ja":
		text = llmload.Japanese(*size)
	default:
		fail(fmt.Errorf("-lang: %q is neither en nor ja", *lang))
	}
	if err := run(*gateway, *base, shareList, ks, *rounds, *calls, *phase, *every, text); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "promptload:", err)
	os.Exit(1)
}

// load is one point's large prompts: inFlight kept in flight, or started
// at rate a second; the zero load is idle.
type load struct {
	inFlight int
	rate     float64
}

func (l load) String() string {
	switch {
	case l.rate > 0:
		return fmt.Sprintf("large at %g/s", l.rate)
	default:
		return fmt.Sprintf("large in flight %d", l.inFlight)
	}
}

func run(gateway, base string, shares []string, ks []load, rounds, calls int, phase, every time.Duration, text string) error {
	// An interrupt ends the run and its gateways (ctx kills them).
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	dir, err := os.MkdirTemp("", "promptload")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if gateway == "" {
		gateway = filepath.Join(dir, "gateway")
		if out, err := exec.Command("go", "build", "-o", gateway, "./cmd/gateway").CombinedOutput(); err != nil {
			return fmt.Errorf("building the gateway: %w\n%s", err, out)
		}
	}
	upstream, err := serveUpstream()
	if err != nil {
		return err
	}
	defer upstream.Close()
	binaries := []string{gateway}
	if base != "" {
		binaries = append(binaries, strings.Split(base, ",")...)
	}
	// Every binary with every share: each one a gateway of the rounds,
	// named by both.
	if len(shares) == 0 {
		shares = []string{""}
	}
	var bins, binShares []string
	for _, bin := range binaries {
		for _, share := range shares {
			name := bin
			if share != "" {
				name += " share=" + share
			}
			bins, binShares = append(bins, name), append(binShares, share)
		}
	}
	urls := make([]string, len(bins))
	for i := range bins {
		listen, stop, err := start(ctx, binaries[i/len(shares)], binShares[i], dir, strconv.Itoa(i), "http://"+upstream.Addr().String())
		if err != nil {
			return err
		}
		defer stop()
		urls[i] = "http://" + listen + "/v1/chat/completions"
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	big := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"` + text + `"}],"max_tokens":16}`)
	for _, url := range urls {
		for range 20 { // warm up: the vocabulary, connections
			if _, err := llmload.SmallCall(ctx, client, url); err != nil {
				return err
			}
		}
	}
	fmt.Printf("%d CPUs; per point, small calls one at a time every %v for %v (at most %d) once the large prompts answer; large prompt %d bytes; gateways %s\n",
		runtime.NumCPU(), every, phase, calls, len(big), strings.Join(bins, ", "))
	type point struct {
		gw int
		k  load
	}
	ratios := map[point][]float64{}
	p99s := map[point][]float64{} // ms
	for r := range rounds {
		for j := range bins {
			g := (j + r) % len(bins) // the order changes from round to round
			var idle time.Duration
			for _, k := range append([]load{{}}, ks...) {
				var answered <-chan struct{}
				var stop func() (int64, int64)
				if k.rate > 0 {
					answered, stop = floodRate(ctx, client, urls[g], big, k.rate)
				} else {
					answered, stop = flood(ctx, client, urls[g], big, k.inFlight)
				}
				lat, err := smallCalls(ctx, client, urls[g], answered, calls, phase, every)
				done, other := stop()
				if err != nil {
					return err
				}
				slices.Sort(lat)
				p50, p99 := stat.Quantile(lat, 0.50), stat.Quantile(lat, 0.99)
				p99s[point{g, k}] = append(p99s[point{g, k}], ms(p99))
				line := fmt.Sprintf("round %d, %s, %s: %d small calls p50=%.2fms p99=%.2fms", r+1, bins[g], k, len(lat), ms(p50), ms(p99))
				if k == (load{}) {
					idle = p99
				} else {
					ratio := float64(p99) / float64(idle)
					ratios[point{g, k}] = append(ratios[point{g, k}], ratio)
					line += fmt.Sprintf(" p99/idle=%.2f; large answered 200: %d (other %d)", ratio, done, other)
				}
				fmt.Println(line)
			}
		}
	}
	// The idle point does not reach the code that counts large prompts,
	// and on a shared machine its p99 moves with the others' load: the
	// median of every gateway's idle p99s is a steadier anchor than each
	// round's own.
	var idle []float64
	for g := range bins {
		idle = append(idle, p99s[point{g, load{}}]...)
	}
	anchor := stat.Median(idle)
	fmt.Printf("idle p99, all gateways and rounds: median %.2fms (%s)\n", anchor, fmtRatios(sorted(idle)))
	for g, bin := range bins {
		for _, k := range ks {
			pt := point{g, k}
			fmt.Printf("RATIO %s: small-call p99, %s: median %.2fms, over the idle median %.2f; p99/idle of its round: median %.2f (rounds %s)\n",
				bin, k, stat.Median(p99s[pt]), stat.Median(p99s[pt])/anchor, stat.Median(ratios[pt]), fmtRatios(sorted(ratios[pt])))
		}
	}
	return nil
}

// start runs the gateway bin on a free loopback port, its config in dir
// (with server.prompt_count_share: share, unless ""), and waits until it
// listens; stop ends it.
func start(ctx context.Context, bin, share, dir, name, upstream string) (listen string, stop func(), err error) {
	if listen, err = freeAddr(); err != nil {
		return "", nil, err
	}
	cfg := filepath.Join(dir, "gateway-"+name+".yaml")
	config := fmt.Sprintf(llmload.Config, listen, upstream)
	if share != "" {
		config = strings.Replace(config, "\n  listen: "+listen+"\n", "\n  listen: "+listen+"\n  prompt_count_share: "+share+"\n", 1)
	}
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return "", nil, err
	}
	gw := exec.CommandContext(ctx, bin, "serve", "-config", cfg)
	gw.Stderr = io.Discard
	if err := gw.Start(); err != nil {
		return "", nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	stop = func() { gw.Process.Kill(); gw.Wait() }
	if err := waitTCP(listen, 10*time.Second); err != nil {
		stop()
		return "", nil, err
	}
	return listen, stop, nil
}

// tally counts a point's large prompts: answered 200, otherwise (or not
// sent), and closes first at the first answer.
type tally struct {
	ok, other atomic.Int64
	first     chan struct{}
	once      sync.Once
}

func newTally() *tally { return &tally{first: make(chan struct{})} }

// post sends one large prompt and counts its answer; a POST that ends with
// ctx (the point is over) is not counted.
func (t *tally) post(ctx context.Context, client *http.Client, url string, body []byte) {
	resp, err := llmload.Post(ctx, client, url, bytes.NewReader(body))
	if err != nil {
		if ctx.Err() == nil {
			t.other.Add(1)
		}
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	t.once.Do(func() { close(t.first) })
	if resp.StatusCode == http.StatusOK {
		t.ok.Add(1)
	} else {
		t.other.Add(1)
	}
}

// stopper returns what ends a point: cancel, wait for wg, the counts.
func (t *tally) stopper(cancel func(), wg *sync.WaitGroup) func() (ok, other int64) {
	return func() (int64, int64) {
		cancel()
		wg.Wait()
		return t.ok.Load(), t.other.Load()
	}
}

// flood keeps n POSTs of body in flight until stop, which says how many
// were answered 200 and how many otherwise. answered is closed at the
// first answer (at once when n is 0): from then on the load is steady.
func flood(ctx context.Context, client *http.Client, url string, body []byte, n int) (answered <-chan struct{}, stop func() (ok, other int64)) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t := newTally()
	if n == 0 {
		close(t.first)
	}
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				t.post(ctx, client, url, body)
			}
		})
	}
	return t.first, t.stopper(cancel, &wg)
}

// maxRateInFlight bounds the large prompts floodRate has in flight: a start
// that would pass it is skipped and counted as not answered.
const maxRateInFlight = 8

// floodRate starts a POST of body rate times a second, each on its own,
// until stop, which says how many were answered 200 and how many
// otherwise (or skipped: maxRateInFlight were in flight). answered is
// closed at the first answer.
func floodRate(ctx context.Context, client *http.Client, url string, body []byte, rate float64) (answered <-chan struct{}, stop func() (ok, other int64)) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t := newTally()
	slots := make(chan struct{}, maxRateInFlight)
	wg.Go(func() {
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			select {
			case slots <- struct{}{}:
			default:
				t.other.Add(1) // skipped
				continue
			}
			wg.Go(func() {
				defer func() { <-slots }()
				t.post(ctx, client, url, body)
			})
		}
	})
	return t.first, t.stopper(cancel, &wg)
}

// smallCalls times small calls one at a time, one started every every
// (or at once when the last took longer), for phase from steady's close
// (waiting for it at most phase), stopping early at calls of them.
func smallCalls(ctx context.Context, client *http.Client, url string, steady <-chan struct{}, calls int, phase, every time.Duration) ([]time.Duration, error) {
	select {
	case <-steady:
	case <-time.After(phase):
		return nil, fmt.Errorf("no large prompt answered within %v", phase)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, phase)
	defer cancel()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var lat []time.Duration
	for len(lat) < calls {
		if len(lat) > 0 {
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
		}
		d, err := llmload.SmallCall(ctx, client, url)
		if err != nil {
			if ctx.Err() != nil && len(lat) > 0 {
				break // the phase is over
			}
			return nil, err
		}
		lat = append(lat, d)
	}
	return lat, nil
}

// serveUpstream answers every request with completion once it has read the
// body, on a loopback port.
func serveUpstream() (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, completion)
	}))
	return l, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func waitTCP(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("the gateway did not listen on " + addr + " within " + within.String())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sorted(xs []float64) []float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs
}

func fmtRatios(rs []float64) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.FormatFloat(r, 'f', 2, 64)
	}
	return strings.Join(s, ", ")
}
