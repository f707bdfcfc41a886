// Package h1 is the gateway's HTTP/1.1 on both sides: Server reads its
// clients' requests (server.go), Transport talks to plain-HTTP upstreams.
//
// Transport is an http.RoundTripper that does each HTTP/1.1 exchange on the
// calling goroutine, over a pool of kept-alive connections.
//
// Go's http.Transport hands every request to a write goroutine and every
// response back from a read goroutine, and signals the end of each body
// across goroutines too. Measured side by side (make bench), those hand-offs
// cost a bare httputil.ReverseProxy more than all of the gateway's policy
// work. Here the request is written, and the response read, by the goroutine
// that asked. The wire format is net/http's own: writeRequest writes the
// bytes Request.Write would (request.go), readResponse reads a plain answer
// with a Content-Length into the Response http.ReadResponse would make
// (readresponse.go), each a third of net/http's instructions or less, and
// each hands anything else to net/http; fuzz tests hold each to net/http's.
//
// What the lean path does not do goes to a fallback http.Transport: TLS
// (https upstreams, HTTP/2), protocol upgrades, Expect: 100-continue, and
// request bodies that stream or are large. The lean path writes the whole
// request before it reads the answer, which is only safe for a body the
// connection's buffers take whole (up to MaxLeanBody bytes, in memory:
// GetBody): an upstream may answer (413, 401) without reading the body, and
// a larger one would then wait in a write until the timeout while the
// answer sits unread. The fallback reads the answer while it writes.
//
// Both are net/http's types to their users (an http.RoundTripper, a server
// of an http.Handler), and only cmd builds them. What a handler may use
// beyond net/http it finds by small interfaces of its own, never by this
// package's names: a lean exchange keeps its request context's deadline by
// the connection's deadlines (Transport.KeepsDeadline), failing with an
// error that is context.DeadlineExceeded; a lean response takes header
// fields apart from its map (SetFields); a lean request body says whether
// its rest has arrived (Arrived).
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// MaxLeanBody is the largest request body the lean path carries: the
// kernel's buffers on both ends of a connection (about 16 KiB to send and
// 64 KiB or more to receive, by default on Linux) take it whole, so writing
// it cannot wait on an upstream that does not read. Larger bodies, and
// bodies of unknown length, go to the fallback.
const MaxLeanBody = 64 << 10

// Defaults for the zero values in Config.
const (
	defaultMaxIdlePerHost       = 512
	defaultIdleTimeout          = 90 * time.Second
	defaultMaxHeaderBytes       = 1 << 20
	bufferSize                  = 4 << 10
	max1xxResponses             = 5
	noLimit               int64 = -1
)

// errHeaderTooLarge is returned when an upstream's response headers exceed
// Config.MaxResponseHeaderBytes.
var errHeaderTooLarge = errors.New("h1: upstream response headers exceed the limit")

// longAgo is a deadline that has passed whatever the clock says.
var longAgo = time.Unix(1, 0)

// Config is what a Transport is built from.
type Config struct {
	// Fallback carries what the lean path does not (see the package
	// comment); default http.DefaultTransport.
	Fallback http.RoundTripper
	// Dial opens a connection to an upstream; default a net.Dialer's.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxIdlePerHost caps the idle connections kept per upstream address
	// (default 512).
	MaxIdlePerHost int
	// IdleTimeout closes a connection idle for longer (default 90 s).
	IdleTimeout time.Duration
	// MaxResponseHeaderBytes caps an upstream's response headers (default
	// 1 MiB).
	MaxResponseHeaderBytes int64
	// Now is the clock the idle timeout is measured with (default
	// time.Now).
	Now func() time.Time
	// Retries, when set, is the budget a request sent again (see
	// RoundTrip) draws on; nil: no bound.
	Retries RetryBudget
}

// RetryBudget bounds the retries in flight. TryRetry takes one, and reports
// whether there was one; RetryDone gives it back. Both must be safe for
// concurrent use.
type RetryBudget interface {
	TryRetry() bool
	RetryDone()
}

// Transport is an http.RoundTripper for HTTP/1.1 upstreams. It is safe for
// concurrent use; build one per process and share it, so that its pool is.
type Transport struct {
	fallback       http.RoundTripper
	dial           func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdlePerHost int
	idleTimeout    time.Duration
	maxHeaderBytes int64
	now            func() time.Time
	budget         RetryBudget

	dials, reused, stale, retries, handedOver atomic.Int64

	mu   sync.Mutex
	idle map[string][]*conn // per address, oldest first
	// pruner closes connections idle too long when nothing else uses the
	// pool; armed while any connection is idle, nil otherwise.
	pruner *time.Timer
}

// New returns a Transport for cfg.
func New(cfg Config) *Transport {
	t := &Transport{
		fallback:       cfg.Fallback,
		dial:           cfg.Dial,
		maxIdlePerHost: cfg.MaxIdlePerHost,
		idleTimeout:    cfg.IdleTimeout,
		maxHeaderBytes: cfg.MaxResponseHeaderBytes,
		now:            cfg.Now,
		budget:         cfg.Retries,
		idle:           make(map[string][]*conn),
	}
	if t.maxIdlePerHost <= 0 {
		t.maxIdlePerHost = defaultMaxIdlePerHost
	}
	if t.idleTimeout <= 0 {
		t.idleTimeout = defaultIdleTimeout
	}
	if t.maxHeaderBytes <= 0 {
		t.maxHeaderBytes = defaultMaxHeaderBytes
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.fallback == nil {
		t.fallback = http.DefaultTransport
	}
	if t.dial == nil {
		t.dial = new(net.Dialer).DialContext
	}
	return t
}

// KeepsDeadline reports whether RoundTrip carries req itself, rather than
// handing it to the fallback: then the deadline of req's context bounds the
// write of the request and the wait for the response headers through the
// connection's own deadlines (no timer, no goroutine), and the body flows
// without it unless the context's Done ends it. A caller whose context's
// Done would close only by a timer at that deadline need not arm one.
func (t *Transport) KeepsDeadline(req *http.Request) bool { return lean(req) }

// lean reports whether RoundTrip carries req itself.
func lean(req *http.Request) bool {
	if req.URL.Scheme != "http" || !leanExchange(req.Method, req.Header) {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return false // a streamed upload
		}
		if req.ContentLength < 0 || req.ContentLength > MaxLeanBody {
			return false // the answer may come before the body is taken
		}
	}
	return true
}

// leanExchange reports whether a plain-HTTP request of method and header
// is one the lean path may carry, its body aside: not a CONNECT, a protocol
// upgrade or an Expect: 100-continue.
func leanExchange(method string, header http.Header) bool {
	if method == http.MethodConnect {
		return false
	}
	_, upgrade := header["Upgrade"]
	_, expect := header["Expect"]
	return !upgrade && !expect
}

// RoundTrip sends req and returns the response whose headers arrived. The
// connection goes back to the pool when the body has been read to its end;
// closing the body before then closes the connection.
//
// A request sent on a reused connection that the upstream closed before any
// of the answer arrived is sent again, once, on a new one, when sending it
// twice is harmless: an idempotent method or an Idempotency-Key, and a body
// that can be read again, and when the retry budget (Config.Retries) has
// one. A retry whose dial fails does not return the dial's error as such:
// the request may have reached the upstream the first time. Of the client trace, writeRequest calls the
// Wrote* hooks (WroteRequest once the request is in the connection's
// buffer, flushed just after) and RoundTrip calls Got1xxResponse.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !lean(req) {
		t.handedOver.Add(1)
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	addr := hostPort(req.URL.Host)
	trace := httptrace.ContextClientTrace(ctx)
	for retried := false; ; retried = true {
		// The retry dials: another idle connection may be closing as this
		// one was (an upstream's idle timeout fires for many at once).
		c, reused, err := t.get(ctx, addr, !retried)
		if err != nil && retried {
			if t.budget != nil {
				t.budget.RetryDone()
			}
			return nil, fmt.Errorf("h1: %s %s: the kept-alive connection closed before answering, then the new one: dial: %v", req.Method, addr, err)
		}
		if err != nil {
			return nil, fmt.Errorf("h1: dial %s: %w", addr, err)
		}
		res, err := c.roundTrip(req, trace)
		if retried && t.budget != nil {
			t.budget.RetryDone()
		}
		if err == nil {
			return res, nil
		}
		if retried || !reused || c.answered || ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || !replayable(req) {
			return nil, err
		}
		if t.budget != nil && !t.budget.TryRetry() {
			return nil, err
		}
		if req, err = rewound(req); err != nil {
			if t.budget != nil {
				t.budget.RetryDone()
			}
			return nil, err
		}
		t.retries.Add(1)
	}
}

// Stats is what a Transport has done since it was built, and its pool now.
type Stats struct {
	Dials    int64 // connections opened by the lean path
	Reused   int64 // exchanges on a kept-alive connection
	Stale    int64 // idle connections found closed, or out of step, before use
	Retries  int64 // requests sent a second time (see RoundTrip)
	Fallback int64 // requests handed to the fallback
	Idle     int   // connections idle now
}

// Stats reads the counters and counts the idle connections.
func (t *Transport) Stats() Stats {
	t.mu.Lock()
	idle := 0
	for _, l := range t.idle {
		idle += len(l)
	}
	t.mu.Unlock()
	return Stats{
		Dials:    t.dials.Load(),
		Reused:   t.reused.Load(),
		Stale:    t.stale.Load(),
		Retries:  t.retries.Load(),
		Fallback: t.handedOver.Load(),
		Idle:     idle,
	}
}

// replayable reports whether sending req twice is harmless.
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// rewound is req with its body from the start again.
func rewound(req *http.Request) (*http.Request, error) {
	if req.GetBody == nil || req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("h1: reading the body again for a retry: %w", err)
	}
	r := new(http.Request)
	*r = *req
	r.Body = body
	return r, nil
}

// hostPort is a URL host with its port, as dialed and as the pool's key.
func hostPort(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	return net.JoinHostPort(host, "80")
}

// get takes the newest idle connection to addr that is still open (when
// reuse), or dials one; reused says which.
func (t *Transport) get(ctx context.Context, addr string, reuse bool) (c *conn, reused bool, err error) {
	for reuse {
		c = t.takeIdle(addr)
		if c == nil {
			break
		}
		if c.alive() {
			t.reused.Add(1)
			return c, true, nil
		}
		t.stale.Add(1)
		c.nc.Close()
	}
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	t.dials.Add(1)
	return newConn(t, addr, nc), false, nil
}

// takeIdle pops the newest idle connection to addr; connections idle past
// the timeout are closed on the way (the newest is, all older ones are).
func (t *Transport) takeIdle(addr string) *conn {
	now := t.now()
	t.mu.Lock()
	list := t.idle[addr]
	n := len(list)
	if n == 0 {
		t.mu.Unlock()
		return nil
	}
	c := list[n-1]
	list[n-1] = nil
	if now.Sub(c.idleAt) <= t.idleTimeout {
		t.idle[addr] = list[:n-1]
		t.mu.Unlock()
		return c
	}
	delete(t.idle, addr)
	t.mu.Unlock()
	c.nc.Close()
	for _, old := range list[:n-1] {
		old.nc.Close()
	}
	return nil
}

// put keeps c for the next request to its address, or closes it when the
// pool for that address is full.
func (t *Transport) put(c *conn) {
	c.idleAt = t.now()
	t.mu.Lock()
	list := t.idle[c.addr]
	if len(list) >= t.maxIdlePerHost {
		t.mu.Unlock()
		c.nc.Close()
		return
	}
	t.idle[c.addr] = append(list, c)
	if t.pruner == nil {
		t.pruner = time.AfterFunc(t.idleTimeout, t.prune)
	}
	t.mu.Unlock()
}

// prune closes every connection idle past the timeout, and comes back when
// the oldest one left will be, while any connection is idle.
func (t *Transport) prune() {
	now := t.now()
	var expired []*conn
	var oldest time.Time
	t.mu.Lock()
	for addr, list := range t.idle {
		i := 0
		for i < len(list) && now.Sub(list[i].idleAt) > t.idleTimeout {
			i++
		}
		expired = append(expired, list[:i]...)
		if i == len(list) {
			delete(t.idle, addr)
			continue
		}
		if i > 0 {
			t.idle[addr] = append(list[:0], list[i:]...)
			clear(list[len(list)-i:])
		}
		if at := t.idle[addr][0].idleAt; oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	t.pruner = nil
	if !oldest.IsZero() {
		t.pruner = time.AfterFunc(oldest.Add(t.idleTimeout).Sub(now)+time.Millisecond, t.prune)
	}
	t.mu.Unlock()
	for _, c := range expired {
		c.nc.Close()
	}
}

// CloseIdleConnections closes every idle connection, the lean path's and the
// fallback's.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = make(map[string][]*conn)
	if t.pruner != nil {
		t.pruner.Stop()
		t.pruner = nil
	}
	t.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.nc.Close()
		}
	}
	if ci, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// conn is one connection to an upstream, used by one request at a time.
type conn struct {
	t    *Transport
	addr string
	nc   net.Conn
	lr   limitedReader
	br   *bufio.Reader
	bw   *bufio.Writer
	// abort ends any read or write in progress; it is built once, so that
	// watching a request's context allocates no closure. hookOn is the lean
	// server connection whose request the exchange watches, if it does so
	// through its slot (cancelWith); unhook, built once too, gives it back.
	abort  func()
	hookOn *serverConn
	unhook func() bool
	peek   peeker
	// answered is whether any byte of the current response arrived.
	answered bool
	idleAt   time.Time
}

func newConn(t *Transport, addr string, nc net.Conn) *conn {
	c := &conn{t: t, addr: addr, nc: nc}
	c.lr = limitedReader{r: nc, n: noLimit}
	c.br = bufio.NewReaderSize(&c.lr, bufferSize)
	c.bw = bufio.NewWriterSize(nc, bufferSize)
	c.abort = func() { nc.SetDeadline(longAgo) }
	c.unhook = func() bool { return c.hookOn.offCancel() }
	c.peek.init(nc)
	return c
}

// roundTrip writes req and reads its response's headers. On error the
// connection is closed.
func (c *conn) roundTrip(req *http.Request, trace *httptrace.ClientTrace) (*http.Response, error) {
	ctx := req.Context()
	stop := c.cancelWith(ctx)
	c.answered = false
	// The context's deadline bounds the write and the wait for the
	// response headers, by the connection's own deadlines.
	deadline, timed := ctx.Deadline()
	fail := func(err error) (*http.Response, error) {
		stop()
		c.nc.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("h1: %w (%v)", cerr, err)
		}
		// Request.Write hides a deadline error of the body's write in a
		// type of its own: the clock says whether the deadline passed.
		if timed && (errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(deadline)) {
			return nil, fmt.Errorf("h1: %s %s: no answer by the request's deadline: %w", req.Method, c.addr, context.DeadlineExceeded)
		}
		return nil, fmt.Errorf("h1: %s %s: %w", req.Method, c.addr, err)
	}
	if timed {
		c.setDeadline(ctx, true, true, deadline)
	}
	werr := writeRequest(c.bw, req)
	if werr == nil {
		werr = c.bw.Flush()
	}
	// On a failed write the upstream may have answered and stopped reading
	// (a 413 that closes): its answer, when it is there, is what the client
	// gets, and the connection is not used again (see keep below). The wait
	// for it keeps the deadline the write had.
	if werr != nil && (ctx.Err() != nil || timed && !time.Now().Before(deadline)) {
		return fail(werr)
	}
	var res *http.Response
	for n1xx := 0; ; n1xx++ {
		c.lr.n, c.lr.read = c.t.maxHeaderBytes, 0
		var err error
		res, err = readResponse(c.br, req)
		c.answered = c.answered || c.lr.read > 0 || c.br.Buffered() > 0
		c.lr.n = noLimit
		if err != nil && werr != nil {
			return fail(werr)
		}
		if err != nil {
			return fail(err)
		}
		if res.StatusCode >= 200 || res.StatusCode < 100 {
			break
		}
		if res.StatusCode == http.StatusSwitchingProtocols {
			return fail(errors.New("101 Switching Protocols to a request that asked for no upgrade"))
		}
		if n1xx == max1xxResponses {
			return fail(errors.New("too many 1xx responses"))
		}
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(res.StatusCode, textproto.MIMEHeader(res.Header)); err != nil {
				return fail(err)
			}
		}
	}
	if timed {
		c.setDeadline(ctx, true, true, time.Time{}) // the body flows without a limit
	}
	keep := !res.Close && !req.Close && werr == nil
	if res.Body == http.NoBody {
		c.release(stop, keep)
		return res, nil
	}
	res.Body = &body{ctx: ctx, rc: res.Body, c: c, stop: stop, keep: keep}
	return res, nil
}

// setDeadline sets one of the connection's deadlines unless the request's
// context has ended: its abort may have run just before and set the deadline
// this would move, and must win.
func (c *conn) setDeadline(ctx context.Context, read, write bool, t time.Time) {
	switch {
	case read && write:
		c.nc.SetDeadline(t)
	case read:
		c.nc.SetReadDeadline(t)
	default:
		c.nc.SetWriteDeadline(t)
	}
	if ctx.Err() != nil {
		c.abort()
	}
}

// release ends an exchange: the connection goes back to the pool when keep
// and nothing cut the exchange short, else it is closed.
func (c *conn) release(stop func() bool, keep bool) {
	if !stop() {
		keep = false // the context ended: abort ran or is running
	}
	if keep && c.br.Buffered() == 0 {
		c.t.put(c)
		return
	}
	c.nc.Close()
}

// alive reports whether an idle connection can carry a request: the upstream
// has not closed it and sent nothing unasked.
func (c *conn) alive() bool {
	return c.br.Buffered() == 0 && c.peek.idle()
}

// limitedReader counts what is read from the connection and, while response
// headers are read, caps it.
type limitedReader struct {
	r    io.Reader
	n    int64 // bytes left before the cap; noLimit while reading a body
	read int64 // bytes read since the cap was set
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n == noLimit {
		return l.r.Read(p)
	}
	if l.n <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	l.read += int64(n)
	return n, err
}

// body is a response body; at its end the connection goes back to the pool.
type body struct {
	ctx  context.Context
	rc   io.ReadCloser
	c    *conn
	stop func() bool
	keep bool
	eof  bool // read to its end; only the reader touches it
	done atomic.Bool
}

func (b *body) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.done.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.rc.Read(p)
	if err != nil {
		b.eof = err == io.EOF
		b.finish(b.eof)
		if cerr := b.ctx.Err(); !b.eof && cerr != nil {
			// The read failed because the request was cancelled (the
			// deadline abort set): say so, as http.Transport does, so
			// that a client hanging up is not logged as an upstream
			// failure.
			err = cerr
		}
	}
	return n, err
}

// Close before the end closes the connection: what is left of the body
// would have to be read first.
func (b *body) Close() error {
	b.finish(false)
	return nil
}

func (b *body) finish(whole bool) {
	if !b.done.CompareAndSwap(false, true) {
		return
	}
	b.c.release(b.stop, whole && b.keep)
}
