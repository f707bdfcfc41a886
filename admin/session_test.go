package admin

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
)

// guardedReads are the endpoints a session cookie may read: every one
// needs a token.
var guardedReads = []string{
	"/metrics",
	"/admin/config",
	"/admin/keys?policy=per-ip&key=203.0.113.7/32",
	"/admin/top",
	"/admin/status",
	"/debug/pprof/",
}

// logIn logs in with the form from c and returns the session cookie.
func logIn(t *testing.T, c *http.Client, base string) *http.Cookie {
	t.Helper()
	a := do(t, c, "POST", base+"/admin/login", "", url.Values{"token": {testToken}})
	name, val, ok := strings.Cut(a.header.Get("X-Test-Cookie"), "=")
	if a.status != http.StatusSeeOther || !ok || name != sessionCookie || val == "" {
		t.Fatalf("login: got %d, cookie %q, want 303 and a session", a.status, a.header.Get("X-Test-Cookie"))
	}
	return &http.Cookie{Name: name, Value: val}
}

// After a logout the old cookie is refused (401) on every admin endpoint,
// though it has not expired and is still signed; another session is not
// touched.
func TestLogoutEndsTheSession(t *testing.T) {
	clock := clocktest.New(time.Unix(1_700_000_000, 0))
	cfg := fullConfig(t, testToken)
	cfg.Clock, cfg.Pprof = clock.Now, true
	srv := serve(t, cfg)
	c := peerClient(t, "127.0.0.1")
	old, other := logIn(t, c, srv.URL), logIn(t, c, srv.URL)
	for _, p := range guardedReads {
		if a := do(t, c, "GET", srv.URL+p, "", nil, old); a.status == http.StatusUnauthorized {
			t.Fatalf("GET %s with the session before logout: got 401, want it served", p)
		}
	}
	a := do(t, c, "POST", srv.URL+"/admin/logout", "", nil, old)
	if a.status != http.StatusSeeOther {
		t.Fatalf("logout: got %d %s, want 303", a.status, a.body)
	}
	for _, p := range guardedReads {
		for _, m := range []string{"GET", "HEAD"} {
			if a := do(t, c, m, srv.URL+p, "", nil, old); a.status != http.StatusUnauthorized {
				t.Errorf("%s %s with the session after logout: got %d, want 401", m, p, a.status)
			}
		}
	}
	for _, ep := range []struct{ method, path string }{{"DELETE", guardedReads[2]}, {"POST", "/admin/reload"}} {
		if a := do(t, c, ep.method, srv.URL+ep.path, "", nil, old); a.status != http.StatusUnauthorized {
			t.Errorf("%s %s with the session after logout: got %d, want 401", ep.method, ep.path, a.status)
		}
	}
	if a := do(t, c, "GET", srv.URL+"/admin/config", "", nil, other); a.status != http.StatusOK {
		t.Errorf("another session after the logout: got %d, want 200", a.status)
	}
	// A refused session cookie is not a guess: the operator is not held
	// back by a page that still polls with it.
	if a := do(t, c, "GET", srv.URL+"/admin/config", testToken, nil); a.status != http.StatusOK {
		t.Errorf("the bearer token after %d requests with a revoked cookie: got %d, want 200", 2*len(guardedReads)+2, a.status)
	}
}

// A session lasts admin.session_ttl: the cookie says so, and the server
// refuses it once it is over.
func TestSessionTTL(t *testing.T) {
	clock := clocktest.New(time.Unix(1_700_000_000, 0))
	cfg := fullConfig(t, testToken)
	cfg.Clock, cfg.SessionTTL = clock.Now, time.Hour
	srv := serve(t, cfg)
	c := peerClient(t, "127.0.0.1")
	resp := do(t, c, "POST", srv.URL+"/admin/login", "", url.Values{"token": {testToken}})
	if resp.status != http.StatusSeeOther {
		t.Fatalf("login: got %d", resp.status)
	}
	if got := resp.header.Values("Set-Cookie"); len(got) != 1 || !strings.Contains(got[0], "Max-Age=3600") {
		t.Fatalf("Set-Cookie: got %q, want Max-Age=3600", got)
	}
	k := logIn(t, c, srv.URL)
	clock.Advance(time.Hour - time.Second)
	if a := do(t, c, "GET", srv.URL+"/admin/config", "", nil, k); a.status != http.StatusOK {
		t.Fatalf("a second before the hour is over: got %d, want 200", a.status)
	}
	clock.Advance(time.Second)
	if a := do(t, c, "GET", srv.URL+"/admin/config", "", nil, k); a.status != http.StatusUnauthorized {
		t.Fatalf("when the hour is over: got %d, want 401", a.status)
	}
}

// The revocation list is bounded: expired entries go, and when it is full
// of live ones the key is made anew, which ends every session.
func TestRevocationListBounded(t *testing.T) {
	s, err := newSessions(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	keep, _ := s.issue(now)
	for range maxRevoked {
		val, _ := s.issue(now)
		id, exp, ok := s.check(val, now)
		if !ok {
			t.Fatal("a new session does not check")
		}
		s.revoke(id, exp, now)
	}
	if _, _, ok := s.check(keep, now); !ok {
		t.Fatal("a session not revoked was ended before the list was full")
	}
	val, _ := s.issue(now)
	id, exp, _ := s.check(val, now)
	s.revoke(id, exp, now) // one more than the list holds
	if _, _, ok := s.check(keep, now); ok {
		t.Fatal("the list overflowed and the other sessions still check, want every session ended")
	}
	if n := len(s.revoked); n != 0 {
		t.Fatalf("revoked entries after the key changed: got %d, want 0", n)
	}
	// Expired entries make room before the key is changed.
	later := now.Add(time.Hour)
	keep, _ = s.issue(later)
	for range maxRevoked + 10 {
		val, _ := s.issue(later)
		id, exp, _ := s.check(val, later)
		s.revoke(id, exp, later)
		later = later.Add(time.Hour / maxRevoked) // the oldest expire as new ones come
	}
	if _, _, ok := s.check(keep, now.Add(time.Hour+time.Minute)); !ok {
		t.Fatal("expired entries did not make room: the key was changed")
	}
}
