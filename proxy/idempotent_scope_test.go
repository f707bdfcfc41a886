package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clienttest"
	"github.com/ratelimit-gateway/gateway/proxy/idempotency"
)

// scopeYAML has two routes on two hosts with the same path, each with its
// own upstream, and a third host whose route keeps responses for known API
// keys only.
const scopeYAML = `
tenants:
  keys:
    sk-acme: {tenant: acme}
routes:
  - {name: a, match: {host: a.example, path_prefix: /pay}, upstream: "%s", idempotency: {}}
  - {name: b, match: {host: b.example, path_prefix: /pay}, upstream: "%s", idempotency: {}}
  - {name: c, match: {host: c.example, path_prefix: /pay}, upstream: "%s", idempotency: {require_api_key: true}}
`

// labelled answers through p with Content-Language set to label (a header
// kept for replay), so that a response tells which upstream made it.
func labelled(label string, p *payments) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Language", label)
		p.ServeHTTP(w, r)
	})
}

// scopeGateway serves scopeYAML on store (nil: in-process) and returns its
// URL and the upstreams of routes a, b and c.
func scopeGateway(t *testing.T, store idempotency.Store) (string, map[string]*payments) {
	t.Helper()
	ups := map[string]*payments{"a": newPayments(), "b": newPayments(), "c": newPayments()}
	yaml := fmt.Sprintf(scopeYAML, newUpstream(t, labelled("a", ups["a"])).URL,
		newUpstream(t, labelled("b", ups["b"])).URL, newUpstream(t, labelled("c", ups["c"])).URL)
	srv, _ := newGateway(t, compileYAML(t, yaml), newEngine(t, newTestClock()), gatewayOpts{idem: store})
	return srv.URL, ups
}

// payAt posts body to base/pay with Host: host, the idempotency key and the
// extra header lines.
func payAt(c *http.Client, base, host, key, body string, extra http.Header) (response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/pay", strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Host = host
	req.Header = payHeader(key)
	for k, vs := range extra {
		req.Header[k] = vs
	}
	resp, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// A stored response goes back only to the route and the caller that could
// have produced it. The same Idempotency-Key and body sent at once by 24
// clients to each of two routes on two hosts reach both upstreams, once
// each, and every answer comes from its own route's upstream. From one
// address, a keyless caller, a caller with an unknown key and a tenant each
// reach the upstream once with the same key; and a route with
// require_api_key refuses the first two with 401. In process and on Redis.
func TestIdempotencyScope(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis bool
	}{{"local", false}, {"redis", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var store idempotency.Store
			if tc.redis {
				store, _ = redisIdem(t)
			}
			base, ups := scopeGateway(t, store)
			client := clienttest.New(t, 48)
			const body = `{"amount":500}`

			t.Run("two routes on two hosts", func(t *testing.T) {
				const perHost = 24
				type result struct {
					host string
					r    response
					err  error
				}
				results := make(chan result, 2*perHost)
				var wg sync.WaitGroup
				for i := range 2 * perHost {
					host := []string{"a.example", "b.example"}[i%2]
					wg.Go(func() {
						r, err := payAt(client, base, host, "order-1", body, nil)
						results <- result{host, r, err}
					})
				}
				wg.Wait()
				close(results)
				for res := range results {
					if res.err != nil {
						t.Fatal(res.err)
					}
					if res.r.status != http.StatusCreated && res.r.status != http.StatusConflict {
						t.Fatalf("%s: status %d %s, want 201 or 409", res.host, res.r.status, res.r.body)
					}
					if lang := res.r.header.Get("Content-Language"); res.r.status == http.StatusCreated && lang != res.host[:1] {
						t.Fatalf("%s got the response of upstream %q (Idempotent-Replayed %q), want %q's",
							res.host, lang, res.r.header.Get(hdrReplayed), res.host[:1])
					}
				}
				for _, host := range []string{"a.example", "b.example"} {
					r, err := payAt(client, base, host, "order-1", body, nil)
					if err != nil {
						t.Fatal(err)
					}
					if r.status != http.StatusCreated || r.header.Get(hdrReplayed) != "true" || r.header.Get("Content-Language") != host[:1] {
						t.Fatalf("%s after: %d Replayed %q from %q, want 201 replayed from %q", host, r.status,
							r.header.Get(hdrReplayed), r.header.Get("Content-Language"), host[:1])
					}
				}
				if a, b := ups["a"].hits.Load(), ups["b"].hits.Load(); a != 1 || b != 1 {
					t.Fatalf("upstream hits: a %d, b %d; want 1 each", a, b)
				}
			})

			t.Run("keyless, unknown key and tenant from one address", func(t *testing.T) {
				before := ups["a"].hits.Load()
				for i, caller := range []struct {
					name string
					hdr  http.Header
				}{
					{"keyless", nil},
					{"unknown key", http.Header{"X-Api-Key": {"bogus"}}},
					{"another unknown key", http.Header{"X-Api-Key": {"bogus-2"}}},
					{"tenant", http.Header{"X-Api-Key": {"sk-acme"}}},
				} {
					r, err := payAt(client, base, "a.example", "order-2", body, caller.hdr)
					if err != nil {
						t.Fatal(err)
					}
					if r.status != http.StatusCreated || r.header.Get(hdrReplayed) != "" {
						t.Fatalf("%s: %d Replayed %q, want 201 from the upstream (another caller's response replayed)",
							caller.name, r.status, r.header.Get(hdrReplayed))
					}
					if got := ups["a"].hits.Load() - before; got != int64(i+1) {
						t.Fatalf("%s: upstream hits %d, want %d", caller.name, got, i+1)
					}
					// The caller's own duplicate is still replayed.
					if r, err := payAt(client, base, "a.example", "order-2", body, caller.hdr); err != nil || r.header.Get(hdrReplayed) != "true" {
						t.Fatalf("%s again: %v %d Replayed %q, want its own response replayed", caller.name, err, r.status, r.header.Get(hdrReplayed))
					}
				}
			})

			t.Run("require_api_key", func(t *testing.T) {
				for _, caller := range []struct {
					name string
					hdr  http.Header
					want int
				}{
					{"keyless", nil, http.StatusUnauthorized},
					{"unknown key", http.Header{"X-Api-Key": {"bogus"}}, http.StatusUnauthorized},
					{"tenant", http.Header{"X-Api-Key": {"sk-acme"}}, http.StatusCreated},
				} {
					r, err := payAt(client, base, "c.example", "order-3", body, caller.hdr)
					if err != nil {
						t.Fatal(err)
					}
					if r.status != caller.want {
						t.Fatalf("%s: status %d %s, want %d", caller.name, r.status, r.body, caller.want)
					}
					if r.status == http.StatusUnauthorized {
						if e := decodeError(t, r); e.Code != 40100 || !strings.Contains(e.Message, "only with a known API key") {
							t.Fatalf("%s: 401 body %s", caller.name, r.body)
						}
					}
				}
				if got := ups["c"].hits.Load(); got != 1 {
					t.Fatalf("upstream c hits %d, want 1 (the tenant's)", got)
				}
			})
		})
	}
}
