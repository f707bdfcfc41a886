package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// BenchmarkProxy sends the same requests to the same upstream through the
// gateway Handler (route match, identity, one local token bucket, headers)
// and through a bare httputil.ReverseProxy, the anchor. Both use a transport
// from NewTransport, so the difference is the gateway's own work. Compare
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

	bareTransport := NewTransport()
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
				tr := NewTransport()
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
