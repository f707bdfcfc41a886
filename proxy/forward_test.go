package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/builtin"
	"github.com/ratelimit-gateway/gateway/policies"
)

// echoOf decodes a builtin echo answer.
func echoOf(t *testing.T, r response) builtin.EchoResponse {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status: got %d, want 200 (body %s)", r.status, r.body)
	}
	var e builtin.EchoResponse
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("decoding echo %q: %v", r.body, err)
	}
	return e
}

// TestDefaultRouteWithBuiltinEcho is what a newcomer sees: the catch-all
// route forwards to the built-in echo, which answers with the request.
func TestDefaultRouteWithBuiltinEcho(t *testing.T) {
	echo := newUpstream(t, builtin.Echo())
	snap := testSnapshot(t, nil, testRoute(t, "default", "/", echo.URL,
		testPolicy(t, "per-ip", "ip", perMinute(10, 10), policies.MissingReject)))
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})

	r := do(t, gw.Client(), "POST", gw.URL+"/hello/world?x=1&y=2", strings.NewReader(`{"hi":1}`),
		http.Header{"X-Custom": {"yes"}})
	e := echoOf(t, r)
	upHost := strings.TrimPrefix(echo.URL, "http://")
	gwHost := strings.TrimPrefix(gw.URL, "http://")
	checks := []struct{ what, got, want string }{
		{"method", e.Method, "POST"},
		{"path", e.Path, "/hello/world"},
		{"raw_query", e.RawQuery, "x=1&y=2"},
		{"host (the upstream's)", e.Host, upHost},
		{"body", e.Body, `{"hi":1}`},
		{"X-Custom", e.Headers.Get("X-Custom"), "yes"},
		{"X-Forwarded-For", strings.Join(e.Headers.Values("X-Forwarded-For"), "|"), "127.0.0.1"},
		{"X-Forwarded-Host", e.Headers.Get("X-Forwarded-Host"), gwHost},
		{"X-Forwarded-Proto", e.Headers.Get("X-Forwarded-Proto"), "http"},
		{"response RateLimit", r.header.Get("RateLimit"), `"per-ip";r=9;t=6`},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.what, c.got, c.want)
		}
	}
}

// TestConnectionHeaderCannotStripForwardingHeaders sends, over a raw
// connection, a request that names the X-Forwarded-* headers as hop-by-hop:
// the upstream must still see the gateway's values, not the client's.
func TestConnectionHeaderCannotStripForwardingHeaders(t *testing.T) {
	echo := newUpstream(t, builtin.Echo())
	snap := testSnapshot(t, nil, testRoute(t, "default", "/", echo.URL))
	gw, _ := newGateway(t, snap, fakeLimiter{}, gatewayOpts{})
	gwHost := strings.TrimPrefix(gw.URL, "http://")

	conn, err := net.Dial("tcp", gwHost)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	raw := "GET /x HTTP/1.1\r\n" +
		"Host: " + gwHost + "\r\n" +
		"Connection: X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host, Forwarded\r\n" +
		"X-Forwarded-For: 6.6.6.6\r\n" +
		"X-Forwarded-Proto: https\r\n" +
		"X-Forwarded-Host: evil.example\r\n" +
		"Forwarded: for=6.6.6.6\r\n" +
		"\r\n"
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	e := echoOf(t, response{status: resp.StatusCode, header: resp.Header, body: body})
	checks := []struct{ name, want string }{
		{"X-Forwarded-For", "127.0.0.1"},
		{"X-Forwarded-Proto", "http"},
		{"X-Forwarded-Host", gwHost},
		{"Forwarded", ""},
		{"Connection", ""},
	}
	for _, c := range checks {
		if got := strings.Join(e.Headers.Values(c.name), "|"); got != c.want {
			t.Errorf("upstream saw %s: got %q, want %q", c.name, got, c.want)
		}
	}
}

// TestSpoofedForwardedForIgnored: from an untrusted peer, X-Forwarded-For
// changes neither the bucket nor what the upstream is told.
func TestSpoofedForwardedForIgnored(t *testing.T) {
	echo := newUpstream(t, builtin.Echo())
	snap := testSnapshot(t, []string{"10.0.0.0/8"}, testRoute(t, "default", "/", echo.URL,
		testPolicy(t, "per-ip", "ip", perMinute(1, 1), policies.MissingReject)))
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})

	first := do(t, gw.Client(), "GET", gw.URL+"/", nil, http.Header{"X-Forwarded-For": {"198.51.100.1"}})
	e := echoOf(t, first)
	if got := strings.Join(e.Headers.Values("X-Forwarded-For"), "|"); got != "127.0.0.1" {
		t.Errorf("upstream X-Forwarded-For: got %q, want %q", got, "127.0.0.1")
	}
	second := do(t, gw.Client(), "GET", gw.URL+"/", nil, http.Header{"X-Forwarded-For": {"198.51.100.2"}})
	if second.status != 429 {
		t.Errorf("second request with another spoofed address: status got %d, want 429 (one bucket per real peer)", second.status)
	}
}

// TestTrustedProxyChain: behind a trusted proxy, the right-most untrusted
// address is the client, and the chain is passed on with the peer appended.
func TestTrustedProxyChain(t *testing.T) {
	echo := newUpstream(t, builtin.Echo())
	snap := testSnapshot(t, []string{"127.0.0.0/8", "10.0.0.0/8"}, testRoute(t, "default", "/", echo.URL,
		testPolicy(t, "per-ip", "ip", perMinute(1, 1), policies.MissingReject)))
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})

	steps := []struct {
		xff, proto string
		wantStatus int
		wantXFF    string // as the upstream sees it (200 only)
		wantProto  string
	}{
		{"6.6.6.6, 203.0.113.9, 10.0.0.5", "https", 200, "6.6.6.6, 203.0.113.9, 10.0.0.5, 127.0.0.1", "https"},
		{"198.51.100.7, 10.0.0.5", "", 200, "198.51.100.7, 10.0.0.5, 127.0.0.1", "http"},
		{"7.7.7.7, 203.0.113.9, 10.0.0.6", "", 429, "", ""}, // same client as the first
	}
	for i, s := range steps {
		h := http.Header{"X-Forwarded-For": {s.xff}}
		if s.proto != "" {
			h.Set("X-Forwarded-Proto", s.proto)
		}
		r := do(t, gw.Client(), "GET", gw.URL+"/", nil, h)
		if r.status != s.wantStatus {
			t.Fatalf("request %d: status got %d, want %d", i+1, r.status, s.wantStatus)
		}
		if s.wantStatus != 200 {
			continue
		}
		e := echoOf(t, r)
		if got := strings.Join(e.Headers.Values("X-Forwarded-For"), "|"); got != s.wantXFF {
			t.Errorf("request %d: upstream X-Forwarded-For got %q, want %q", i+1, got, s.wantXFF)
		}
		if got := e.Headers.Get("X-Forwarded-Proto"); got != s.wantProto {
			t.Errorf("request %d: upstream X-Forwarded-Proto got %q, want %q", i+1, got, s.wantProto)
		}
	}
}

func TestStripPrefix(t *testing.T) {
	echo := newUpstream(t, builtin.Echo())
	tests := []struct {
		name     string
		prefix   string
		upstream string // path appended to the echo's URL
		target   string
		wantURI  string
	}{
		{"prefix removed, query kept", "/api", "", "/api/users?x=1", "/users?x=1"},
		{"exact prefix becomes /", "/api", "", "/api", "/"},
		{"prefix with trailing slash", "/api/", "", "/api/users", "/users"},
		{"escapes survive", "/api", "", "/api/a%3Fb%20c", "/a%3Fb%20c"},
		{"escaped prefix", "/my api", "", "/my%20api/x%3Fy", "/x%3Fy"},
		{"upstream base path joined", "/api", "/base", "/api/users", "/base/users"},
		{"other segment untouched", "/api", "", "/apix/users", "/apix/users"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := testRoute(t, "r", "/", echo.URL+tt.upstream)
			rt.StripPrefix = tt.prefix
			gw, _ := newGateway(t, testSnapshot(t, nil, rt), fakeLimiter{}, gatewayOpts{})
			e := echoOf(t, do(t, gw.Client(), "GET", gw.URL+tt.target, nil, nil))
			if e.URI != tt.wantURI {
				t.Errorf("upstream request target: got %q, want %q", e.URI, tt.wantURI)
			}
		})
	}
}

func TestStripPrefixURL(t *testing.T) {
	tests := []struct {
		in, prefix            string
		wantPath, wantRawPath string
	}{
		{"/api/users", "/api", "/users", ""},
		{"/api", "/api", "/", ""},
		{"/api/", "/api/", "/", ""},
		{"/", "/", "/", ""},
		{"/apix", "/api", "/apix", ""},
		{"/api/a%2Fb", "/api", "/a/b", "/a%2Fb"},
		{"/a%2Fb/c", "/a/b", "/c", "/c"}, // one escape is one decoded byte
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		stripPrefix(u, tt.prefix)
		if u.Path != tt.wantPath || u.RawPath != tt.wantRawPath {
			t.Errorf("stripPrefix(%q, %q): got (%q, %q), want (%q, %q)",
				tt.in, tt.prefix, u.Path, u.RawPath, tt.wantPath, tt.wantRawPath)
		}
	}
}

// TestStreamingPassesThrough: an upstream writes one chunk, flushes, and
// blocks until the test has read that chunk through the gateway — so the
// test can only finish if chunks arrive before the upstream is done. The
// route timer is a manual one, fired after the first chunk: a stream that
// has started is not cut by the route timeout (on the net/http transport;
// TestKeptRouteTimeout is the lean path's).
func TestStreamingPassesThrough(t *testing.T) {
	tests := []struct {
		name        string
		contentType string
		first, last string
	}{
		{"server-sent events", "text/event-stream", "data: 1\n\n", "data: 2\n\n"},
		{"chunked without length", "application/octet-stream", "chunk-1\n", "chunk-2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				io.WriteString(w, tt.first)
				w.(http.Flusher).Flush()
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				io.WriteString(w, tt.last)
			}))
			var timers manualTimers
			rt := testRoute(t, "stream", "/", up.URL,
				testPolicy(t, "per-ip", "ip", perMinute(10, 10), policies.MissingReject))
			gw, _ := newGateway(t, testSnapshot(t, nil, rt), newEngine(t, newTestClock()),
				gatewayOpts{afterFunc: timers.afterFunc, transport: timerTransport()})

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "GET", gw.URL+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := gw.Client().Do(req)
			if err != nil {
				close(release)
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if got := resp.Header.Get("RateLimit"); got != `"per-ip";r=9;t=6` {
				t.Errorf("RateLimit on a stream: got %q, want %q", got, `"per-ip";r=9;t=6`)
			}
			br := bufio.NewReader(resp.Body)
			first := make([]byte, len(tt.first))
			if _, err := io.ReadFull(br, first); err != nil {
				close(release)
				t.Fatalf("reading the first chunk before the upstream finished: %v", err)
			}
			if string(first) != tt.first {
				t.Errorf("first chunk: got %q, want %q", first, tt.first)
			}
			if timers.last(t).fire() {
				t.Error("route timer fired after the response headers arrived: want it stopped")
			}
			close(release)
			rest, err := io.ReadAll(br)
			if err != nil {
				t.Fatalf("reading the rest: %v", err)
			}
			if string(rest) != tt.last {
				t.Errorf("rest: got %q, want %q", rest, tt.last)
			}
		})
	}
}

// TestTimeoutBeforeHeaders: the same manual timer fired while the upstream
// has not answered gives 504 with the rate-limit headers of the request (on
// the net/http transport; TestKeptRouteTimeout is the lean path's).
func TestTimeoutBeforeHeaders(t *testing.T) {
	slow, arrived := blockingUpstream(t)
	var timers manualTimers
	rt := testRoute(t, "slow", "/", slow.URL, testPolicy(t, "per-ip", "ip", perMinute(10, 10), policies.MissingReject))
	gw, _ := newGateway(t, testSnapshot(t, nil, rt), newEngine(t, newTestClock()),
		gatewayOpts{afterFunc: timers.afterFunc, transport: timerTransport()})

	type result struct {
		r   response
		err error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := gw.Client().Get(gw.URL + "/")
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- result{response{status: resp.StatusCode, header: resp.Header, body: b}, err}
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("request never reached the upstream")
	}
	if !timers.last(t).fire() {
		t.Fatal("route timer was stopped before the upstream answered")
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("no answer after the route timeout fired")
	}
	if res.err != nil {
		t.Fatalf("request: %v", res.err)
	}
	r := res.r
	if r.status != 504 {
		t.Fatalf("status: got %d, want 504 (body %s)", r.status, r.body)
	}
	if e := decodeError(t, r); e.Code != 50400 {
		t.Errorf("code: got %d, want 50400", e.Code)
	}
	if got := r.header.Get("RateLimit"); got != `"per-ip";r=9;t=6` {
		t.Errorf("RateLimit on 504: got %q, want %q", got, `"per-ip";r=9;t=6`)
	}
}

func TestBufferPool(t *testing.T) {
	p := newBufferPool()
	b := p.Get()
	if len(b) != bufferSize {
		t.Fatalf("Get: got %d bytes, want %d", len(b), bufferSize)
	}
	p.Put(b)
	p.Put(make([]byte, 10)) // foreign small buffers are dropped, not stored
	if got := len(p.Get()); got != bufferSize {
		t.Errorf("Get after Put: got %d bytes, want %d", got, bufferSize)
	}
	if n := testing.AllocsPerRun(100, func() { p.Put(p.Get()) }); n != 0 {
		t.Errorf("Get+Put allocations: got %v, want 0", fmt.Sprint(n))
	}
}

// TestTimeoutCountsTheWaitNotTheUpload: a body that keeps moving is never
// cut by the route timeout, however long the upload takes; a wait without
// progress longer than the timeout is. The fake clock moves 60ms after each
// chunk the upstream has read, against a 100ms timeout: 300ms of upload.
func TestTimeoutCountsTheWaitNotTheUpload(t *testing.T) {
	const (
		chunk   = 1000
		chunks  = 5
		timeout = 100 * time.Millisecond
	)
	tests := []struct {
		name       string
		gap        time.Duration // fake time between chunks
		wantStatus int
		wantChunks int // chunks the upstream reads before the answer
	}{
		{"slow upload that moves", 60 * time.Millisecond, 200, chunks},
		{"upload that stalls", 150 * time.Millisecond, 504, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan struct{}, chunks)
			up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				buf := make([]byte, chunk)
				n := 0
				for {
					if _, err := io.ReadFull(r.Body, buf); err != nil {
						break
					}
					n++
					got <- struct{}{}
				}
				fmt.Fprintf(w, "%d", n*chunk)
			}))
			var timers manualTimers
			rt := testRoute(t, "upload", "/", up.URL)
			rt.Timeout = timeout
			gw, _ := newGateway(t, testSnapshot(t, nil, rt), fakeLimiter{}, gatewayOpts{afterFunc: timers.afterFunc})

			pr, pw := io.Pipe()
			var writers sync.WaitGroup
			defer writers.Wait()
			defer pw.CloseWithError(errors.New("test over")) // unblocks a writer the gateway stopped reading
			done := make(chan response, 1)
			go func() {
				resp, err := gw.Client().Post(gw.URL+"/", "application/octet-stream", pr)
				if err != nil {
					done <- response{status: -1, body: []byte(err.Error())}
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				done <- response{status: resp.StatusCode, header: resp.Header, body: b}
			}()
			var answered *response
			for i := 0; i < tt.wantChunks; i++ {
				writers.Go(func() { pw.Write(bytes.Repeat([]byte{'x'}, chunk)) })
				select {
				case <-got:
				case r := <-done:
					answered = &r
				case <-time.After(10 * time.Second):
					t.Fatalf("chunk %d never reached the upstream", i+1)
				}
				if answered != nil {
					t.Fatalf("answered %d during the upload, after %d of %d chunks (%s)", answered.status, i, tt.wantChunks, answered.body)
				}
				timers.advance(tt.gap)
			}
			if tt.wantStatus == 200 {
				pw.Close()
			}
			var r response
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("no answer")
			}
			if r.status != tt.wantStatus {
				t.Fatalf("status: got %d, want %d (body %s)", r.status, tt.wantStatus, r.body)
			}
			if tt.wantStatus == 200 {
				if want := fmt.Sprint(chunk * chunks); string(r.body) != want {
					t.Errorf("upstream read: got %s bytes, want %s", r.body, want)
				}
			}
		})
	}
}

// countingConn counts the writes on a connection to the upstream.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A body the gateway holds in memory (an llm call's, read to count its
// tokens; any body of known length up to holdMax) goes upstream in one
// write with the request headers; a body it streams (larger, or of unknown
// length) is written after a flush of the headers of its own. Counted on
// the transport's connections: one kept-alive connection, one request at a
// time, so each request's writes are its own.
func TestHeldBodyGoesUpstreamInOneWrite(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","object":"chat.completion","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	}))
	var writes atomic.Int64
	dialer := &net.Dialer{}
	tr := newStandardTransport(func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: &writes}, nil
	})
	snap := compileYAML(t, `
routes:
  - {name: llm, match: {path_prefix: /v1/}, upstream: "`+up.URL+`", llm: openai}
  - {name: upload, match: {path_prefix: /upload}, upstream: "`+up.URL+`"}
`)
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{transport: tr})
	const chat = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`
	large := strings.Repeat("x", holdMax+1)
	for _, tt := range []struct {
		name, path string
		body       io.Reader
		// held: exactly one write; streamed: the headers' own, then the
		// body's (several for a large one).
		held   bool
		expect bool // sent with Expect: 100-continue, which is never held
	}{
		{"llm call", "/v1/chat/completions", strings.NewReader(chat), true, false},
		{"small body", "/upload", strings.NewReader(chat), true, false},
		{"body over holdMax", "/upload", strings.NewReader(large), false, false},
		{"body of unknown length", "/upload", io.MultiReader(strings.NewReader(chat)), false, false},
		{"small body with Expect: 100-continue", "/upload", strings.NewReader(chat), false, true},
		{"llm call again", "/v1/chat/completions", strings.NewReader(chat), true, false},
	} {
		before := writes.Load()
		h := http.Header{"Content-Type": {"application/json"}}
		if tt.expect {
			h.Set("Expect", "100-continue")
		}
		r := do(t, gw.Client(), "POST", gw.URL+tt.path, tt.body, h)
		if r.status != http.StatusOK {
			t.Fatalf("%s: status %d (%s)", tt.name, r.status, r.body)
		}
		got := writes.Load() - before
		if tt.held && got != 1 {
			t.Errorf("%s: %d writes to the upstream connection, want 1 (held)", tt.name, got)
		}
		if !tt.held && got < 2 {
			t.Errorf("%s: %d writes to the upstream connection, want 2 or more (streamed)", tt.name, got)
		}
	}
}

// A 103 Early Hints from the upstream reaches the client before the final
// answer, through the gateway's own transport, and the connection is used
// again after it.
func TestEarlyHintsReachTheClient(t *testing.T) {
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "done")
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	snap := compileYAML(t, `
routes:
  - {name: r, match: {path_prefix: /}, upstream: "`+up.URL+`"}
`)
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	for range 2 {
		var hints []string
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				hints = append(hints, fmt.Sprintf("%d %s", code, h.Get("Link")))
				return nil
			},
		})
		req, _ := http.NewRequestWithContext(ctx, "GET", gw.URL+"/page", nil)
		res, err := gw.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(b) != "done" {
			t.Fatalf("%d %q", res.StatusCode, b)
		}
		if len(hints) != 1 || hints[0] != "103 </app.css>; rel=preload" {
			t.Errorf("1xx the client saw: %q, want one 103 with its Link", hints)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d upstream connections for 2 requests, want 1", n)
	}
}

// A proxied response carries the gateway's own Date (net/http's, when it
// writes), not the upstream's; the upstream's other headers pass as sent.
func TestResponseDateIsTheGateways(t *testing.T) {
	const upstreamDate = "Mon, 02 Jan 2006 15:04:05 GMT"
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", upstreamDate)
		w.Header().Set("Server", "origin/1.0")
		io.WriteString(w, "ok")
	}))
	snap := compileYAML(t, `
routes:
  - {name: r, match: {path_prefix: /}, upstream: "`+up.URL+`"}
`)
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	before := time.Now().Add(-time.Second)
	r := do(t, gw.Client(), "GET", gw.URL+"/", nil, nil)
	if r.status != 200 || r.header.Get("Server") != "origin/1.0" {
		t.Fatalf("%d, Server %q", r.status, r.header.Get("Server"))
	}
	got := r.header.Values("Date")
	if len(got) != 1 {
		t.Fatalf("Date %q, want one", got)
	}
	d, err := http.ParseTime(got[0])
	if err != nil || d.Before(before.Truncate(time.Second)) {
		t.Errorf("Date %q (%v): want the gateway's, not the upstream's %q", got[0], err, upstreamDate)
	}
}

// keepingTransport keeps the deadline of the requests it carries, as
// proxy/h1's lean path does by its connections' deadlines: it records the
// deadline each request's context has, and fails a request to /slow as a
// transport whose deadline passed does (context.DeadlineExceeded). (The
// lean transport itself, with the handler: proxy/h1's TestGatewayRouteTimeout.)
type keepingTransport struct {
	next      *http.Transport
	deadlines chan time.Time
}

func (k *keepingTransport) CloseIdleConnections() { k.next.CloseIdleConnections() }

func (k *keepingTransport) KeepsDeadline(*http.Request) bool { return true }

func (k *keepingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	dl, ok := r.Context().Deadline()
	if !ok {
		return nil, errors.New("keepingTransport: the request has no deadline")
	}
	k.deadlines <- dl
	if r.URL.Path == "/slow" {
		return nil, fmt.Errorf("keepingTransport: no answer by %v: %w", dl, context.DeadlineExceeded)
	}
	return k.next.RoundTrip(r)
}

// TestKeptRouteTimeout: on a transport that keeps the deadline itself the
// route timeout is the outbound context's Deadline, and no timer of the
// gateway's is armed; the transport's deadline error is a 504 naming the
// timeout, with the request's rate-limit headers.
func TestKeptRouteTimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	var timers manualTimers
	snap := testSnapshot(t, nil,
		testRoute(t, "slow", "/slow", up.URL, testPolicy(t, "per-ip", "ip", perMinute(10, 10), policies.MissingReject)),
		testRoute(t, "fast", "/fast", up.URL))
	for _, rt := range snap.Routes {
		rt.Timeout = timeout
	}
	tr := &keepingTransport{next: timerTransport(), deadlines: make(chan time.Time, 2)}
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{afterFunc: timers.afterFunc, transport: tr})

	before := time.Now()
	r := do(t, gw.Client(), "GET", gw.URL+"/slow", nil, nil)
	after := time.Now()
	if r.status != 504 {
		t.Fatalf("status: got %d, want 504 (body %s)", r.status, r.body)
	}
	if e := decodeError(t, r); e.Code != 50400 || !strings.Contains(e.Message, "50ms") {
		t.Errorf("error: got %d %q, want 50400 naming the 50ms timeout", e.Code, e.Message)
	}
	if got := r.header.Get("RateLimit"); got != `"per-ip";r=9;t=6` {
		t.Errorf("RateLimit on 504: got %q, want %q", got, `"per-ip";r=9;t=6`)
	}
	if dl := <-tr.deadlines; dl.Before(before.Add(timeout)) || dl.After(after.Add(timeout)) {
		t.Errorf("the outbound deadline is %v, want the route timeout from when the request went out (%v to %v)",
			dl, before.Add(timeout), after.Add(timeout))
	}
	if r := do(t, gw.Client(), "GET", gw.URL+"/fast", nil, nil); r.status != 200 || string(r.body) != "ok" {
		t.Errorf("fast: %d %q, want 200 ok", r.status, r.body)
	}
	<-tr.deadlines
	timers.mu.Lock()
	armed := len(timers.timers)
	timers.mu.Unlock()
	if armed != 0 {
		t.Errorf("%d route timers armed: the transport keeps the deadline", armed)
	}
}

// An upstream that closes connections idle for a moment (Node's default is
// 5 s; here 10 ms), under 64 clients that come in bursts with pauses longer
// than that: each pause leaves the gateway's pool full of connections the
// upstream has closed. Not one request fails: a closed connection is found
// before it is used, or the GET is sent again on a new one.
func TestUpstreamClosingIdleConnectionsUnderLoad(t *testing.T) {
	const (
		clients = 64
		bursts  = 4
		each    = 10
		idle    = 10 * time.Millisecond
	)
	var opened atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	up.Config.IdleTimeout = idle
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	gw, _ := newGateway(t, testSnapshot(t, nil, testRoute(t, "r", "/", up.URL)), newEngine(t, newTestClock()), gatewayOpts{})
	ct := &http.Transport{MaxIdleConnsPerHost: clients}
	t.Cleanup(ct.CloseIdleConnections)
	client := &http.Client{Transport: ct, Timeout: 10 * time.Second}

	var failed atomic.Int64
	for b := range bursts {
		if b > 0 {
			// Time passing is the point: the upstream closes what the
			// gateway's pool holds.
			<-time.After(5 * idle)
		}
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				for i := range each {
					path := fmt.Sprintf("/b%d/c%d/%d", b, c, i)
					res, err := client.Get(gw.URL + path)
					if err != nil {
						t.Error(err)
						failed.Add(1)
						return
					}
					body, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != 200 || string(body) != path {
						failed.Add(1)
						t.Errorf("GET %s: %d %q", path, res.StatusCode, body)
					}
				}
			})
		}
		wg.Wait()
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed", n, clients*bursts*each)
	}
	if n := opened.Load(); n <= clients {
		t.Fatalf("the upstream accepted %d connections: none was closed while idle, the test tested nothing", n)
	}
	t.Logf("%d requests, %d upstream connections opened", clients*bursts*each, opened.Load())
}
