package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// startServer serves h with a lean Server (its fallback configured by
// cfg) on a loopback port and returns the address; the server is shut
// down, and Serve's return checked, when the test ends.
func startServer(t testing.TB, h http.Handler, cfg func(*http.Server)) (*Server, string) {
	t.Helper()
	return startServerWith(t, h, cfg, nil)
}

// startServerWith is startServer with set applied to the Server before it
// serves.
func startServerWith(t testing.TB, h http.Handler, cfg func(*http.Server), set func(*Server)) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb := &http.Server{ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	if cfg != nil {
		cfg(fb)
	}
	s := &Server{Handler: h, Fallback: fb}
	if set != nil {
		set(s)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return s, ln.Addr().String()
}

// startStandard serves h with net/http's server alone, configured as
// startServer's fallback.
func startStandard(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// exchange writes raw on a new connection and reads the responses to it,
// one per request method given, until the connection ends or n have come.
func exchange(t testing.TB, addr, raw string, methods ...string) []*parsed {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []*parsed
	for _, m := range methods {
		p, err := readParsed(br, m)
		if err != nil {
			break
		}
		out = append(out, p)
	}
	return out
}

// parsed is a response as a client sees it, Date aside.
type parsed struct {
	status   int
	header   http.Header
	body     string
	trailer  http.Header
	chunked  bool
	length   int64
	closing  bool
	protoErr string
}

func readParsed(br *bufio.Reader, method string) (*parsed, error) {
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	p := &parsed{status: res.StatusCode, header: res.Header, body: string(body), trailer: res.Trailer,
		chunked: slices.Contains(res.TransferEncoding, "chunked"), length: res.ContentLength, closing: res.Close}
	if err != nil {
		p.protoErr = err.Error()
	}
	p.header.Del("Date")
	return p, nil
}

func (p *parsed) String() string {
	return fmt.Sprintf("%d chunked=%v length=%d close=%v header=%v trailer=%v body=%q err=%q",
		p.status, p.chunked, p.length, p.closing, p.header, p.trailer, p.body, p.protoErr)
}

// parityHandler answers by the request's path, each answer a way a
// handler can write a response.
func parityHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/text", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello, sniffed as text")
	})
	mux.HandleFunc("/html", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<html><body>sniffed</body></html>")
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "11")
		io.WriteString(w, `{"a":"b"}`+"\n\n")
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		for i := range 10 {
			fmt.Fprintf(w, "%d %s\n", i, strings.Repeat("x", 700))
		}
	})
	mux.HandleFunc("/short-declared", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "less than declared")
	})
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusNoContent)
		io.WriteString(w, "not allowed")
	})
	mux.HandleFunc("/notmodified", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Etag", `"x"`)
		w.WriteHeader(http.StatusNotModified)
	})
	mux.HandleFunc("/hints", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "after hints")
	})
	mux.HandleFunc("/trailers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "body")
		w.Header().Set("X-Sum", "42")
		w.Header().Set(http.TrailerPrefix+"X-Late", "yes")
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/late-header", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusAccepted)
		w.Header().Set("X-After", "not sent")
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("/injected", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Split"] = []string{"a\r\nSet-Cookie: evil=1"}
		w.Header()["Bad Name"] = []string{"dropped"}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "x")
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(599)
		io.WriteString(w, "unknown status")
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%s %s host=%s len=%d body=%q", r.Method, r.URL.RequestURI(), r.Host, r.ContentLength, b)
	})
	mux.Handle("/set", setFieldsHandler(nil)) // fields set apart from the map
	mux.HandleFunc("/ignore-body", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "did not read it")
	})
	return mux
}

// TestServerAnswersAsNetHTTP sends the same raw requests to net/http's
// server and to the lean one, over the same handler, and compares what a
// client reads (Date aside), and which path served each.
func TestServerAnswersAsNetHTTP(t *testing.T) {
	h := parityHandler()
	std := startStandard(t, h)
	lean, addr := startServer(t, h, nil)
	get := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }
	cases := []struct {
		name    string
		raw     string
		methods []string
		lean    bool // served on the lean path
	}{
		{"sniffed text", get("/text"), []string{"GET"}, true},
		{"sniffed html", get("/html"), []string{"GET"}, true},
		{"declared json", get("/json"), []string{"GET"}, true},
		{"over 2 KiB, chunked", get("/big"), []string{"GET"}, true},
		{"shorter than declared", get("/short-declared"), []string{"GET"}, true},
		{"empty", get("/empty"), []string{"GET"}, true},
		{"204", get("/nocontent"), []string{"GET"}, true},
		{"304", get("/notmodified"), []string{"GET"}, true},
		{"103 then 200", get("/hints"), []string{"GET", "GET"}, true},
		{"trailers", get("/trailers"), []string{"GET"}, true},
		{"flushed stream", get("/stream"), []string{"GET"}, true},
		{"header set after WriteHeader", get("/late-header"), []string{"GET"}, true},
		{"line breaks and bad names", get("/injected"), []string{"GET"}, true},
		{"handler says close", get("/close") + get("/text"), []string{"GET", "GET"}, true},
		{"unknown status", get("/status"), []string{"GET"}, true},
		{"not found", get("/nowhere"), []string{"GET"}, true},
		{"HEAD", "HEAD /text HTTP/1.1\r\nHost: x\r\n\r\n", []string{"HEAD"}, true},
		{"HEAD big", "HEAD /big HTTP/1.1\r\nHost: x\r\n\r\n", []string{"HEAD"}, true},
		{"POST echo", "POST /echo?q=1 HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n\r\nhello", []string{"POST"}, true},
		{"body left unread, then another", "POST /ignore-body HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" + get("/text"), []string{"POST", "GET"}, true},
		{"pipelined", get("/text") + get("/json") + get("/empty"), []string{"GET", "GET", "GET"}, true},
		{"client says close", "GET /text HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" + get("/json"), []string{"GET", "GET"}, true},
		{"keep-alive said", "GET /text HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", []string{"GET"}, true},
		{"bare LF", "GET /text HTTP/1.1\nHost: x\n\n", []string{"GET"}, true},
		// Handed over: net/http's own answers.
		{"HTTP/1.0", "GET /text HTTP/1.0\r\n\r\n", []string{"GET"}, false},
		{"chunked upload", "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", []string{"POST"}, false},
		{"no Host", "GET /text HTTP/1.1\r\n\r\n", []string{"GET"}, false},
		{"two Hosts", "GET /text HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", []string{"GET"}, false},
		{"bad Host", "GET /text HTTP/1.1\r\nHost: a b\r\n\r\n", []string{"GET"}, false},
		{"CL and TE", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", []string{"POST"}, false},
		{"two lengths", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", []string{"POST"}, false},
		{"bad length", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -3\r\n\r\n", []string{"POST"}, false},
		{"expect continue", "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi", []string{"POST", "POST"}, false},
		{"upgrade", "GET /text HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", []string{"GET"}, false},
		{"bad header name", "GET /text HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n", []string{"GET"}, false},
		{"bad header value", "GET /text HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", []string{"GET"}, false},
		{"absolute form", "GET http://x/text HTTP/1.1\r\nHost: x\r\n\r\n", []string{"GET"}, false},
		{"asterisk", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", []string{"OPTIONS"}, false},
		{"garbage", "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03 not http\r\n\r\n", []string{"GET"}, false},
		{"leading empty line", "\r\nGET /text HTTP/1.1\r\nHost: x\r\n\r\n", []string{"GET"}, false},
		{"large head", "GET /text HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 5000) + "\r\n\r\n", []string{"GET"}, false},
		{"body over MaxLeanBody", "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat("z", 70000), []string{"POST"}, false},
		{"lean, then handed over", get("/text") + "GET /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []string{"GET", "GET"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := lean.Stats()
			want := exchange(t, std, tc.raw, tc.methods...)
			got := exchange(t, addr, tc.raw, tc.methods...)
			if len(want) == 0 {
				t.Fatalf("net/http answered nothing to %q", tc.raw)
			}
			if len(got) != len(want) {
				t.Fatalf("lean: %d responses, net/http %d:\n%v\n%v", len(got), len(want), got, want)
			}
			for i := range want {
				if got[i].String() != want[i].String() {
					t.Errorf("response %d:\n lean:     %v\n net/http: %v", i, got[i], want[i])
				}
			}
			after := lean.Stats()
			served := after.Served > before.Served
			if served != tc.lean {
				t.Errorf("served on the lean path: %v, want %v (stats %+v -> %+v)", served, tc.lean, before, after)
			}
			if handed := after.HandedOver > before.HandedOver; handed == tc.lean && tc.name != "lean, then handed over" {
				t.Errorf("handed over: %v (stats %+v -> %+v)", handed, before, after)
			}
		})
	}
}

// steps records the watch's steps (Server.hook) for a test to wait on.
type steps struct {
	mu   sync.Mutex
	cond sync.Cond
	seen []string
}

func newSteps(s *Server) *steps {
	st := &steps{}
	st.cond.L = &st.mu
	s.hook = func(step string) {
		st.mu.Lock()
		st.seen = append(st.seen, step)
		st.mu.Unlock()
		st.cond.Broadcast()
	}
	return st
}

// wait waits until step has been seen n times in all; it reports an
// error (callable from a handler's goroutine) after 10 s.
func (st *steps) wait(t *testing.T, step string, n int) bool {
	deadline := time.Now().Add(10 * time.Second)
	timer := time.AfterFunc(10*time.Second, st.cond.Broadcast)
	defer timer.Stop()
	st.mu.Lock()
	defer st.mu.Unlock()
	for {
		if count(st.seen, step) >= n {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("step %q seen %d times, want %d (steps %v)", step, count(st.seen, step), n, st.seen)
			return false
		}
		st.cond.Wait()
	}
}

func count(seen []string, step string) int {
	n := 0
	for _, s := range seen {
		if s == step {
			n++
		}
	}
	return n
}

// startWatched is startServer with the watch's steps recorded (the hook is
// set before Serve starts).
func startWatched(t *testing.T, h http.Handler) (*steps, string) {
	t.Helper()
	var st *steps
	_, addr := startServerWith(t, h, nil, func(s *Server) { st = newSteps(s) })
	return st, addr
}

// TestServerContextEndsWhenTheClientGoes: a handler waiting on its
// request's context sees it end when the client closes its connection,
// as under net/http, though the watch starts only after WatchAfter.
func TestServerContextEndsWhenTheClientGoes(t *testing.T) {
	ended := make(chan error, 1)
	st, addr := startWatched(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			ended <- r.Context().Err()
		case <-time.After(10 * time.Second):
			ended <- errors.New("the context did not end")
		}
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
	st.wait(t, "started", 1)
	c.Close()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler saw %v, want context.Canceled", err)
	}
	st.wait(t, "gone", 1)
}

// TestServerContextEndsAfterTheBodyIsRead: a watch that comes due while
// the body is unread waits for the body's end (it must not read the
// body's bytes), then sees the client go.
func TestServerContextEndsAfterTheBodyIsRead(t *testing.T) {
	ended := make(chan error, 1)
	var st *steps
	bodies := make(chan string, 1)
	_, addr := startServerWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st.wait(t, "deferred", 1)
		b, _ := io.ReadAll(r.Body)
		bodies <- string(b)
		select {
		case <-r.Context().Done():
			ended <- r.Context().Err()
		case <-time.After(10 * time.Second):
			ended <- errors.New("the context did not end")
		}
	}), nil, func(s *Server) { st = newSteps(s) })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody")
	if b := <-bodies; b != "body" {
		t.Fatalf("body %q", b)
	}
	st.wait(t, "started", 1)
	c.Close()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler saw %v, want context.Canceled", err)
	}
}

// TestServerWatchKeepsAPipelinedRequest: a request that arrives while the
// previous one is watched is served, whole, after it.
func TestServerWatchKeepsAPipelinedRequest(t *testing.T) {
	var st *steps
	_, addr := startServerWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			st.wait(t, "byte", 1) // the next request's first byte, read by the watch
		}
		io.WriteString(w, r.URL.Path)
	}), nil, func(s *Server) { st = newSteps(s) })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	st.wait(t, "started", 1)
	io.WriteString(c, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	for _, want := range []string{"/slow", "/next"} {
		p, err := readParsed(br, "GET")
		if err != nil {
			t.Fatal(err)
		}
		if p.body != want {
			t.Fatalf("body %q, want %q", p.body, want)
		}
	}
}

// TestServerHeadTimeout: a client that sends part of a head and stops is
// cut off at ReadHeaderTimeout, on its first request or a later one; a
// kept-alive connection that sends nothing is closed at IdleTimeout.
func TestServerHeadTimeout(t *testing.T) {
	const headTimeout, idleTimeout = 100 * time.Millisecond, 300 * time.Millisecond
	_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), func(s *http.Server) {
		s.ReadHeaderTimeout = headTimeout
		s.IdleTimeout = idleTimeout
	})
	whole := "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		name, raw string
		answers   int
		least     time.Duration
	}{
		{"first head cut short", "GET / HTTP/1.1\r\nHost: x\r\n", 0, headTimeout},
		{"later head cut short", whole + "GET / HTTP/1.1\r\nHo", 1, headTimeout},
		{"idle after an answer", whole, 1, idleTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Before the dial: the server's deadline starts when it accepts,
			// which may be before Dial returns here.
			start := time.Now()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tc.raw)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			for range tc.answers {
				if p, err := readParsed(br, "GET"); err != nil || p.body != "ok" {
					t.Fatalf("answer: %v, %v", p, err)
				}
			}
			n, err := br.Read(make([]byte, 1))
			if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read %d bytes, %v: want the server to close the connection", n, err)
			}
			if d := time.Since(start); d < tc.least || d > 4*time.Second {
				t.Fatalf("closed after %v, want at least %v", d, tc.least)
			}
		})
	}
}

// TestServerShutdown: a request in progress is answered with Connection:
// close, an idle connection is closed, and Shutdown returns once both are.
func TestServerShutdown(t *testing.T) {
	inHandler := make(chan struct{})
	release := make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(inHandler)
			<-release
		}
		io.WriteString(w, "done")
	}), Fallback: &http.Server{ErrorLog: log.New(io.Discard, "", 0)}}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	addr := ln.Addr().String()

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if got := exchangeOn(t, idle, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n"); got.body != "done" {
		t.Fatalf("idle connection's first answer: %v", got)
	}
	busy, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	io.WriteString(busy, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
	<-inHandler

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	// The idle connection is closed.
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := idle.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("idle connection: read %d, %v; want it closed", n, err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in progress", err)
	default:
	}
	close(release)
	busy.SetReadDeadline(time.Now().Add(5 * time.Second))
	p, err := readParsed(bufio.NewReader(busy), "GET")
	if err != nil {
		t.Fatal(err)
	}
	if p.body != "done" || !p.closing {
		t.Fatalf("request in progress: %v; want its answer with Connection: close", p)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
}

func exchangeOn(t *testing.T, c net.Conn, raw string) *parsed {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	io.WriteString(c, raw)
	p, err := readParsed(bufio.NewReader(c), "GET")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServerPanicClosesTheConnection: a handler's panic is logged and ends
// its connection; http.ErrAbortHandler ends it without a log line; the
// server goes on.
func TestServerPanicClosesTheConnection(t *testing.T) {
	var logged bytes.Buffer
	var mu sync.Mutex
	_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic("boom")
		case "/abort":
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, "fine")
	}), func(s *http.Server) { s.ErrorLog = log.New(lockedWriter{&mu, &logged}, "", 0) })
	for _, path := range []string{"/panic", "/abort"} {
		if got := exchange(t, addr, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\nGET /ok HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "GET"); len(got) != 0 {
			t.Fatalf("%s: %d answers, want the connection closed with none", path, len(got))
		}
	}
	if got := exchange(t, addr, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n", "GET"); len(got) != 1 || got[0].body != "fine" {
		t.Fatalf("after the panics: %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logged.String(), "http: panic serving"); n != 1 || !strings.Contains(logged.String(), "boom") {
		t.Fatalf("log: %q; want one panic line, for boom", logged.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestServerConcurrentClients: 64 connections, each a run of keep-alive
// requests, lean and handed over mixed, get their own answers (-race).
func TestServerConcurrentClients(t *testing.T) {
	s, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s|%s", r.URL.Query().Get("id"), b)
	}), nil)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range 64 {
		wg.Go(func() {
			for i := range 40 {
				id := fmt.Sprintf("%d-%d", g, i)
				var body io.Reader = strings.NewReader(id)
				if i%10 == 9 {
					body = io.MultiReader(strings.NewReader(id)) // no length: chunked, handed over
				}
				res, err := client.Post("http://"+addr+"/?id="+id, "text/plain", body)
				if err != nil {
					bad.Add(1)
					continue
				}
				got, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if string(got) != id+"|"+id {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed or got another's answer", n, 64*40)
	}
	if st := s.Stats(); st.Served == 0 || st.HandedOver == 0 {
		t.Fatalf("stats %+v: want both paths used", st)
	}
}

// TestServerReadTimeoutIsNotAClientGone: read_timeout bounds a request's
// head and body; a handler that runs past it, watched meanwhile, still
// answers, its context intact (net/http clears the deadline for its
// background read too).
func TestServerReadTimeoutIsNotAClientGone(t *testing.T) {
	const readTimeout = 100 * time.Millisecond
	var st *steps
	_, addr := startServerWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st.wait(t, "started", 1)
		// A real deadline on the socket: only passing it shows it is gone.
		select {
		case <-r.Context().Done():
			http.Error(w, "context ended", http.StatusInternalServerError)
			return
		case <-time.After(3 * readTimeout):
		}
		io.WriteString(w, "still here")
	}), func(s *http.Server) { s.ReadTimeout = readTimeout }, func(s *Server) { st = newSteps(s) })
	got := exchange(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "GET")
	if len(got) != 1 || got[0].body != "still here" {
		t.Fatalf("answers %v, want one saying still here", got)
	}
}

// rawExchange writes raw on a new connection, half-closes it, and returns
// every byte the server sent until it closed, Date values blanked.
func rawExchange(t testing.TB, addr string, raw []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(raw); err != nil {
		return []byte("write: " + err.Error())
	}
	c.(*net.TCPConn).CloseWrite()
	out, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading the answers: %v (so far %q)", err, out)
	}
	return dateValue.ReplaceAll(out, []byte("Date: -\r\n"))
}

var dateValue = regexp.MustCompile(`(?m)^Date: [^\r\n]*\r\n`)

// serverSeeds are requests for the fuzzer to start from: each kind the
// parity test sends, and request smuggling's classics.
var serverSeeds = []string{
	"GET /text HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET /big HTTP/1.1\r\nHost: x\r\n\r\nGET /trailers HTTP/1.1\r\nHost: x\r\n\r\n",
	"HEAD /big HTTP/1.1\r\nHost: x\r\n\r\nHEAD /json HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET /hints HTTP/1.1\r\nHost: x\r\n\r\nGET /stream HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET /nocontent HTTP/1.1\r\nHost: x\r\n\r\nGET /notmodified HTTP/1.1\r\nHost: x\r\n\r\nGET /status HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET /injected HTTP/1.1\r\nHost: x\r\n\r\nGET /late-header HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET /set HTTP/1.1\r\nHost: x\r\n\r\nHEAD /set HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET /close HTTP/1.1\r\nHost: x\r\n\r\nGET /text HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET /short-declared HTTP/1.1\r\nHost: x\r\n\r\nGET /text HTTP/1.1\r\nHost: x\r\n\r\n",
	"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /text HTTP/1.1\r\nHost: x\r\n\r\n",
	"POST /ignore-body HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /empty HTTP/1.1\r\nHost: x\r\n\r\n",
	"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nshort",
	"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /text HTTP/1.1\r\nHost: x\r\n\r\n",
	"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
	"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
	"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length : 3\r\n\r\nabc",
	"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 0x3\r\n\r\nabc",
	"GET /text HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
	"GET /text HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: h2c\r\n\r\n",
	"GET /text HTTP/1.1\r\nhost: a\r\nHOST: b\r\n\r\n",
	"GET /text HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n",
	"GET /text HTTP/1.1\nHost: x\n\nGET /json HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET /text HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /text HTTP/1.0\r\n\r\n",
	"GET /te",
	"",
}

// FuzzServerAnswersAsNetHTTP sends the same bytes to net/http's server and
// to the lean one, over the same handler, and wants the same bytes back
// (Date aside): whatever the lean path takes it answers as net/http, and
// whatever it does not it leaves, whole, to net/http.
func FuzzServerAnswersAsNetHTTP(f *testing.F) {
	for _, s := range serverSeeds {
		f.Add([]byte(s))
	}
	h := parityHandler()
	std := startStandard(f, h)
	_, lean := startServer(f, h, nil)
	f.Fuzz(func(t *testing.T, raw []byte) {
		want := rawExchange(t, std, raw)
		got := rawExchange(t, lean, raw)
		if !bytes.Equal(got, want) {
			t.Fatalf("request %q:\n lean:     %q\n net/http: %q", raw, got, want)
		}
	})
}

// TestServerShutdownClosesSilentNewConnections: a connection that has not
// sent its first request is left 5 s by Shutdown (it may be on its way),
// then closed, as net/http closes its new connections.
func TestServerShutdownClosesSilentNewConnections(t *testing.T) {
	clock := newFakeClock()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: http.NotFoundHandler(), Fallback: &http.Server{ErrorLog: log.New(io.Discard, "", 0)}, now: clock.Now}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// The server has the connection once it answers a request on another.
	if got := exchange(t, ln.Addr().String(), "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "GET"); len(got) != 1 {
		t.Fatalf("answers %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a new connection under 5 s old: %v, want it to wait", err)
	}
	clock.Advance(6 * time.Second)
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown once the connection is 6 s old: %v", err)
	}
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := silent.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("silent connection: read %d, %v; want it closed", n, err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
}

// TestServerWriteTimeout: write_timeout bounds the answer from the end of
// the request's head, as under net/http: a handler that answers after it
// gets a write error, and the client no answer.
func TestServerWriteTimeout(t *testing.T) {
	const writeTimeout = 100 * time.Millisecond
	wrote := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A real deadline on the socket: only passing it shows it.
		time.Sleep(3 * writeTimeout)
		_, err := io.WriteString(w, strings.Repeat("x", 64<<10))
		if err == nil {
			err = http.NewResponseController(w).Flush()
		}
		wrote <- err
	})
	_, addr := startServer(t, h, func(s *http.Server) { s.WriteTimeout = writeTimeout })
	got := exchange(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "GET")
	if err := <-wrote; err == nil {
		t.Error("the handler's late write succeeded")
	}
	if len(got) != 0 {
		t.Fatalf("the client read an answer past write_timeout: %v", got[0])
	}
}

// TestServerDropsLargeHeaderBlocks: after an answer with a large header
// block, the connection keeps no buffer of that size for the next ones.
func TestServerDropsLargeHeaderBlocks(t *testing.T) {
	s, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			names, ends, values := make([]string, 200), make([]int, 200), []byte{}
			for i := range 200 {
				w.Header().Set(fmt.Sprintf("X-Field-%d", i), strings.Repeat("v", 100))
				names[i] = fmt.Sprintf("X-Set-%d", i)
				values = append(values, strings.Repeat("s", 100)...)
				ends[i] = len(values)
			}
			if !SetFields(w, names, ends, values) {
				t.Error("SetFields refused plain fields")
			}
		}
		io.WriteString(w, "ok")
	}), nil)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(nc, "GET /big HTTP/1.1\r\nHost: x\r\n\r\nGET /small HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(nc)
	for _, n := range []int{400, 0} {
		p, err := readParsed(br, "GET")
		if err != nil || p.body != "ok" || len(p.header) < n {
			t.Fatalf("answer: %v, %v", p, err)
		}
	}
	s.mu.Lock()
	var conns []*serverConn
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if len(conns) != 1 {
		t.Fatalf("%d lean connections, want the client's one", len(conns))
	}
	c := conns[0]
	// Idle once it waits for a third request: its answers are done, and
	// the flag's store orders what they wrote before this test's reads.
	for deadline := time.Now().Add(5 * time.Second); !c.idle.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("the connection did not go idle")
		}
		runtime.Gosched()
	}
	if cap(c.hdr) > maxKeptHeaderBlock || cap(c.fields) > maxKeptFields {
		t.Errorf("the connection keeps a %d-byte header block and %d fields", cap(c.hdr), cap(c.fields))
	}
	if cap(c.setValues) > maxKeptHeaderBlock || cap(c.set) > maxKeptFields {
		t.Errorf("the connection keeps %d bytes and %d fields of SetFields", cap(c.setValues), cap(c.set))
	}
}

// arrived is a request body's Arrived, false for a body that is not a lean
// server's.
func arrived(body io.Reader) bool {
	b, ok := body.(interface{ Arrived() bool })
	return ok && b.Arrived()
}

// Arrived says whether reading the rest of a lean request's body can
// wait on the client: true for a body that came with its head, false for
// one of which part is still to come, until it has come; false once the
// body is closed, and for a body that is not a lean server's.
func TestBodyArrived(t *testing.T) {
	type seen struct{ before, after, closed bool }
	got := make(chan seen, 1)
	half := make(chan struct{}, 1)
	_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s seen
		s.before = arrived(r.Body)
		if r.URL.Path == "/half" {
			half <- struct{}{}
		}
		if b, err := io.ReadAll(r.Body); err != nil || string(b) != "body" {
			t.Errorf("%s: body %q %v", r.URL.Path, b, err)
		}
		s.after = arrived(r.Body)
		r.Body.Close()
		s.closed = arrived(r.Body)
		got <- s
	}), nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	io.WriteString(c, "POST /whole HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody")
	if s := <-got; s != (seen{before: true, after: true}) {
		t.Errorf("a body sent with its head: %+v, want buffered before and after reading, not once closed", s)
	}
	if _, err := readParsed(br, "POST"); err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "POST /half HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbo")
	<-half
	io.WriteString(c, "dy")
	if s := <-got; s != (seen{before: false, after: true}) {
		t.Errorf("a body half sent: %+v, want not buffered before its rest came, buffered once read", s)
	}
	if arrived(strings.NewReader("body")) || arrived(http.NoBody) {
		t.Error("arrived says true of a body that is not a lean server's")
	}
}
