package proxy

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawUpstream serves each connection with serve on a loopback listener and
// returns its URL. done is closed when the test ends, and then the
// listener and every connection are.
func rawUpstream(t *testing.T, serve func(c net.Conn, done <-chan struct{})) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	done := make(chan struct{})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serve(c, done) })
		}
	})
	t.Cleanup(func() {
		close(done)
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

const earlyBody = `{"error":"payload too large"}`

// answerEarly reads a request's headers and answers 413 without reading its
// body; it keeps the connection open, reading nothing, until the test ends.
func answerEarly(c net.Conn, done <-chan struct{}) {
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if line == "\r\n" {
			break
		}
	}
	c.Write([]byte("HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(earlyBody)) + "\r\n\r\n" + earlyBody))
	<-done
}

// neverAnswer reads nothing and writes nothing until the test ends.
func neverAnswer(_ net.Conn, done <-chan struct{}) { <-done }

const earlyYAML = `
routes:
  - name: upload
    upstream: "UPSTREAM"
    timeout: TIMEOUT
    match: {path_prefix: /upload}
    idempotency: {required: true}
`

// An upstream that answers 413 before reading a 10 MB body the route holds
// (idempotency) gets its answer to the client at once, on both transports;
// one that neither reads nor answers gets 504 at the route timeout, not 502.
func TestEarlyUpstreamAnswerWhileSendingTheBody(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 10_000_000)
	tests := []struct {
		name       string
		serve      func(net.Conn, <-chan struct{})
		timeout    time.Duration
		wantStatus int
		wantBody   string
	}{
		// A long route timeout: the answer must not wait for it (before, the
		// lean path wrote until the timeout, then answered 502); uploading
		// 10 MB to the gateway under -race on a loaded machine takes seconds.
		{"answers 413 without reading", answerEarly, 30 * time.Second, http.StatusRequestEntityTooLarge, earlyBody},
		{"neither reads nor answers", neverAnswer, 400 * time.Millisecond, http.StatusGatewayTimeout, ""},
	}
	transports := []struct {
		name string
		new  func() closingTransport
	}{
		{"standard", func() closingTransport { return NewStandardTransport() }},
	}
	for _, tr := range transports {
		for _, tc := range tests {
			t.Run(tr.name+"/"+tc.name, func(t *testing.T) {
				up := rawUpstream(t, tc.serve)
				yaml := strings.NewReplacer("UPSTREAM", up, "TIMEOUT", tc.timeout.String()).Replace(earlyYAML)
				srv, _ := newGateway(t, compileYAML(t, yaml), newEngine(t, newTestClock()), gatewayOpts{transport: tr.new()})
				start := time.Now()
				r := do(t, srv.Client(), http.MethodPost, srv.URL+"/upload", bytes.NewReader(body), payHeader("big-1"))
				took := time.Since(start)
				if r.status != tc.wantStatus {
					t.Fatalf("status: got %d after %s, want %d (body %s)", r.status, took, tc.wantStatus, r.body)
				}
				if tc.wantBody != "" && string(r.body) != tc.wantBody {
					t.Fatalf("body: got %q, want the upstream's %q", r.body, tc.wantBody)
				}
				if tc.wantStatus == http.StatusRequestEntityTooLarge && took >= tc.timeout {
					t.Fatalf("answered after %s, want before the route timeout %s", took, tc.timeout)
				}
				if tc.wantStatus == http.StatusGatewayTimeout {
					e := decodeError(t, r)
					if want := "the upstream did not answer within " + tc.timeout.String(); e.Message != want {
						t.Fatalf("message: got %q, want %q", e.Message, want)
					}
				}
				t.Logf("%d in %s", r.status, took)
			})
		}
	}
}
