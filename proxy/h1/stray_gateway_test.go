package h1_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/proxy"
	"github.com/ratelimit-gateway/gateway/proxy/h1"
)

// strayUpstream answers every request with "own:<X-Id>" and then, after
// delay, sends a second response nobody asked for, "stray:<X-Id>", on the
// same connection: a hostile or broken upstream. It returns its address
// and the count of strays it sent.
func strayUpstream(t *testing.T, delay time.Duration) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var strays atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	response := func(body string) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	write := func(c net.Conn, mu *sync.Mutex, s string) {
		mu.Lock()
		defer mu.Unlock()
		io.WriteString(c, s)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				var mu sync.Mutex // the answers and the strays' writes
				var timers sync.WaitGroup
				defer timers.Wait()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					id := req.Header.Get("X-Id")
					strays.Add(1)
					if delay == 0 { // in the same write as the answer
						write(c, &mu, response("own:"+id)+response("stray:"+id))
						continue
					}
					write(c, &mu, response("own:"+id))
					timers.Add(1)
					time.AfterFunc(delay, func() { defer timers.Done(); write(c, &mu, response("stray:"+id)) })
				}
			}()
		}
	}()
	return ln.Addr().String(), &strays
}

// strayCount is what clients got from a stray upstream.
type strayCount struct {
	requests, own, stray, failed int
	// others counts answers that were another request's own.
	others int
}

// throughStrayUpstream sends clients × each requests through a gateway on
// transport to a stray upstream, each client over its own kept-alive
// connection, and counts whose answer each got.
func throughStrayUpstream(t *testing.T, transport closingTransport, delay time.Duration, clients, each int) (strayCount, int64) {
	t.Helper()
	addr, strays := strayUpstream(t, delay)
	gw := serveGatewayOn(t, "routes:\n  - {name: up, match: {path_prefix: /}, upstream: \"http://"+addr+"\"}\n", transport)
	var mu sync.Mutex
	var got strayCount
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
			defer client.CloseIdleConnections()
			for i := range each {
				id := fmt.Sprintf("%d-%d", c, i)
				req, _ := http.NewRequest("GET", gw+"/", nil)
				req.Header.Set("X-Id", id)
				resp, err := client.Do(req)
				var body []byte
				if err == nil {
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				mu.Lock()
				got.requests++
				switch b := string(body); {
				case err != nil || resp.StatusCode != 200:
					got.failed++
				case b == "own:"+id:
					got.own++
				case strings.HasPrefix(b, "stray:"):
					got.stray++
				default:
					got.others++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return got, strays.Load()
}

// TestStrayUpstreamResponses measures what a hostile upstream's unasked
// responses do, 48 clients at once through the gateway (on the lean
// server), on each upstream transport. On proxy/h1, stray
// bytes that arrive with an answer retire the connection before it is used
// again: nothing is misrouted (net/http's transport misroutes a few). A stray that arrives later (3 ms) may be read as
// the answer to the next request on that connection, and that request's
// own answer, left behind, as the answer to the one after: on proxy/h1 and
// on net/http's transport alike, since no transport can tell a late stray
// from an answer. That figure is measured, not bounded (logged, and stated
// in docs/guarantees.md); every request is still answered.
func TestStrayUpstreamResponses(t *testing.T) {
	const clients, each = 48, 6
	for _, tr := range []struct {
		name string
		lean bool
		new  func() closingTransport
	}{
		{"proxy/h1", true, func() closingTransport { return h1.New(h1.Config{Fallback: proxy.NewStandardTransport()}) }},
		{"net/http", false, func() closingTransport { return proxy.NewStandardTransport() }},
	} {
		t.Run(tr.name+"/with the answer", func(t *testing.T) {
			got, _ := throughStrayUpstream(t, tr.new(), 0, clients, each)
			t.Logf("%s: %d of %d answers misrouted", tr.name, got.stray+got.others, got.requests)
			switch {
			case got.requests != clients*each || got.failed != 0:
				t.Errorf("got %+v: want all %d requests answered", got, clients*each)
			case tr.lean && got.own != clients*each:
				// h1 looks at its buffer and the socket each time it
				// takes a connection; net/http's transport may hand a
				// connection on before its read loop has seen the stray.
				t.Errorf("got %+v, want all %d answers their own", got, clients*each)
			}
		})
		t.Run(tr.name+"/3ms after", func(t *testing.T) {
			got, strays := throughStrayUpstream(t, tr.new(), 3*time.Millisecond, clients, each)
			t.Logf("%s: %d of %d answers misrouted (%d strays, %d other requests' own), %d failed; %d strays sent",
				tr.name, got.stray+got.others, got.requests, got.stray, got.others, got.failed, strays)
			if got.requests != clients*each || got.failed != 0 {
				t.Errorf("got %+v: want all %d requests answered", got, clients*each)
			}
		})
	}
}
