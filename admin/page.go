package admin

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"html"
	"net/http"
	"strconv"
	"strings"
)

// statusPath is the status page.
const statusPath = "/status"

// statusPage is the whole page: markup, style and script in one file,
// served as it is (no build step, nothing loaded from elsewhere). Its data
// comes from /admin/status and /admin/top, as any client reads them.
//
//go:embed page/status.html
var statusPage []byte

// pageCSP allows exactly the page's own inline script and style (by
// digest) and requests to this listener: an injected script or a
// reference to another site would not run.
var pageCSP = "default-src 'none'; script-src '" + inlineDigest("script") + "'; style-src '" + inlineDigest("style") +
	"'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// inlineDigest is the CSP source of the page's one <tag> element.
func inlineDigest(tag string) string {
	open, end := []byte("<"+tag+">"), []byte("</"+tag+">")
	i := bytes.Index(statusPage, open)
	j := bytes.Index(statusPage, end)
	if i < 0 || j < i {
		return "none"
	}
	sum := sha256.Sum256(statusPage[i+len(open) : j])
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
}

// servePage serves the status page. It holds no data, so it needs no
// token: the data it asks for does.
func (h *handler) servePage(w http.ResponseWriter, _ *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("Content-Security-Policy", pageCSP)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "same-origin") // "no-referrer" would make the login post's Origin "null"
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Content-Length", strconv.Itoa(len(statusPage)))
	w.WriteHeader(http.StatusOK)
	w.Write(statusPage)
}

// loginPath is where the status page's form posts the token.
const loginPath = "/admin/login"

// acceptsHTML reports whether r is a browser's navigation (a form post
// asks for text/html), which would show a JSON answer as raw text.
func acceptsHTML(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(v, "text/html") {
			return true
		}
	}
	return false
}

// writeLoginThrottled answers a browser's throttled login with a 429 page
// that says why and leads back to the status page; msg is the gateway's
// own text, escaped all the same.
func writeLoginThrottled(w http.ResponseWriter, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; base-uri 'none'; frame-ancestors 'none'")
	w.WriteHeader(http.StatusTooManyRequests)
	fmt.Fprintf(w, "<!doctype html><meta charset=utf-8><title>gateway status: log in later</title>"+
		"<h1>Log in later</h1><p>%s.</p><p><a href=\"%s\">Back to the status page</a></p>\n",
		html.EscapeString(strings.ToUpper(msg[:1])+msg[1:]), statusPath)
}
