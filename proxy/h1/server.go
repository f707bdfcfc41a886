package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Server serves the gateway's clients: each plain HTTP/1.1 request on its
// connection's own goroutine, with the connection's read and write buffers
// and nothing else. What it does not serve, it hands to Fallback, a
// net/http server, connection and all, before reading any of it: so every
// request net/http would refuse is refused by net/http, in its words.
//
// net/http's server starts a goroutine for every request that reads the
// client's connection while the handler runs (to cancel the request's
// context if the client goes), and stops it at the end through a deadline
// and a condition variable: two or three goroutine hand-offs a request, on
// top of the reading and the writing. On a small machine those hand-offs are
// most of what a refused request costs, and the wake-ups they take are where
// a request at a steady rate meets a busy CPU (docs/performance.md). Here a
// request that has not finished after WatchAfter starts that watch; a request
// answered sooner never pays for it.
//
// Served here: HTTP/1.1 requests whose head fits the read buffer (4 KiB) and
// MaxHeaderBytes, with a request target that is a path, no
// Transfer-Encoding, no Upgrade, no Expect, a Connection header of at most
// keep-alive or close, one valid Host, and a body of declared length up to
// MaxLeanBody. The rest — HTTP/1.0, chunked and large uploads, WebSockets,
// 100-continue, TLS, HTTP/2 prior knowledge, malformed requests — go to
// Fallback, as does every later request on a connection handed over.
//
// The response is written as net/http writes it: its header snapshot at
// WriteHeader, Content-Length for a body written whole, chunked otherwise,
// Content-Type sniffed when none is set, Date, trailers, HEAD and bodiless
// statuses, Connection: close when the client or handler asks or the
// server is shutting down. Fallback's ReadHeaderTimeout, ReadTimeout,
// WriteTimeout, IdleTimeout, MaxHeaderBytes and ErrorLog apply here too.
type Server struct {
	// Handler serves every request, lean or handed over (Fallback.Handler
	// is the one net/http calls; Serve sets it to Handler when nil).
	Handler http.Handler
	// Fallback serves what the lean path does not; required.
	Fallback *http.Server
	// WatchAfter is how long a request runs before its client's connection
	// is watched for going away (default 50 ms: longer than a Redis
	// decision may take, so that only a request waiting on its upstream
	// pays for the watch).
	WatchAfter time.Duration

	// hook, set by tests, hears the watch's steps: "deferred" (due before
	// the body's end), "started", "byte" (a pipelined request's first
	// byte read), "gone".
	hook func(step string)
	// now is the clock of a new connection's age (tests set it; default
	// time.Now).
	now func() time.Time

	inShutdown atomic.Bool
	served     atomic.Int64
	handedOver atomic.Int64

	mu      sync.Mutex
	ln      net.Listener
	handoff *handoffListener
	conns   map[*serverConn]struct{}
}

// ServerStats counts requests served on the lean path and connections
// handed to the fallback.
type ServerStats struct {
	Served, HandedOver int64
}

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	return ServerStats{Served: s.served.Load(), HandedOver: s.handedOver.Load()}
}

const (
	defaultWatchAfter = 50 * time.Millisecond
	serverBufferSize  = 4 << 10
	// drainTimeout bounds the read of what a handler left of a request
	// body (at most MaxLeanBody), which keeps the connection for the next
	// request, as net/http does.
	drainTimeout = time.Second
)

// Serve accepts connections on ln until Shutdown or Close, and runs
// Fallback on the connections it hands over. It returns
// http.ErrServerClosed after Shutdown or Close.
func (s *Server) Serve(ln net.Listener) error {
	if s.Fallback == nil {
		return errors.New("h1: Server.Fallback is required")
	}
	if s.Fallback.Handler == nil {
		s.Fallback.Handler = s.Handler
	}
	s.mu.Lock()
	if s.inShutdown.Load() || s.ln != nil {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.ln = ln
	s.handoff = newHandoffListener(ln.Addr())
	s.conns = make(map[*serverConn]struct{})
	s.mu.Unlock()

	fallbackDone := make(chan struct{})
	go func() {
		defer close(fallbackDone)
		s.Fallback.Serve(s.handoff) // returns once handoff is closed
	}()
	err := s.accept(ln)
	s.handoff.Close()
	<-fallbackDone
	return err
}

func (s *Server) accept(ln net.Listener) error {
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.inShutdown.Load() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// As net/http: a failed accept (out of file descriptors, say)
			// is retried after a pause that grows to a second.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.logf("http: Accept error: %v; retrying in %v", err, delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		c := s.newConn(nc)
		if !s.track(c, true) {
			nc.Close()
			continue
		}
		go c.serve()
	}
}

// track adds c to (or removes it from) the server's connections; it
// refuses a new one once the server shuts down.
func (s *Server) track(c *serverConn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		return true
	}
	if s.inShutdown.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// Shutdown stops accepting, closes the lean connections as they become idle
// (a request in progress finishes, answered with Connection: close), shuts
// Fallback down, and returns when both are done or ctx is.
func (s *Server) Shutdown(ctx context.Context) error {
	s.inShutdown.Store(true)
	s.mu.Lock()
	if s.ln != nil {
		s.ln.Close()
	}
	s.mu.Unlock()
	fallback := make(chan error, 1)
	go func() { fallback <- s.Fallback.Shutdown(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !s.closeIdle() {
		select {
		case <-ctx.Done():
			<-fallback
			return ctx.Err()
		case <-tick.C:
		}
	}
	return <-fallback
}

// Close closes the listener, every lean connection and Fallback at once.
func (s *Server) Close() error {
	s.inShutdown.Store(true)
	s.mu.Lock()
	if s.ln != nil {
		s.ln.Close()
	}
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	return s.Fallback.Close()
}

// closeIdle closes the lean connections waiting for a request, and those
// that have not sent their first one in 5 s (net/http's rule for new
// connections), and reports whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.idle.Load() || c.fresh.Load() && s.clock().Sub(c.born) > 5*time.Second {
			c.nc.Close()
		}
	}
	return len(s.conns) == 0
}

func (s *Server) logf(format string, args ...any) {
	if l := s.Fallback.ErrorLog; l != nil {
		l.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

func (s *Server) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

func (s *Server) note(step string) {
	if s.hook != nil {
		s.hook(step)
	}
}

func (s *Server) watchAfter() time.Duration {
	if s.WatchAfter > 0 {
		return s.WatchAfter
	}
	return defaultWatchAfter
}

// handoffListener is the listener Fallback serves: the connections the
// lean path hands over.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// push gives c to Fallback; false once the listener is closed.
func (l *handoffListener) push(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// replayConn is a handed-over connection: what the lean path buffered of
// it, then the rest.
type replayConn struct {
	net.Conn
	buffered []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.buffered) > 0 {
		n := copy(p, c.buffered)
		c.buffered = c.buffered[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite lets net/http half-close the connection after an error
// answer, as it does on its own connections.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// serverConn is one client connection on the lean path.
type serverConn struct {
	s      *Server
	nc     net.Conn
	ctx    context.Context
	remote string
	r      connReader
	br     *bufio.Reader
	bw     *bufio.Writer
	w      connWriter
	// head parses a request head from a copy of its bytes (headReaders'
	// buffer), so that a head the lean path does not take is still whole
	// in br for Fallback.
	head bytes.Reader
	// idle is set while the connection waits for a later request's first
	// bytes; fresh until its first request's head is read (born then
	// tells its age).
	idle  atomic.Bool
	fresh atomic.Bool
	born  time.Time
	// fields and hdr are reused by each response's header block, extra
	// and line by its framing fields and status line (on the stack they
	// would escape through bufio.Writer.Write); cw is what its 2 KiB body
	// buffer (bodyBuffers', for the request's time) writes to.
	fields []field
	hdr    []byte
	// set and setValues hold the fields SetFields set on an answer;
	// setNames are names it checked on this connection already.
	set       []setField
	setValues []byte
	setNames  []string
	extra     [160]byte
	line      [64]byte
	cw        chunkWriter

	// The watch of the client's connection while a request runs.
	mu     sync.Mutex
	cond   sync.Cond
	timer  *time.Timer
	cancel context.CancelFunc
	// reqDone is the running request's context's Done, and hook what an
	// exchange of the lean transport runs when it ends (cancelhook.go).
	reqDone   <-chan struct{}
	hook      func()
	body      *requestBody // the running request's, nil when none
	running   bool         // a request is being served
	wantWatch bool         // the watch is due, waiting for the body's end
	watching  bool
	aborted   bool
}

func (s *Server) newConn(nc net.Conn) *serverConn {
	c := &serverConn{s: s, nc: nc, remote: nc.RemoteAddr().String(), born: s.clock()}
	c.fresh.Store(true)
	c.r.nc = nc
	c.br = bufio.NewReaderSize(&c.r, serverBufferSize)
	c.w.c = c
	c.bw = bufio.NewWriterSize(&c.w, serverBufferSize)
	c.cond.L = &c.mu
	ctx := context.WithValue(context.Background(), http.ServerContextKey, s.Fallback)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, nc.LocalAddr())
	c.ctx = context.WithValue(ctx, serverConnKey{}, c)
	c.timer = time.AfterFunc(time.Hour, c.watchDue)
	c.timer.Stop()
	return c
}

// connReader reads the connection, first giving back a byte that a watch
// read (the start of a pipelined request).
type connReader struct {
	nc      net.Conn
	b       byte
	hasByte bool
}

func (r *connReader) Read(p []byte) (int, error) {
	if r.hasByte && len(p) > 0 {
		p[0] = r.b
		r.hasByte = false
		return 1, nil
	}
	return r.nc.Read(p)
}

// connWriter writes the connection; a failed write cancels the running
// request, as it does in net/http.
type connWriter struct{ c *serverConn }

func (w *connWriter) Write(p []byte) (int, error) {
	n, err := w.c.nc.Write(p)
	if err != nil {
		w.c.mu.Lock()
		w.c.cancelLocked()
		w.c.mu.Unlock()
	}
	return n, err
}

// What a request needs only while it is read or answered is pooled, so
// that an idle connection holds its two 4 KiB buffers alone, as under
// net/http.
var (
	headReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, serverBufferSize) }}
	bodyBuffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, bufferBeforeChunking) }}
)

// errHandOver means the lean path does not take the request ahead.
var errHandOver = errors.New("h1: handed over")

func (c *serverConn) serve() {
	defer c.s.track(c, false)
	afterPost := false
	for first := true; ; first = false {
		req, err := c.readRequest(first, afterPost)
		if err == errHandOver {
			c.handOver()
			return
		}
		if err != nil {
			c.nc.Close()
			return
		}
		afterPost = req.Method == http.MethodPost
		if !c.serveRequest(req) {
			c.nc.Close()
			return
		}
	}
}

// handOver gives the connection, with what br holds of it, to Fallback.
func (c *serverConn) handOver() {
	c.nc.SetDeadline(time.Time{})
	buffered, _ := c.br.Peek(c.br.Buffered())
	rc := &replayConn{Conn: c.nc, buffered: bytes.Clone(buffered)}
	c.s.handedOver.Add(1)
	if !c.s.handoff.push(rc) {
		c.nc.Close()
	}
}

// readRequest reads a request's head, as net/http's server does: the
// first from the connection's start under the head's timeout; a later one
// once 4 bytes of it came within the idle timeout (fewer, and the
// connection ends quietly); after a POST, up to 4 stray line ends skipped.
// errHandOver when the request is one for Fallback (nothing of it
// consumed).
func (c *serverConn) readRequest(first, afterPost bool) (*http.Request, error) {
	srv := c.s.Fallback
	// deadline: a read deadline is set on the connection.
	deadline := false
	if !first {
		idle := srv.IdleTimeout
		if idle == 0 {
			idle = srv.ReadTimeout
		}
		if idle > 0 {
			c.nc.SetReadDeadline(time.Now().Add(idle))
			deadline = true
		} else {
			c.nc.SetReadDeadline(time.Time{})
		}
		c.idle.Store(true)
		if c.s.inShutdown.Load() {
			return nil, http.ErrServerClosed
		}
		_, err := c.br.Peek(4)
		c.idle.Store(false)
		if err != nil {
			return nil, err
		}
	}
	if afterPost {
		peek, _ := c.br.Peek(4)
		n := 0
		for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
			n++
		}
		c.br.Discard(n)
	}
	// A head still coming in is bounded by the head's timeout; one that
	// came whole (in one packet, as most do) has no read left to bound.
	var start time.Time
	if buf, _ := c.br.Peek(c.br.Buffered()); headEnd(buf) == 0 {
		start = time.Now()
		headTimeout := srv.ReadHeaderTimeout
		if headTimeout == 0 {
			headTimeout = srv.ReadTimeout
		}
		if headTimeout > 0 {
			c.nc.SetReadDeadline(start.Add(headTimeout))
			deadline = true
		} else if deadline {
			c.nc.SetReadDeadline(time.Time{})
			deadline = false
		}
	}
	head, err := c.readHead()
	c.fresh.Store(false)
	if err != nil {
		return nil, err
	}
	req := parseRequest(head)
	if req == nil {
		if req = c.readRequestHead(head); req == nil {
			return nil, errHandOver
		}
	}
	c.br.Discard(len(head))
	// The body is read under read_timeout, or none. Without a body no
	// read is left (a watch clears the deadline before it reads), so the
	// idle or head deadline may stay until the next request's.
	if d := srv.ReadTimeout; d > 0 {
		if start.IsZero() {
			start = time.Now()
		}
		c.nc.SetReadDeadline(start.Add(d))
	} else if deadline && req.ContentLength > 0 {
		c.nc.SetReadDeadline(time.Time{})
	}
	if d := srv.WriteTimeout; d > 0 {
		c.nc.SetWriteDeadline(time.Now().Add(d))
	}
	return req, nil
}

// readHead returns the request head buffered in br, through its empty
// line; errHandOver when it starts with an empty line (net/http skips
// those) or does not fit the buffer or MaxHeaderBytes.
func (c *serverConn) readHead() ([]byte, error) {
	limit := c.br.Size()
	if m := c.s.Fallback.MaxHeaderBytes; m > 0 && m < limit {
		limit = m
	}
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		if len(buf) > 0 && (buf[0] == '\r' || buf[0] == '\n') {
			return nil, errHandOver
		}
		if n := headEnd(buf); n > 0 {
			if n > limit {
				return nil, errHandOver
			}
			return buf[:n], nil
		}
		if len(buf) >= limit {
			return nil, errHandOver
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			// A head cut short by the client's end, or broken, gets
			// net/http's answer; one that timed out, or that never
			// began, is closed, as there.
			if ne, ok := err.(net.Error); len(buf) == 0 || ok && ne.Timeout() {
				return nil, err
			}
			return nil, errHandOver
		}
	}
}

// readRequestHead reads a head parseRequest does not, with
// http.ReadRequest; nil when the lean path does not serve the request.
func (c *serverConn) readRequestHead(head []byte) *http.Request {
	c.head.Reset(head)
	hr := headReaders.Get().(*bufio.Reader)
	hr.Reset(&c.head)
	req, err := http.ReadRequest(hr)
	hr.Reset(nil)
	headReaders.Put(hr)
	if err != nil || !leanRequest(req, head) {
		return nil
	}
	return req
}

// headEnd returns the length of the head in buf through its empty line
// (a line end, then CRLF or LF), or 0 if buf does not hold one yet.
func headEnd(buf []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return 0
		}
		i += j + 1
		switch {
		case i < len(buf) && buf[i] == '\n':
			return i + 1
		case i+1 < len(buf) && buf[i] == '\r' && buf[i+1] == '\n':
			return i + 2
		}
	}
}

// leanRequest reports whether the lean path serves req, parsed from head:
// what net/http's server would accept and serve the same way here.
func leanRequest(req *http.Request, head []byte) bool {
	if req.ProtoMajor != 1 || req.ProtoMinor != 1 || len(req.RequestURI) == 0 || req.RequestURI[0] != '/' {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
	default:
		return false
	}
	if len(req.TransferEncoding) > 0 || req.ContentLength < 0 || req.ContentLength > MaxLeanBody {
		return false
	}
	h := req.Header
	if _, ok := h["Upgrade"]; ok {
		return false
	}
	if _, ok := h["Expect"]; ok {
		return false
	}
	if v, ok := h["Connection"]; ok {
		if len(v) != 1 || !(strings.EqualFold(v[0], "keep-alive") || strings.EqualFold(v[0], "close")) {
			return false
		}
	}
	if hostLines(head) != 1 || !httpguts.ValidHostHeader(req.Host) {
		return false
	}
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}

// hostLines counts the Host fields in a request head (http.ReadRequest
// keeps only one, and net/http refuses a request with two).
func hostLines(head []byte) int {
	n := 0
	for i := bytes.IndexByte(head, '\n'); i >= 0 && i+1 < len(head); {
		line := head[i+1:]
		if len(line) >= 5 && (line[0]|0x20) == 'h' && (line[1]|0x20) == 'o' && (line[2]|0x20) == 's' && (line[3]|0x20) == 't' && line[4] == ':' {
			n++
		}
		j := bytes.IndexByte(line, '\n')
		if j < 0 {
			break
		}
		i += j + 1
	}
	return n
}

// serveRequest runs the handler on req and finishes its response; false
// when the connection is to be closed.
func (c *serverConn) serveRequest(req *http.Request) (keep bool) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer c.endRequest(cancel)
	req = req.WithContext(ctx)
	req.RemoteAddr = c.remote
	var body *requestBody
	if req.ContentLength > 0 {
		body = &requestBody{c: c, remain: req.ContentLength}
		req.Body = body
	} else {
		req.Body = http.NoBody
	}
	buf := bodyBuffers.Get().(*bufio.Writer)
	buf.Reset(&c.cw)
	defer func() {
		buf.Reset(nil)
		bodyBuffers.Put(buf)
	}()
	w := &response{c: c, req: req, body: body, header: make(http.Header), w: buf, contentLength: -1, closeAfter: req.Close}
	c.cw.w = w

	c.mu.Lock()
	c.cancel, c.body, c.running, c.reqDone = cancel, body, true, ctx.Done()
	c.wantWatch = false
	c.mu.Unlock()
	c.timer.Reset(c.s.watchAfter())

	finished := false
	defer func() {
		if finished {
			return
		}
		c.endWatch()
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.s.logf("http: panic serving %v: %v\n%s", c.remote, v, buf)
		}
		w.done = true
		keep = false
	}()
	c.s.Handler.ServeHTTP(w, req)
	finished = true
	c.endWatch()
	c.s.served.Add(1)
	// A client that ended its side during the watch still gets the
	// answer (it may have only half-closed), and the requests it sent
	// before, that br holds; the next read then ends the connection.
	if !w.finish() {
		return false
	}
	if body != nil && !body.drain() {
		return false // a full-duplex handler left it unread
	}
	if d := c.s.Fallback.WriteTimeout; d > 0 {
		c.nc.SetWriteDeadline(time.Time{})
	}
	return true
}

// watchDue runs when a request has gone on for WatchAfter: it starts the
// watch of the client's connection, or asks the body to when it ends.
func (c *serverConn) watchDue() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running || c.watching {
		return
	}
	if c.body != nil && !c.body.end.Load() {
		c.wantWatch = true
		c.s.note("deferred")
		return
	}
	c.startWatchLocked()
}

func (c *serverConn) startWatchLocked() {
	c.watching, c.aborted, c.wantWatch = true, false, false
	// The request's read deadline (read_timeout) is for its head and body:
	// a watch that outlasts it is not a client that went away.
	c.nc.SetReadDeadline(time.Time{})
	c.s.note("started")
	go c.watch()
}

// watch reads the client's connection while the handler runs: an end or
// error cancels the request; a byte is the next request, kept for it.
func (c *serverConn) watch() {
	var b [1]byte
	n, err := c.nc.Read(b[:])
	c.mu.Lock()
	if n == 1 {
		c.r.b, c.r.hasByte = b[0], true
		c.s.note("byte")
	}
	if err != nil && !c.aborted {
		c.cancelLocked()
		c.s.note("gone")
	}
	c.watching = false
	c.mu.Unlock()
	c.cond.Broadcast()
}

// endWatch ends the request's watch.
func (c *serverConn) endWatch() {
	c.timer.Stop()
	c.mu.Lock()
	c.running, c.wantWatch = false, false
	if c.watching {
		c.aborted = true
		c.nc.SetReadDeadline(longAgo)
		for c.watching {
			c.cond.Wait()
		}
		c.nc.SetReadDeadline(time.Time{})
	}
	c.cancel, c.body = nil, nil
	c.mu.Unlock()
}

// requestBody is a lean request's body: ContentLength bytes from br.
type requestBody struct {
	c      *serverConn
	mu     sync.Mutex
	remain int64
	closed bool
	// sawEOF: the client's side ended before the body did.
	sawEOF bool
	// end is set once the body has ended (remain is 0, or sawEOF); read
	// under the connection's lock (which is taken after mu, never before).
	end atomic.Bool
}

func (b *requestBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.remain == 0 || b.sawEOF {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remain {
		p = p[:b.remain]
	}
	n, err := b.c.br.Read(p)
	b.remain -= int64(n)
	if b.remain == 0 {
		b.end.Store(true)
		b.atEnd()
		return n, io.EOF
	}
	if err == io.EOF {
		// As net/http: the body has ended, short.
		b.sawEOF = true
		b.end.Store(true)
		b.atEnd()
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// atEnd starts the watch if it came due while the body was being read.
func (b *requestBody) atEnd() {
	c := b.c
	c.mu.Lock()
	if c.wantWatch && c.running && !c.watching && c.body == b {
		c.startWatchLocked()
	}
	c.mu.Unlock()
}

// Arrived reports whether what is left of the body has already been read
// from the client connection: reading it to its end will not wait on the
// network. (A handler that sees only net/http's types asks through an
// interface of its own; net/http's bodies cannot tell.)
func (b *requestBody) Arrived() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.closed && (b.remain == 0 || b.sawEOF || int64(b.c.br.Buffered()) >= b.remain)
}

func (b *requestBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

// discardForReply reads what the handler left of the body before the
// answer is sent, as net/http does; false when the connection is to close
// instead: the handler closed the body before its end, or its rest did not
// come within drainTimeout.
func (b *requestBody) discardForReply() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.remain == 0 || b.sawEOF {
		return true
	}
	if b.closed {
		return false
	}
	return b.drainLocked()
}

// drain reads what the handler left of the body, within drainTimeout, so
// that the connection can serve the next request; false if it cannot.
func (b *requestBody) drain() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.remain == 0 || b.drainLocked()
}

func (b *requestBody) drainLocked() bool {
	b.c.nc.SetReadDeadline(time.Now().Add(drainTimeout))
	n, err := b.c.br.Discard(int(b.remain))
	b.remain -= int64(n)
	b.end.Store(b.remain == 0)
	b.c.nc.SetReadDeadline(time.Time{})
	return err == nil && b.remain == 0
}
