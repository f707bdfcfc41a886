package admin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A browser cannot send the token as a header, so the status page logs in:
// POST /admin/login with the token in a form sets a session cookie, and
// the cookie stands for the token on GET and HEAD requests only (reading),
// never on what changes state (reset, reload), which still needs the
// header. The cookie is HttpOnly (no script reads it), SameSite=Strict (no
// other site's page sends it), Secure when the listener serves TLS, and
// holds a random id and an expiry signed with a key made at start: it is
// never the token, and a restart ends every session. A logout puts the id
// on a revocation list kept until the session would have expired; sessions
// belong to one process, so the list lives in its memory. The token never
// travels in a URL.

const (
	sessionCookie = "gateway_admin_session"
	// maxLoginBytes bounds the login form.
	maxLoginBytes = 4096
	// maxRevoked bounds the revocation list. Only a logout with a valid
	// session adds to it; when it is full of live entries the signing key
	// is made anew, which ends every session and empties the list.
	maxRevoked = 10000
)

// sessions signs, checks and revokes the status page's session cookies. It
// is safe for concurrent use.
type sessions struct {
	ttl time.Duration

	mu      sync.Mutex
	key     [32]byte             // guarded by mu
	revoked map[string]time.Time // guarded by mu: id -> the session's expiry
}

func newSessions(ttl time.Duration) (*sessions, error) {
	s := &sessions{ttl: ttl, revoked: make(map[string]time.Time)}
	if _, err := rand.Read(s.key[:]); err != nil {
		return nil, fmt.Errorf("making the session key: %w", err)
	}
	return s, nil
}

// issue returns a new session's cookie value and its expiry.
func (s *sessions) issue(now time.Time) (string, time.Time) {
	var id [16]byte
	rand.Read(id[:]) // never returns an error (crypto/rand)
	exp := now.Add(s.ttl)
	payload := hex.EncodeToString(id[:]) + "." + strconv.FormatInt(exp.Unix(), 10)
	s.mu.Lock()
	defer s.mu.Unlock()
	return payload + "." + hex.EncodeToString(s.sign(payload)), exp
}

// sign is the payload's MAC; s.mu is held.
func (s *sessions) sign(payload string) []byte {
	m := hmac.New(sha256.New, s.key[:])
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// check reports the id and expiry of val when this process signed it, it
// has not expired at now and it was not revoked.
func (s *sessions) check(val string, now time.Time) (id string, exp time.Time, ok bool) {
	i := strings.LastIndexByte(val, '.')
	if i < 0 {
		return "", time.Time{}, false
	}
	payload, sig := val[:i], val[i+1:]
	id, e, found := strings.Cut(payload, ".")
	got, err := hex.DecodeString(sig)
	if !found || err != nil {
		return "", time.Time{}, false
	}
	unix, err := strconv.ParseInt(e, 10, 64)
	if err != nil || now.Unix() >= unix {
		return "", time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !hmac.Equal(got, s.sign(payload)) {
		return "", time.Time{}, false
	}
	if _, gone := s.revoked[id]; gone {
		return "", time.Time{}, false
	}
	return id, time.Unix(unix, 0), true
}

// revoke ends the session id, which expires at exp.
func (s *sessions) revoke(id string, exp, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.revoked) >= maxRevoked {
		for k, e := range s.revoked {
			if !now.Before(e) {
				delete(s.revoked, k)
			}
		}
	}
	if len(s.revoked) >= maxRevoked {
		// A new key ends every session, so none needs revoking any more.
		rand.Read(s.key[:])
		clear(s.revoked)
		return
	}
	s.revoked[id] = exp
}

// sessionCookieValue is r's one session cookie; false when it has none or
// several.
func sessionCookieValue(r *http.Request) (string, bool) {
	var val string
	n := 0
	for _, c := range r.Cookies() {
		if c.Name == sessionCookie {
			val, n = c.Value, n+1
		}
	}
	return val, n == 1
}

// sessionValid reports whether r carries one live session cookie that
// this process signed.
func (h *handler) sessionValid(r *http.Request) bool {
	val, ok := sessionCookieValue(r)
	if !ok {
		return false
	}
	_, _, ok = h.sessions.check(val, h.now())
	return ok
}

// serveLogin checks the form's token and, when it is right, sets the
// session cookie; either way it sends the browser back to the page
// (303), which says whether the login failed.
func (h *handler) serveLogin(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "a login must come from this listener's own page")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBytes)
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "the login form does not parse: "+err.Error())
		return
	}
	if len(r.PostForm["token"]) != 1 || len(r.URL.RawQuery) > 0 {
		writeError(w, http.StatusBadRequest, "the login form takes one field, token, in the body (never in the URL)")
		return
	}
	if !h.tokenMatches(r.PostForm.Get("token")) {
		h.failed(r)
		http.Redirect(w, r, statusPath+"?login=failed", http.StatusSeeOther)
		return
	}
	val, exp := h.sessions.issue(h.now())
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: val, Path: "/",
		Expires: exp, MaxAge: int(h.sessions.ttl / time.Second),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	h.log.Info("admin: status page login", "remote", r.RemoteAddr)
	http.Redirect(w, r, statusPath, http.StatusSeeOther)
}

// serveLogout ends the session r carries, if it is live, and clears the
// cookie.
func (h *handler) serveLogout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "a logout must come from this listener's own page")
		return
	}
	if val, ok := sessionCookieValue(r); ok {
		now := h.now()
		if id, exp, live := h.sessions.check(val, now); live {
			h.sessions.revoke(id, exp, now)
			h.log.Info("admin: status page logout", "remote", r.RemoteAddr)
		}
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, statusPath, http.StatusSeeOther)
}

// sameOrigin reports whether a form post came from this listener's own
// page: browsers send Origin on every POST, and a cross-site one names
// another host. A request without Origin (curl) is not a browser's.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}
