package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Helpers of the end-to-end tests: they run the real serve path in-process
// (against real redis-server processes where needed) and talk to it over
// HTTP only.

// redisTimeout is redis.timeout in gateway.redis.yaml.
const redisTimeout = 30 * time.Millisecond

// latencySlack is what an answer over loopback HTTP may take beyond the
// decision deadline on a loaded 2-core machine under -race.
const latencySlack = 50 * time.Millisecond

var listeningLine = regexp.MustCompile(`gateway listening" addr=(\S+)`)

// gatewayLog is the log writer of one in-process gateway. It keeps every
// complete line (never blocking the gateway, unlike a pipe nobody drains)
// and wakes whoever waits for a line. It is safe for concurrent use.
type gatewayLog struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	changed chan struct{} // closed and replaced on every write
}

// newGatewayLog returns an empty log that prints itself if the test fails.
func newGatewayLog(t *testing.T, name string) *gatewayLog {
	l := &gatewayLog{changed: make(chan struct{})}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, line := range l.lines {
			t.Logf("%s log: %s", name, line)
		}
	})
	return l
}

func (l *gatewayLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = append(l.partial[:0], l.partial[i+1:]...)
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

// gateway is one in-process "gateway serve".
type gateway struct {
	name string
	base string // http://127.0.0.1:port
	log  *gatewayLog
	done chan struct{} // closed when run returned
	code int           // run's exit code, set before done is closed
	// stop ends the run as SIGTERM would (its context is cancelled).
	stop func()
}

// startGateway runs "gateway serve -config path" until the test ends, when
// it cancels the run and waits for a clean exit. It returns once the gateway
// logged its address, and fails the test if serve exits instead.
func startGateway(t *testing.T, name, path string) *gateway {
	t.Helper()
	g, exited := serveOutcome(t, name, path)
	if exited {
		t.Fatalf("%s: serve exited %d before listening:\n%s", name, g.code, g.output())
	}
	return g
}

// serveOutcome runs "gateway serve -config path" and returns when it either
// logged its address (exited false; the gateway runs until the test ends, as
// with startGateway) or returned (exited true, with its exit code and
// output). It fails the test if neither happens within 10s.
func serveOutcome(t *testing.T, name, path string) (g *gateway, exited bool) {
	t.Helper()
	g = &gateway{name: name, log: newGatewayLog(t, name), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	g.stop = cancel
	go func() {
		defer close(g.done)
		g.code = run(ctx, []string{"serve", "-config", path}, io.Discard, g.log)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-g.done:
			if g.base != "" && g.code != 0 {
				t.Errorf("%s: serve exited %d, want 0 after a drain", name, g.code)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s: serve did not return within 20s after its context ended", name)
		}
	})
	deadline := time.After(10 * time.Second)
	for {
		g.log.mu.Lock()
		for _, line := range g.log.lines {
			if m := listeningLine.FindStringSubmatch(line); m != nil {
				g.base = "http://" + m[1]
			}
		}
		changed := g.log.changed
		g.log.mu.Unlock()
		if g.base != "" {
			return g, false
		}
		select {
		case <-changed:
		case <-g.done:
			return g, true
		case <-deadline:
			t.Fatalf("%s: neither listening nor exited within 10s", name)
		}
	}
}

// waitLog returns the submatches of the first log line at index from or
// later that matches re, failing after 10s or if the gateway exits first.
func (g *gateway) waitLog(t *testing.T, from int, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		g.log.mu.Lock()
		for _, line := range g.log.lines[min(from, len(g.log.lines)):] {
			if m := re.FindStringSubmatch(line); m != nil {
				g.log.mu.Unlock()
				return m
			}
		}
		changed := g.log.changed
		g.log.mu.Unlock()
		select {
		case <-changed:
		case <-g.done:
			t.Fatalf("%s exited with code %d before logging a line matching %q", g.name, g.code, re)
		case <-deadline:
			t.Fatalf("%s: no log line matching %q within 10s", g.name, re)
		}
	}
}

// logLen is the number of complete log lines so far, for waitLog's from.
func (g *gateway) logLen() int {
	g.log.mu.Lock()
	defer g.log.mu.Unlock()
	return len(g.log.lines)
}

// newTestClient returns a client whose idle pool fits a dozen concurrent
// workers per gateway; its idle connections are closed when the test ends.
func newTestClient(t *testing.T) *http.Client {
	tr := &http.Transport{
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// reply is one answer, read whole.
type reply struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration // from sending the request to reading the body
}

// errorReply is the JSON body of every answer the gateway gives itself.
type errorReply struct {
	Code         int    `json:"code"`
	Message      string `json:"message"`
	Policy       string `json:"policy"`
	RetryAfterMs *int64 `json:"retry_after_ms"`
}

func (r reply) errorBody(t *testing.T) errorReply {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%d answer: got Content-Type %q, want application/json", r.status, ct)
	}
	var e errorReply
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("%d answer: body %q is not the JSON error body: %v", r.status, r.body, err)
	}
	return e
}

// send makes one request with headers given as name, value pairs.
func send(c *http.Client, method, url string, headers ...string) (reply, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return reply{}, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	start := time.Now()
	res, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return reply{}, fmt.Errorf("reading the body of %s %s: %w", method, url, err)
	}
	return reply{status: res.StatusCode, header: res.Header, body: body, took: time.Since(start)}, nil
}

func mustSend(t *testing.T, c *http.Client, method, url string, headers ...string) reply {
	t.Helper()
	r, err := send(c, method, url, headers...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// writeRedisConfig copies gateway.redis.yaml into a temp dir, trusting the
// loopback peer as a proxy so that tests can choose client addresses with
// X-Forwarded-For.
func writeRedisConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../gateway.redis.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const from, to = "trusted_proxies: []", "trusted_proxies: [127.0.0.1/32]"
	if !bytes.Contains(data, []byte(from)) {
		t.Fatalf("gateway.redis.yaml has no %q line to edit", from)
	}
	data = bytes.Replace(data, []byte(from), []byte(to), 1)
	path := filepath.Join(t.TempDir(), "gateway.redis.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func durations(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.Round(10 * time.Microsecond).String()
	}
	return strings.Join(s, " ")
}
