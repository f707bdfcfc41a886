package admin

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
)

// failureCount counts what OnAuthFailure receives.
type failureCount struct {
	mu sync.Mutex
	n  map[AuthFailure]int
}

func (f *failureCount) add(k AuthFailure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[AuthFailure]int{}
	}
	f.n[k]++
}

func (f *failureCount) get(k AuthFailure) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[k]
}

// peerClient is a client whose connections come from ip (any 127.0.0.0/8
// address is this host's), so that one test has several peers.
func peerClient(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

// do sends method to u with the bearer token (none when "") or the form
// (a login), and returns the answer.
func do(t *testing.T, c *http.Client, method, u, token string, form url.Values, cookies ...*http.Cookie) answer {
	t.Helper()
	var req *http.Request
	if form != nil {
		req, _ = http.NewRequestWithContext(t.Context(), method, u, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req, _ = http.NewRequestWithContext(t.Context(), method, u, nil)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, k := range cookies {
		req.AddCookie(k)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, body: body}
	if k := resp.Cookies(); len(k) > 0 {
		a.header.Set("X-Test-Cookie", k[0].Name+"="+k[0].Value)
	}
	return a
}

// throttledFor checks that a is a 429 with a Retry-After in (0, 60] s.
func throttledFor(t *testing.T, a answer, what string) {
	t.Helper()
	if a.status != http.StatusTooManyRequests {
		t.Fatalf("%s: got %d %s, want 429", what, a.status, a.body)
	}
	secs, err := strconv.Atoi(a.header.Get("Retry-After"))
	if err != nil || secs <= 0 || secs > int(failureWindow/time.Second) {
		t.Fatalf("%s: Retry-After %q, want 1 to 60 seconds", what, a.header.Get("Retry-After"))
	}
	a.errorOf(t)
}

// Five wrong bearer tokens a minute, then 429 with Retry-After, whatever
// the peer sends, even the right token: 2,000 wrong tokens in a row cost
// the guesser five guesses. Another peer is not held back, and the first
// is let in again once the minute is over.
func TestGuessingSlowed(t *testing.T) {
	clock := clocktest.New(time.Unix(1_700_000_000, 0))
	var count failureCount
	cfg := fullConfig(t, testToken)
	cfg.Clock, cfg.OnAuthFailure = clock.Now, count.add
	srv := serve(t, cfg)
	guesser, operator := peerClient(t, "127.0.0.1"), peerClient(t, "127.0.0.2")
	session := logIn(t, guesser, srv.URL) // an operator behind the guesser's address

	const tries = 2000
	refused, throttled := 0, 0
	for i := range tries {
		a := do(t, guesser, "GET", srv.URL+"/admin/config", "wrong-"+strconv.Itoa(i)+"-0123456789abcdef0123456789", nil)
		switch a.status {
		case http.StatusUnauthorized:
			refused++
		case http.StatusTooManyRequests:
			if throttled == 0 {
				throttledFor(t, a, "the 6th wrong token")
			}
			throttled++
		default:
			t.Fatalf("wrong token %d: got %d %s", i, a.status, a.body)
		}
		if i%500 == 0 {
			clock.Advance(time.Second) // still within the minute
		}
	}
	if refused != maxFailures || throttled != tries-maxFailures {
		t.Fatalf("got %d answered 401 and %d 429, want %d and %d", refused, throttled, maxFailures, tries-maxFailures)
	}
	if got, want := count.get(AuthWrong), maxFailures; got != want {
		t.Errorf("counted wrong: got %d, want %d", got, want)
	}
	if got, want := count.get(AuthThrottled), tries-maxFailures; got != want {
		t.Errorf("counted throttled: got %d, want %d", got, want)
	}
	throttledFor(t, do(t, guesser, "GET", srv.URL+"/admin/config", testToken, nil), "the right token from the guesser")
	// A session was had with the token before the guessing: it goes on
	// reading, and is no guess.
	if a := do(t, guesser, "GET", srv.URL+"/admin/status", "", nil, session); a.status != http.StatusOK {
		t.Fatalf("a live session from the guesser's address: got %d %s, want 200", a.status, a.body)
	}
	if a := do(t, operator, "GET", srv.URL+"/admin/config", testToken, nil); a.status != http.StatusOK {
		t.Fatalf("the right token from another peer: got %d %s, want 200", a.status, a.body)
	}
	if a := do(t, operator, "GET", srv.URL+"/healthz", "", nil); a.status != http.StatusOK {
		t.Fatalf("/healthz: got %d, want 200 (probes are never held back)", a.status)
	}
	clock.Advance(failureWindow)
	if a := do(t, guesser, "GET", srv.URL+"/admin/config", testToken, nil); a.status != http.StatusOK {
		t.Fatalf("the right token from the guesser a minute later: got %d %s, want 200", a.status, a.body)
	}
	if n := srv.Config.Handler.(*handler).guard.size(); n != 0 {
		t.Errorf("peers kept after the guesser's window ended and it got in: got %d, want 0", n)
	}
}

// The status page's login is counted with the bearer token: five wrong
// logins a minute, then 429 with Retry-After, the right token included;
// another peer logs in.
func TestLoginGuessingSlowed(t *testing.T) {
	clock := clocktest.New(time.Unix(1_700_000_000, 0))
	cfg := fullConfig(t, testToken)
	cfg.Clock = clock.Now
	srv := serve(t, cfg)
	guesser, operator := peerClient(t, "127.0.0.1"), peerClient(t, "127.0.0.3")
	for i := range 1000 {
		a := do(t, guesser, "POST", srv.URL+"/admin/login", "", url.Values{"token": {"guess-" + strconv.Itoa(i)}})
		if i < maxFailures {
			if a.status != http.StatusSeeOther || a.header.Get("Location") != statusPath+"?login=failed" {
				t.Fatalf("wrong login %d: got %d to %q, want 303 to %s?login=failed", i, a.status, a.header.Get("Location"), statusPath)
			}
			continue
		}
		throttledFor(t, a, "wrong login "+strconv.Itoa(i))
	}
	a := do(t, guesser, "POST", srv.URL+"/admin/login", "", url.Values{"token": {testToken}})
	throttledFor(t, a, "the right login from the guesser")
	if a.header.Get("X-Test-Cookie") != "" {
		t.Fatal("a throttled login set a cookie")
	}
	// The bearer token is held back too: one count for both.
	throttledFor(t, do(t, guesser, "GET", srv.URL+"/admin/status", testToken, nil), "the bearer token from the guesser")
	a = do(t, operator, "POST", srv.URL+"/admin/login", "", url.Values{"token": {testToken}})
	if a.status != http.StatusSeeOther || !strings.HasPrefix(a.header.Get("X-Test-Cookie"), sessionCookie+"=") {
		t.Fatalf("the right login from another peer: got %d, cookie %q, want 303 and a session", a.status, a.header.Get("X-Test-Cookie"))
	}
}

// A browser's throttled login (its form asks for text/html) gets the same
// 429 and Retry-After as a page that says why and leads back, not raw JSON.
func TestLoginThrottledPageForBrowsers(t *testing.T) {
	clock := clocktest.New(time.Unix(1_700_000_000, 0))
	cfg := fullConfig(t, testToken)
	cfg.Clock = clock.Now
	srv := serve(t, cfg)
	guesser := peerClient(t, "127.0.0.1")
	for i := range maxFailures {
		do(t, guesser, "POST", srv.URL+"/admin/login", "", url.Values{"token": {"guess-" + strconv.Itoa(i)}})
	}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/admin/login",
		strings.NewReader(url.Values{"token": {testToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	req.Header.Set("Origin", srv.URL)
	resp, err := guesser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("got %d, Retry-After %q, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("Content-Type %q, want text/html", ct)
	}
	for _, want := range []string{"Too many wrong tokens from this address: try again in", `href="` + statusPath + `"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("page %q lacks %q", body, want)
		}
	}
	if len(resp.Cookies()) > 0 {
		t.Error("a throttled login set a cookie")
	}
}

// The table of peers is bounded: when it is full of live entries a new
// peer waits (429) rather than evicting a guesser, and room comes back
// when the entries' minutes are over.
func TestGuardTableBounded(t *testing.T) {
	g := newGuard()
	now := time.Unix(1_700_000_000, 0)
	addr := func(i int) netip.Addr {
		return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	for i := range 3 * maxPeers {
		if g.wait(addr(i), now) == 0 {
			g.fail(addr(i), now)
		}
	}
	if n := g.size(); n != maxPeers {
		t.Fatalf("peers kept: got %d, want %d", n, maxPeers)
	}
	if w := g.wait(addr(3*maxPeers), now); w <= 0 {
		t.Fatal("a new peer with the table full of live entries: got no wait, want one")
	}
	for i := 1; i < maxFailures; i++ { // the fill counted one
		if w := g.wait(addr(0), now); w != 0 {
			t.Fatalf("a peer with %d failures waits %s, want 0", i, w)
		}
		g.fail(addr(0), now)
	}
	if w := g.wait(addr(0), now.Add(30*time.Second)); w != 30*time.Second {
		t.Fatalf("after %d failures, 30 s later: got a wait of %s, want 30s", maxFailures, w)
	}
	later := now.Add(failureWindow)
	if w := g.wait(addr(4*maxPeers), later); w != 0 {
		t.Fatalf("a new peer after every entry expired: got a wait of %s, want 0", w)
	}
	if n := g.size(); n != 0 {
		t.Fatalf("peers kept after the sweep: got %d, want 0", n)
	}
}

// IPv6 peers are counted by their /64; a port or zone does not matter.
func TestPeerOf(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"127.0.0.1:5555", "127.0.0.1"},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::"},
		{"[2001:db8:1:2:ffff::1]:1", "2001:db8:1:2::"},
		{"[::ffff:192.0.2.7]:80", "192.0.2.7"},
		{"not an address", "invalid IP"},
	} {
		if got := peerOf(c.in).String(); got != c.want {
			t.Errorf("peerOf(%q): got %s, want %s", c.in, got, c.want)
		}
	}
}
