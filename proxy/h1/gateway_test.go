package h1_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy"
	"github.com/ratelimit-gateway/gateway/proxy/h1"
)

// closingTransport is a transport whose idle connections a test closes.
type closingTransport interface {
	http.RoundTripper
	CloseIdleConnections()
}

// serveGateway serves the gateway's handler for config (YAML) as gateway
// serve does by default: this package's server in front, its transport
// behind. It returns the gateway's base URL.
func serveGateway(t *testing.T, config string) string {
	t.Helper()
	return serveGatewayOn(t, config, h1.New(h1.Config{Fallback: proxy.NewStandardTransport()}))
}

// serveGatewayOn is serveGateway with tr as the upstream transport.
func serveGatewayOn(t *testing.T, config string, tr closingTransport) string {
	t.Helper()
	snap, err := policies.Parse("gateway.yaml", []byte(config), policies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	holder := &snapshotHolder{}
	holder.p.Store(snap)
	engine, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	h, err := proxy.New(proxy.Config{Snapshots: holder, Limiter: engine, Transport: tr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &h1.Server{Handler: h, Fallback: &http.Server{Handler: h}}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	return "http://" + ln.Addr().String()
}

// TestGatewayRouteTimeout: on the lean transport the route timeout is the
// outbound context's deadline, kept by the connection's deadlines: an
// upstream that does not answer within it gets a 504 naming the timeout,
// with the request's rate-limit headers (set apart from the header map by
// the lean server); one whose headers come in time streams its body for as
// long as it takes.
func TestGatewayRouteTimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	arrived := make(chan struct{}, 1)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done() // answers nothing until the gateway gives up
	}))
	t.Cleanup(slow.Close)
	streaming := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first,")
		w.(http.Flusher).Flush()
		// Time passing is what is tested: the rest comes well after the
		// timeout would have cut it.
		<-time.After(4 * timeout)
		io.WriteString(w, "last")
	}))
	t.Cleanup(streaming.Close)
	gw := serveGateway(t, `routes:
  - {name: slow, match: {path_prefix: /slow}, upstream: "`+slow.URL+`", timeout: 50ms, policies: [per-ip]}
  - {name: stream, match: {path_prefix: /stream}, upstream: "`+streaming.URL+`", timeout: 50ms}
policies:
  per-ip: {key: ip, algorithm: token_bucket, rate: 10, per: 1m}
`)
	res, err := http.Get(gw + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	<-arrived
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status: got %d, want 504 (body %s)", res.StatusCode, body)
	}
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Code != 50400 || !strings.Contains(e.Message, "50ms") {
		t.Errorf("error: got %s (%v), want 50400 naming the 50ms timeout", body, err)
	}
	if got := res.Header.Get("RateLimit"); !strings.HasPrefix(got, `"per-ip";r=9;`) {
		t.Errorf("RateLimit on 504: got %q, want the request's", got)
	}

	res, err = http.Get(gw + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	body, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || string(body) != "first,last" {
		t.Errorf("stream: %d %q %v, want 200 and the whole body", res.StatusCode, body, err)
	}
}
