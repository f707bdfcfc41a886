package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/bench/internal/llmload"
)

// The cheap-before-costly measurement: an admitted small llm call's p99,
// idle and then with keyless 1 MiB prompts in flight, which the gateway
// must answer (401) before it counts their tokens. Not a timed test: it
// reports the two figures and their ratio.
const (
	cheapCalls      = 400 // small calls measured in each phase, one at a time
	cheapFlooders   = 16  // keyless large prompts kept in flight
	cheapPromptSize = 1 << 20
	cheapPhaseLimit = 60 * time.Second // a phase stops by itself past this
)

// measureCheap starts its own gateway on l's upstream (stopped with the
// other servers), measures, and writes its lines to w.
func (l *lab) measureCheap(ctx context.Context, w io.Writer) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	listen := addr(ports[0])
	path := filepath.Join(l.dir, "gateway-cheap.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(llmload.Config, listen, "http://"+l.upstream)), 0o644); err != nil {
		return err
	}
	p, err := l.ps.start("gateway-cheap", l.dir, nil, l.gateway, "serve", "-config", path)
	if err != nil {
		return err
	}
	if err := p.waitTCP(ctx, listen); err != nil {
		return err
	}
	url := "http://" + listen + "/v1/chat/completions"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cheapFlooders + 2}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()

	fmt.Fprintf(w, "\n## Cheap before costly (gateway-llm with a tenant key; %d small calls one at a time per phase)\n\n", cheapCalls)
	idle, err := smallCallLatencies(ctx, client, url)
	if err != nil {
		return err
	}
	big := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", cheapPromptSize/12) + `"}]}`)
	stopFlood := flood(ctx, client, url, big, "", cheapFlooders, http.StatusUnauthorized)
	loaded, err := smallCallLatencies(ctx, client, url)
	answered, other := stopFlood()
	if err != nil {
		return err
	}
	pi, pl := p99(idle), p99(loaded)
	fmt.Fprintf(w, "idle                           p50=%sms p99=%sms\n", ms(p50(idle)), ms(pi))
	fmt.Fprintf(w, "with %d keyless 1 MiB prompts  p50=%sms p99=%sms (keyless answered 401: %d, other: %d)\n",
		cheapFlooders, ms(p50(loaded)), ms(pl), answered, other)
	fmt.Fprintf(w, "RATIO cheap-before-costly p99 loaded/idle = %.2f\n", float64(pl)/float64(max(pi, 1)))
	return nil // stopped with the others (procs.stopAll)
}

// flood keeps n POSTs of body to url in flight until stop is called, each
// with key as its bearer token ("" for none). stop waits for them and says
// how many were answered want and how many otherwise.
func flood(ctx context.Context, client *http.Client, url string, body []byte, key string, n, want int) (stop func() (wanted, other int64)) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var got, rest atomic.Int64
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
				if key != "" {
					req.Header.Set("Authorization", "Bearer "+key)
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == want {
					got.Add(1)
				} else {
					rest.Add(1)
				}
			}
		}()
	}
	return func() (int64, int64) {
		cancel()
		wg.Wait()
		return got.Load(), rest.Load()
	}
}

// smallCallLatencies times cheapCalls admitted small calls, one at a time.
func smallCallLatencies(ctx context.Context, client *http.Client, url string) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, cheapPhaseLimit)
	defer cancel()
	out := make([]time.Duration, 0, cheapCalls)
	for range cheapCalls {
		d, err := llmload.SmallCall(ctx, client, url)
		if err != nil {
			return nil, fmt.Errorf("cheap-before-costly: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}

func p99(ds []time.Duration) time.Duration { return quantile(ds, 0.99) }
func p50(ds []time.Duration) time.Duration { return quantile(ds, 0.50) }

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
