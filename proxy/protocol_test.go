package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// protoUpstream answers with the protocol the request came in.
var protoUpstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) })

// TestUpstreamProtocols sends each route's requests in its
// upstream_protocol: to a TLS upstream that offers HTTP/2 and HTTP/1.1, and
// to a plain one that speaks h2c beside HTTP/1.1.
func TestUpstreamProtocols(t *testing.T) {
	tlsUp := httptest.NewUnstartedServer(protoUpstream)
	tlsUp.EnableHTTP2 = true
	tlsUp.StartTLS()
	t.Cleanup(tlsUp.Close)
	plain := &http.Server{Handler: protoUpstream, Protocols: new(http.Protocols)}
	plain.Protocols.SetHTTP1(true)
	plain.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go plain.Serve(ln)
	t.Cleanup(func() { plain.Close() })
	plainURL := "http://" + ln.Addr().String()

	trust := &tls.Config{RootCAs: tlsUp.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	auto := newStandardTransport(NewDialer().DialContext)
	auto.TLSClientConfig = trust.Clone()
	ups := NewUpstreamTransports(auto)
	for _, tr := range []*http.Transport{ups.http1, ups.h2, ups.h2c} {
		tr.TLSClientConfig = trust.Clone()
	}
	t.Cleanup(ups.CloseIdleConnections)

	cases := []struct {
		prefix, upstream string
		proto            policies.UpstreamProtocol
		want             string
	}{
		{"/auto-tls", tlsUp.URL, policies.UpstreamAuto, "HTTP/2.0"}, // ALPN's choice
		{"/http1-tls", tlsUp.URL, policies.UpstreamHTTP1, "HTTP/1.1"},
		{"/h2", tlsUp.URL, policies.UpstreamH2, "HTTP/2.0"},
		{"/auto-plain", plainURL, policies.UpstreamAuto, "HTTP/1.1"},
		{"/http1-plain", plainURL, policies.UpstreamHTTP1, "HTTP/1.1"},
		{"/h2c", plainURL, policies.UpstreamH2C, "HTTP/2.0"},
	}
	var routes []*policies.Route
	for _, c := range cases {
		rt := testRoute(t, strings.TrimPrefix(c.prefix, "/"), c.prefix, c.upstream)
		rt.StripPrefix = c.prefix
		rt.UpstreamProtocol = c.proto
		routes = append(routes, rt)
	}
	holder := &snapshotHolder{}
	holder.p.Store(testSnapshot(t, nil, routes...))
	h, err := New(Config{Snapshots: holder, Limiter: fakeLimiter{}, Transport: auto, Protocols: ups, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(h)
	t.Cleanup(gw.Close)
	for _, c := range cases {
		for range 2 { // a second exchange on the pooled connection
			r := do(t, gw.Client(), http.MethodGet, gw.URL+c.prefix+"/", nil, nil)
			if r.status != http.StatusOK || string(r.body) != c.want {
				t.Errorf("%s (%s): got %d %q, want %s", c.prefix, c.proto, r.status, r.body, c.want)
			}
		}
	}
}

// TestGRPCAnswersMapStatuses sends gRPC calls that the gateway answers
// itself: each answer is HTTP 200, trailers-only, with the gRPC status its
// HTTP status maps to.
func TestGRPCAnswersMapStatuses(t *testing.T) {
	up := newUpstream(t, protoUpstream)
	lim := perMinute(1, 1)
	rejecting := testPolicy(t, "needs-key", "api_key", lim, policies.MissingReject)
	cases := []struct {
		name   string
		route  *policies.Route
		lim    Limiter
		header http.Header
		status string
	}{
		{"no route", nil, fakeLimiter{}, nil, "12"},
		{"a key the route needs", testRoute(t, "keyed", "/", up.URL, rejecting), fakeLimiter{verdict: limiter.Verdict{Allowed: true, Decisions: []limiter.Decision{{Policy: "needs-key", Limit: lim, Allowed: true}}}}, nil, "16"},
		{"Redis down, failing closed", testRoute(t, "shared", "/", up.URL, testPolicy(t, "shared", "ip", lim, policies.MissingShared)), fakeLimiter{verdict: limiter.DeniedBy(0, []limiter.Decision{
			{Policy: "shared", Limit: lim, Reason: limiter.ReasonUnavailable, RetryAfter: time.Second}})}, nil, "14"},
		{"the upstream unreachable", testRoute(t, "down", "/", closedURL(t)), fakeLimiter{}, nil, "14"},
		{"headers too large", testRoute(t, "big", "/", up.URL), fakeLimiter{}, http.Header{"X-Big": {strings.Repeat("x", DefaultMaxHeaderBytes)}}, "8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var snap *policies.Snapshot
			if c.route == nil {
				snap = testSnapshot(t, nil, testRoute(t, "elsewhere", "/elsewhere", up.URL))
			} else {
				snap = testSnapshot(t, nil, c.route)
			}
			gw, _ := newGateway(t, snap, c.lim, gatewayOpts{})
			hdr := http.Header{"Content-Type": {"application/grpc+proto"}}
			for k, v := range c.header {
				hdr[k] = v
			}
			r := do(t, gw.Client(), http.MethodPost, gw.URL+"/pkg.Service/Method", strings.NewReader("\x00\x00\x00\x00\x00"), hdr)
			if r.status != http.StatusOK || r.header.Get("Grpc-Status") != c.status || len(r.body) != 0 || r.header.Get("Content-Type") != "application/grpc" {
				t.Fatalf("got HTTP %d, grpc-status %q, content-type %q, body %q; want 200, %s, application/grpc, none",
					r.status, r.header.Get("Grpc-Status"), r.header.Get("Content-Type"), r.body, c.status)
			}
			if r.header.Get("Grpc-Message") == "" {
				t.Error("no grpc-message")
			}
		})
	}
}

func TestGRPCStatusFor(t *testing.T) {
	for status, want := range map[int]int{400: 3, 401: 16, 403: 7, 404: 12, 409: 10, 413: 8, 429: 8, 431: 8, 500: 13, 502: 14, 503: 14, 504: 4, 418: 2} {
		if got := grpcStatusFor(status); got != want {
			t.Errorf("HTTP %d: got grpc-status %d, want %d", status, got, want)
		}
	}
}

func TestParseGRPCTimeout(t *testing.T) {
	for v, want := range map[string]time.Duration{"1S": time.Second, "250m": 250 * time.Millisecond, "99999999H": 1<<63 - 1, "5n": 5, "3M": 3 * time.Minute, "7u": 7 * time.Microsecond} {
		if got, ok := parseGRPCTimeout(v); !ok || got != want {
			t.Errorf("%q: got %v %v, want %v", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "S", "1", "1x", "-1S", "123456789S", "1.5S", "+1S"} {
		if got, ok := parseGRPCTimeout(v); ok {
			t.Errorf("%q: got %v, want malformed", v, got)
		}
	}
}

func TestGRPCMessageIsPercentEncoded(t *testing.T) {
	if got, want := grpcPercentEncode("100% ünï\n"), "100%25 %C3%BCn%C3%AF%0A"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestTrailersPassThrough sends a gRPC-shaped call through the gateway to
// an h2c upstream: "te: trailers" reaches it, and the trailers it sends,
// announced or not, reach the client, over HTTP/1.1 and HTTP/2 alike.
func TestTrailersPassThrough(t *testing.T) {
	up := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Announced")
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("X-Saw-Te", r.Header.Get("Te"))
		w.Write([]byte("\x00\x00\x00\x00\x00"))
		w.(http.Flusher).Flush()
		w.Header().Set("X-Announced", "a")
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
		w.Header().Set(http.TrailerPrefix+"Grpc-Message", "fine")
	})}
	up.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(ln)
	t.Cleanup(func() { up.Close() })
	rt := testRoute(t, "grpc", "/", "http://"+ln.Addr().String())
	rt.UpstreamProtocol = policies.UpstreamH2C
	// gw serves HTTP/1.1 with the lean server, and HTTP/2 (h2c) through
	// the net/http server it hands those connections to.
	gw, _ := newGateway(t, testSnapshot(t, nil, rt), fakeLimiter{}, gatewayOpts{h2c: true})
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(h2c.CloseIdleConnections)
	for name, c := range map[string]*http.Client{"HTTP/1.1": gw.Client(), "h2c": {Transport: h2c}} {
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/pkg.Service/Call", strings.NewReader("\x00\x00\x00\x00\x00"))
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := map[string]int{"HTTP/1.1": 1, "h2c": 2}[name]; resp.ProtoMajor != want {
			t.Errorf("%s: served over %s", name, resp.Proto)
		}
		if resp.Header.Get("X-Saw-Te") != "trailers" {
			t.Errorf("%s: the upstream saw te %q, want trailers", name, resp.Header.Get("X-Saw-Te"))
		}
		if len(body) != 5 {
			t.Errorf("%s: body %q", name, body)
		}
		for k, want := range map[string]string{"X-Announced": "a", "Grpc-Status": "0", "Grpc-Message": "fine"} {
			if got := resp.Trailer.Get(k); got != want {
				t.Errorf("%s: trailer %s: got %q, want %q (trailers %v)", name, k, got, want, resp.Trailer)
			}
		}
	}
}

// outcomeCounter is an Observer that counts request outcomes.
type outcomeCounter struct {
	mu       sync.Mutex
	outcomes map[string]int
}

func (o *outcomeCounter) Request(_, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcomes[outcome]++
}
func (*outcomeCounter) Policy(string, string, string)          {}
func (*outcomeCounter) Decision(string, time.Duration)         {}
func (*outcomeCounter) Upstream(string, int, time.Duration)    {}
func (*outcomeCounter) InFlight(int)                           {}
func (*outcomeCounter) LLMCharge(string, string, int64, int64) {}

// TestGRPCAnswersCountAsWhatTheyStandFor: a gRPC call the gateway refuses
// is answered HTTP 200, and counted as the refusal it is.
func TestGRPCAnswersCountAsWhatTheyStandFor(t *testing.T) {
	up := newUpstream(t, protoUpstream)
	m := &outcomeCounter{outcomes: map[string]int{}}
	gw, _ := newGateway(t, testSnapshot(t, nil, testRoute(t, "elsewhere", "/elsewhere", up.URL)), fakeLimiter{}, gatewayOpts{metrics: m})
	r := do(t, gw.Client(), http.MethodPost, gw.URL+"/pkg.Service/Method", strings.NewReader(""), http.Header{"Content-Type": {"application/grpc"}})
	if r.status != http.StatusOK || r.header.Get("Grpc-Status") != "12" {
		t.Fatalf("got %d, grpc-status %q", r.status, r.header.Get("Grpc-Status"))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.outcomes[outcomeInvalid] != 1 || m.outcomes[outcomeAllowed] != 0 {
		t.Fatalf("outcomes %v, want one invalid (no route), none allowed", m.outcomes)
	}
}

// TestHTTP2StreamFailureKeepsItsConnection: an answer that leaves a request
// body unread closes an HTTP/1.1 connection, but on HTTP/2 it ends that
// stream alone: the connection's next request is served on it.
func TestHTTP2StreamFailureKeepsItsConnection(t *testing.T) {
	gw, _ := newGateway(t, testSnapshot(t, nil, testRoute(t, "down", "/", closedURL(t))), fakeLimiter{}, gatewayOpts{h2c: true})
	var dials atomic.Int64
	tr := &http.Transport{Protocols: new(http.Protocols), DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	for i := range 3 {
		pr, pw := io.Pipe() // a body still coming when the upstream fails
		go pw.Write([]byte("part"))
		resp, err := c.Post(gw.URL+"/upload", "application/octet-stream", pr)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		pw.Close()
		if resp.StatusCode != http.StatusBadGateway || resp.ProtoMajor != 2 {
			t.Fatalf("request %d: got %d over %s, want 502 over HTTP/2", i, resp.StatusCode, resp.Proto)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("connections: got %d, want 1 (one stream's failure ends the stream only)", n)
	}
}

// A pool member's protocol takes the same transports as a route's
// upstream_protocol: two members of one plain server, one spoken to in
// HTTP/1.1 and one in h2c, each answer in the protocol it was named.
func TestPoolMemberProtocols(t *testing.T) {
	plain := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto)
	}), Protocols: new(http.Protocols)}
	plain.Protocols.SetHTTP1(true)
	plain.Protocols.SetUnencryptedHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go plain.Serve(ln)
	t.Cleanup(func() { plain.Close() })
	u := "http://" + ln.Addr().String()
	for _, c := range []struct{ protocol, want string }{{"http1", "HTTP/1.1"}, {"h2c", "HTTP/2.0"}, {"auto", "HTTP/1.1"}} {
		snap := compileYAML(t, fmt.Sprintf("routes:\n  - {name: api, match: {path_prefix: /}, upstreams: [{name: a, url: %q, protocol: %s}, {name: b, url: %q, protocol: %s}]}\n", u, c.protocol, u, c.protocol))
		gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
		for range 4 { // both members, twice
			r := do(t, gw.Client(), http.MethodGet, gw.URL+"/", nil, nil)
			if r.status != http.StatusOK || string(r.body) != c.want {
				t.Errorf("members with protocol %s: got %d %q, want 200 %s", c.protocol, r.status, r.body, c.want)
			}
		}
	}
}
