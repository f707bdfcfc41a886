package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// A browser cannot send the token as a header, so the status page logs in:
// POST /admin/login with the token in a form sets a session cookie, and
// the cookie stands for the token on GET and HEAD requests only (reading),
// never on what changes state (reset, reload), which still needs the
// header. The cookie is HttpOnly (no script reads it), SameSite=Strict (no
// other site's page sends it), Secure when the listener serves TLS, and
// holds an expiry signed with a key made at start: it is never the token,
// and a restart ends every session. The token never travels in a URL.

const (
	sessionCookie = "gateway_admin_session"
	sessionTTL    = 12 * time.Hour
	// maxLoginBytes bounds the login form.
	maxLoginBytes = 4096
)

// newSession returns a cookie value that expires at exp.
func (h *handler) newSession(exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	return e + "." + hex.EncodeToString(h.sign(e))
}

func (h *handler) sign(s string) []byte {
	m := hmac.New(sha256.New, h.sessionKey[:])
	m.Write([]byte(s))
	return m.Sum(nil)
}

// sessionValid reports whether r carries one unexpired session cookie that
// this process signed.
func (h *handler) sessionValid(r *http.Request) bool {
	var val string
	n := 0
	for _, c := range r.Cookies() {
		if c.Name == sessionCookie {
			val, n = c.Value, n+1
		}
	}
	if n != 1 {
		return false
	}
	e, sig, ok := strings.Cut(val, ".")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, h.sign(e)) {
		return false
	}
	exp, err := strconv.ParseInt(e, 10, 64)
	return err == nil && h.now().Unix() < exp
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
	sum := sha256.Sum256([]byte(r.PostForm.Get("token")))
	if subtle.ConstantTimeCompare(sum[:], h.tokenSum[:]) != 1 {
		h.log.Info("admin: status page login refused", "remote", r.RemoteAddr)
		http.Redirect(w, r, statusPath+"?login=failed", http.StatusSeeOther)
		return
	}
	exp := h.now().Add(sessionTTL)
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: h.newSession(exp), Path: "/",
		Expires: exp, MaxAge: int(sessionTTL / time.Second),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	h.log.Info("admin: status page login", "remote", r.RemoteAddr)
	http.Redirect(w, r, statusPath, http.StatusSeeOther)
}

// serveLogout clears the session cookie.
func (h *handler) serveLogout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, "a logout must come from this listener's own page")
		return
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
