package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// h2cClient speaks HTTP/2 by prior knowledge, counting the connections it
// opens.
func h2cClient(dials *atomic.Int64) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials != nil {
			dials.Add(1)
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func TestHTTP2OverTLSByALPN(t *testing.T) {
	for _, tc := range []struct {
		protocols string
		want      int
	}{
		{"", 2}, // the default offers h2
		{"  protocols: [http1]", 1},
	} {
		t.Run(fmt.Sprintf("proto%d", tc.want), func(t *testing.T) {
			site := newTLSSite(t)
			g := startGateway(t, "alpn", site.config(t, tc.protocols, ""))
			c := &http.Client{Transport: &http.Transport{
				TLSClientConfig:   &tls.Config{RootCAs: site.ca.Pool(), ServerName: "api.example.test"},
				ForceAttemptHTTP2: true,
			}}
			resp, err := c.Get(httpsBase(g) + "/hello")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != tc.want {
				t.Fatalf("got %d over %s, want 200 over HTTP/%d", resp.StatusCode, resp.Proto, tc.want)
			}
		})
	}
}

func TestH2CIsOptIn(t *testing.T) {
	for _, tc := range []struct {
		name, server string
		h2c          bool
	}{
		{"default", "", false},
		{"lean", "  protocols: [http1, h2, h2c]", true},
		{"standard", "  protocols: [http1, h2, h2c]\n  client_server: standard", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := startGateway(t, tc.name, writeConfig(t, "gateway.yaml", "server:\n  listen: 127.0.0.1:0\n"+tc.server+`
admin: {listen: ""}
routes:
  - {name: api, upstream: "builtin:echo"}
`))
			resp, err := h2cClient(nil).Get(g.base + "/hello")
			if !tc.h2c {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("h2c without opting in: got %d over %s, want the connection refused", resp.StatusCode, resp.Proto)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
				t.Fatalf("h2c: got %d over %s, want 200 over HTTP/2", resp.StatusCode, resp.Proto)
			}
			// HTTP/1.1 on the same listener, as before.
			r1 := mustSend(t, http.DefaultClient, http.MethodGet, g.base+"/hello")
			if r1.status != http.StatusOK {
				t.Fatalf("HTTP/1.1 beside h2c: got %d, want 200", r1.status)
			}
		})
	}
}

// TestHTTP2StreamsCountPerStream sends 100 concurrent streams on one h2c
// connection against a per-IP limit: each stream is a request, and what got
// through stays within rate × elapsed + burst.
func TestHTTP2StreamsCountPerStream(t *testing.T) {
	const rate, burst = 40, 10 // per second
	g := startGateway(t, "streams", writeConfig(t, "gateway.yaml", fmt.Sprintf(`server:
  listen: 127.0.0.1:0
  protocols: [http1, h2, h2c]
admin: {listen: ""}
routes:
  - {name: api, upstream: "builtin:echo", policies: [per-ip]}
policies:
  per-ip: {key: ip, rate: %d, per: 1s, burst: %d}
`, rate, burst)))
	var dials atomic.Int64
	c := h2cClient(&dials)
	// One stream first opens the connection the others share. It counts.
	var ok, refused, other atomic.Int64
	start := time.Now()
	if r, err := c.Get(g.base + "/x"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("first stream: %v", err)
	} else {
		r.Body.Close()
		ok.Add(1)
	}
	const streams = 100
	stop := start.Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() {
			for time.Now().Before(stop) {
				resp, err := c.Get(g.base + "/x")
				if err != nil {
					other.Add(1)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusOK && resp.ProtoMajor == 2:
					ok.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests:
					refused.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	bound := int64(rate*elapsed.Seconds()) + burst
	t.Logf("%d streams, %d connection(s), %s: %d admitted (bound %d), %d refused", streams, dials.Load(), elapsed.Round(time.Millisecond), ok.Load(), bound, refused.Load())
	if dials.Load() != 1 {
		t.Errorf("connections: got %d, want 1 (every stream on one)", dials.Load())
	}
	if other.Load() != 0 {
		t.Errorf("%d streams failed or got another status", other.Load())
	}
	if ok.Load() > bound || ok.Load() < burst {
		t.Errorf("admitted %d, want between the burst %d and rate × elapsed + burst = %d", ok.Load(), burst, bound)
	}
	if refused.Load() < ok.Load() {
		t.Errorf("refused %d against %d admitted: streams are not each counted", refused.Load(), ok.Load())
	}
}

// h2cPreface is what an HTTP/2 client sends first (RFC 9113 section 3.4).
const h2cPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

func TestHTTP2ProtocolsAreValidated(t *testing.T) {
	for yaml, want := range map[string]string{
		"  protocols: [h2]":            "server.protocols: must include http1",
		"  protocols: [http1, h3]":     "server.protocols[1]: must be http1, h2 or h2c",
		"  protocols: [http1, http1]":  "server.protocols[1]: http1 is listed twice",
		"  max_concurrent_streams: -1": "server.max_concurrent_streams: must be ≥ 1",
	} {
		g, exited := serveOutcome(t, "bad", writeConfig(t, "gateway.yaml", "server:\n  listen: 127.0.0.1:0\n"+yaml+"\nadmin: {listen: \"\"}\nroutes:\n  - {name: api, upstream: \"builtin:echo\"}\n"))
		if !exited || !strings.Contains(g.output(), want) {
			t.Errorf("%s: exited %v, output:\n%s\nwant %q", yaml, exited, g.output(), want)
		}
	}
}

// TestUpstreamProtocolInCheck: check shows a route's upstream protocol,
// and a protocol its upstream's scheme cannot carry is an error with its
// file and place.
func TestUpstreamProtocolInCheck(t *testing.T) {
	for _, tc := range []struct {
		route, want string
		code        int
	}{
		{`{name: grpc, upstream: "http://127.0.0.1:9", upstream_protocol: h2c}`, "http://127.0.0.1:9 (h2c)", 0},
		{`{name: grpc, upstream: "http://127.0.0.1:9", upstream_protocol: h2}`, "gateway.yaml: routes[0].upstream_protocol: h2 is HTTP/2 over TLS and needs an https:// upstream", 1},
		{`{name: grpc, upstream: "https://127.0.0.1:9", upstream_protocol: h2c}`, "gateway.yaml: routes[0].upstream_protocol: h2c is HTTP/2 without TLS and needs an http:// upstream", 1},
		{`{name: grpc, upstream: "http://127.0.0.1:9", upstream_protocol: h3}`, "routes[0].upstream_protocol: must be auto, http1, h2 or h2c", 1},
	} {
		path := writeConfig(t, "gateway.yaml", "routes:\n  - "+tc.route+"\n")
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"check", "-config", path}, &out, &errOut)
		if got := out.String() + errOut.String(); (code == 0) != (tc.code == 0) || !strings.Contains(got, tc.want) {
			t.Errorf("%s: exit %d, output:\n%s\nwant exit %d and %q", tc.route, code, got, tc.code, tc.want)
		}
	}
}
