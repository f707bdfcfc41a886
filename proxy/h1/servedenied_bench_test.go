package h1_test

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/servetest"
	"github.com/ratelimit-gateway/gateway/internal/stat"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/metrics"
	"github.com/ratelimit-gateway/gateway/metrics/topk"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy"
	"github.com/ratelimit-gateway/gateway/proxy/h1"
)

// BenchmarkServeDenied is make bench's gateway-deny against bare-429 in
// process: a flood from one address that a token_bucket at 1/min refuses,
// served by net/http's server through the Handler (configured as the
// gateway-deny target is, with metrics and the refusals' top keys, as
// gateway serve builds it), against a bare handler answering a 429 of the
// same size (bench/bareproxy -deny), the anchor. Each has one client
// connection held in memory (loopConn), which sends its next request when
// the last one's response is written, as one of wrk's connections does;
// what is measured is the server's whole path (parsing, the handler, the
// response's header map, writing), without sockets.
//
// "turns" takes turns between the two in blocks within one loop, timed by
// the process's CPU clock, so a busy machine slows both alike, and reports
// deny/bare429 as make bench computes it (the bare one's ns over the
// gateway's: throughput at equal CPU). "bare" and "gateway" run each alone,
// for their exact allocations per request:
//
//	go test -run '^$' -bench BenchmarkServeDenied -benchmem ./proxy/h1/
func BenchmarkServeDenied(b *testing.B) {
	engine, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
	if err != nil {
		b.Fatal(err)
	}
	snap, err := policies.Parse("gateway.yaml", []byte(`routes:
  - name: bench
    match: {path_prefix: /}
    upstream: http://127.0.0.1:1
    policies: [gateway-deny]
policies:
  gateway-deny: {key: ip, algorithm: token_bucket, rate: 1, per: 1m}
`), policies.Options{})
	if err != nil {
		b.Fatal(err)
	}
	holder := &snapshotHolder{}
	holder.p.Store(snap)
	refused, err := topk.New(topk.Config{}, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	gw, err := proxy.New(proxy.Config{Snapshots: holder, Limiter: engine, Transport: servetest.MemoryUpstream{},
		Logger: slog.New(slog.DiscardHandler), Metrics: metrics.New(), Refusals: refused})
	if err != nil {
		b.Fatal(err)
	}
	bare := newLoopServer(b, http.HandlerFunc(bare429))
	gateway := newLoopServer(b, gw)
	lean := newLeanLoopServer(b, gw)
	// The gateway's first request is admitted (forwarded, 200); every
	// later one is refused.
	gateway.send(b, http.StatusOK)
	for _, c := range []*loopConn{bare, gateway, lean} {
		c.send(b, http.StatusTooManyRequests)
	}

	b.Run("turns", func(b *testing.B) {
		base, with := servetest.TakeTurns(b, stat.ProcessClock(), [2]func(){
			func() { bare.send(b, http.StatusTooManyRequests) },
			func() { gateway.send(b, http.StatusTooManyRequests) },
		})
		if base > 0 && with > 0 {
			b.ReportMetric(base, "bare429-cpu-ns/op")
			b.ReportMetric(with, "deny-cpu-ns/op")
			b.ReportMetric(base/with, "deny/bare429")
		}
	})
	// The same with the gateway's default client server, h1.Server.
	b.Run("turns-lean", func(b *testing.B) {
		base, with := servetest.TakeTurns(b, stat.ProcessClock(), [2]func(){
			func() { bare.send(b, http.StatusTooManyRequests) },
			func() { lean.send(b, http.StatusTooManyRequests) },
		})
		if base > 0 && with > 0 {
			b.ReportMetric(base, "bare429-cpu-ns/op")
			b.ReportMetric(with, "deny-cpu-ns/op")
			b.ReportMetric(base/with, "deny/bare429")
		}
	})
	for _, v := range []struct {
		name string
		c    *loopConn
	}{{"bare", bare}, {"gateway", gateway}, {"gateway-lean", lean}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v.c.send(b, http.StatusTooManyRequests)
			}
		})
	}
}

// bare429Body is bench/bareproxy's denial: a 429 body of the size the
// gateway's is.
var bare429Body = []byte(`{"code":42900,"message":"rate limit exceeded for policy \"p\" (1 per 1m, burst 1); retry in 1m0s","policy":"p","retry_after_ms":59993}` + "\n")

// bare429 answers as bench/bareproxy -deny does, deciding nothing.
func bare429(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json; charset=utf-8"}
	h["Retry-After"] = []string{"60"}
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(bare429Body)
}

// newLoopServer serves h with net/http's server (as gateway serve's, its
// timeouts the defaults) on one loopConn, until the benchmark ends.
func newLoopServer(b *testing.B, h http.Handler) *loopConn {
	return serveLoop(b, newStdServer(h))
}

// newLeanLoopServer is newLoopServer with h1.Server in front of net/http's,
// as gateway serve builds it by default (server.client_server: lean).
func newLeanLoopServer(b *testing.B, h http.Handler) *loopConn {
	return serveLoop(b, leanServer(h))
}

// leanServer is h1.Server in front of net/http's, as gateway serve builds it.
func leanServer(h http.Handler) *h1.Server {
	return &h1.Server{Handler: h, Fallback: newStdServer(h)}
}

func newStdServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: policies.DefaultReadHeaderTimeout, IdleTimeout: policies.DefaultIdleTimeout}
}

// loopServer is a server serveLoop runs.
type loopServer interface {
	Serve(net.Listener) error
	Close() error
}

// serveLoop runs srv on one loopConn, which sends GETs of /, until the
// benchmark ends.
func serveLoop(b *testing.B, srv loopServer) *loopConn {
	return serveLoopRequest(b, srv, "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n")
}

// serveLoopRequest is serveLoop with a loopConn that sends req.
func serveLoopRequest(b *testing.B, srv loopServer, req string) *loopConn {
	c := newLoopConn(req)
	ln := &oneConnListener{conn: c, closed: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	b.Cleanup(func() {
		srv.Close()
		<-done
	})
	return c
}

// loopConn is a client connection in memory, in a closed loop: send offers
// the server one request and waits for its response, and the server's
// reads in between block (net/http's background read) until their
// deadline is moved into the past, as on a socket.
type loopConn struct {
	req  []byte
	mu   sync.Mutex
	cond sync.Cond
	// unread is what the server has not read of the request offered.
	unread []byte
	// asked counts the requests offered, answered the responses written;
	// status is the last one's status line.
	asked, answered int
	status          []byte
	expired, closed bool
}

func newLoopConn(req string) *loopConn {
	c := &loopConn{req: []byte(req)}
	c.cond.L = &c.mu
	return c
}

// send offers one request and waits for its response, which must have
// status want.
func (c *loopConn) send(b *testing.B, want int) {
	c.mu.Lock()
	c.unread = c.req
	c.asked++
	c.cond.Broadcast()
	for c.answered < c.asked && !c.closed {
		c.cond.Wait()
	}
	status, closed := c.status, c.closed
	c.mu.Unlock()
	if closed {
		b.Fatal("the server closed the connection")
	}
	if got := statusOf(status); got != want {
		b.Fatalf("status: got %q, want %d", status, want)
	}
}

func statusOf(line []byte) int {
	if len(line) < len("HTTP/1.1 200") {
		return 0
	}
	n := 0
	for _, d := range line[len("HTTP/1.1 "):len("HTTP/1.1 200")] {
		n = n*10 + int(d-'0')
	}
	return n
}

func (c *loopConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.unread) == 0 && !c.expired && !c.closed {
		c.cond.Wait()
	}
	switch {
	case c.closed:
		return 0, io.EOF
	case len(c.unread) == 0:
		return 0, os.ErrDeadlineExceeded
	}
	n := copy(p, c.unread)
	c.unread = c.unread[n:]
	return n, nil
}

// Write takes a response; net/http writes each of these small ones in one
// call.
func (c *loopConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if bytes.HasPrefix(p, []byte("HTTP/1.1 ")) {
		c.status = append(c.status[:0], p[:min(len(p), len("HTTP/1.1 200"))]...)
		c.answered++
		c.cond.Broadcast()
	}
	return len(p), nil
}

func (c *loopConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.cond.Broadcast()
	return nil
}

func (c *loopConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expired = !t.IsZero() && !t.After(time.Now())
	c.cond.Broadcast()
	return nil
}

func (c *loopConn) SetDeadline(t time.Time) error    { return c.SetReadDeadline(t) }
func (c *loopConn) SetWriteDeadline(time.Time) error { return nil }
func (c *loopConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }
func (c *loopConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
}
func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

// oneConnListener accepts its one connection, then waits to be closed.
type oneConnListener struct {
	conn     net.Conn
	once     sync.Once
	closed   chan struct{}
	accepted bool
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if !l.accepted {
		l.accepted = true
		return l.conn, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}
