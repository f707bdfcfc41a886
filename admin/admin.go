// Package admin is the gateway's admin listener: liveness and readiness
// probes, the metrics exposition, profiling, an API to read the
// configuration in force, read and reset one key of one policy, reload the
// configuration, see each policy's most refused keys and the instance's
// status, and the status page that reads that API. It serves what
// cmd/gateway hands it and owns nothing but the status page's sessions
// (their key and revocations) and the count of wrong tokens per peer: no
// listener, no limiter state; History's Run is its caller's goroutine.
//
// /healthz, /readyz and the page itself (which holds no data) are always
// open. Everything else needs "Authorization: Bearer <token>" once a token
// is configured, or, to read, the session cookie the page's login sets; the
// /admin/ API needs a token to be configured at all. A peer that sent five
// wrong tokens in a minute is answered 429 until that minute is over (a
// live session still reads: it was had with the token). Every
// answer of its own is JSON; errors are {"code": status*100, "message":
// "..."}, as the proxy's.
package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof" // its init also registers on http.DefaultServeMux, which the gateway never serves
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// Config is what the admin handler serves. Each field says what its zero
// value means.
type Config struct {
	// Token, when set, is required as "Authorization: Bearer <token>" by
	// everything but /healthz and /readyz. "" means no token: /metrics is
	// open and the /admin/ API answers 403. It must be visible ASCII (it
	// travels in a header) and at least policies.MinAdminTokenLen long.
	Token string
	// SessionTTL is how long a status page login lasts; zero means
	// policies.DefaultSessionTTL.
	SessionTTL time.Duration
	// OnAuthFailure, when set, is called for each refused credential
	// (gateway_admin_auth_failures_total); it may be called concurrently.
	OnAuthFailure func(AuthFailure)
	// Pprof serves net/http/pprof under /debug/pprof/; it needs Token.
	Pprof bool
	// Metrics serves /metrics; nil answers 404.
	Metrics http.Handler
	// Ready says whether the gateway should receive traffic: nil or a nil
	// error is ready, an error is not, and its text is the reason /readyz
	// gives. It is called on every probe, concurrently, and should answer
	// at once (from state kept up to date elsewhere): a probe waits for it.
	Ready func() error
	// Snapshots holds the configuration in force (*policies.Current);
	// required.
	Snapshots interface{ Load() *policies.Snapshot }
	// Keys reads and resets keys (EngineKeys); nil answers 501 on
	// /admin/keys.
	Keys Keys
	// Reload loads the configuration again and puts it in force, returning
	// the load's error (a *policies.ValidationError names file and place)
	// or nil. It may be called concurrently. Nil answers 501 on
	// /admin/reload.
	Reload func() error
	// Logger receives the API's actions (resets, reloads); nil means
	// slog.Default().
	Logger *slog.Logger
	// Top holds each policy's most refused keys (a *topk.Set); nil
	// answers 501 on /admin/top.
	Top Top
	// Gatherer is the metrics registry /admin/status reads its numbers
	// from, so that they are /metrics's; nil shows no counts.
	Gatherer prometheus.Gatherer
	// History is the request counters sampled over the last minutes (its
	// Run is the caller's to start); nil shows no chart.
	History *History
	// Clock tells the time to the status page's sessions and to the count
	// of failed tokens; nil means time.Now.
	Clock func() time.Time
}

// Keys reads and resets one key of one policy, on whichever backend the
// policy uses. Implementations are safe for concurrent use.
type Keys interface {
	// Peek reports c's state without taking anything.
	Peek(ctx context.Context, c limiter.Check) (limiter.Decision, error)
	// Reset makes c's key start afresh under c's policy at c.Limit.
	Reset(ctx context.Context, c limiter.Check) error
}

// EngineKeys is Keys over a limiter.Engine: local buckets and in-flight
// counts in-process, shared policies on the Engine's Redis backend. Engine
// is required.
type EngineKeys struct {
	Engine *limiter.Engine
}

var _ Keys = EngineKeys{}

// Peek implements Keys with Engine.PeekOne.
func (k EngineKeys) Peek(ctx context.Context, c limiter.Check) (limiter.Decision, error) {
	return k.Engine.PeekOne(ctx, c)
}

// Reset implements Keys with Engine.Reset.
func (k EngineKeys) Reset(ctx context.Context, c limiter.Check) error {
	return k.Engine.Reset(ctx, c)
}

// noTokenMessage is the 403 of the /admin/ API without a configured token.
const noTokenMessage = "the admin API needs admin.token (GATEWAY_ADMIN_TOKEN)"

// access says who may call an endpoint.
type access int

const (
	open      access = iota // never needs the token: probes
	withToken               // needs the token when one is configured
	adminOnly               // needs a configured token, and the token
	login                   // needs a configured token; checks the one it is sent
)

// endpoint is one path the handler serves.
type endpoint struct {
	methods []string // GET implies HEAD
	access  access
	serve   http.HandlerFunc
}

// handler serves the admin listener. It is safe for concurrent use.
type handler struct {
	cfg      Config
	tokenSum [sha256.Size]byte // of cfg.Token: compared in constant time whatever the length
	log      *slog.Logger
	paths    map[string]*endpoint
	pprof    *endpoint // /debug/pprof/ and below; nil when off
	sessions *sessions
	guard    *guard
	now      func() time.Time
}

// New returns the admin handler for cfg. It refuses a Config without
// Snapshots, Pprof without a Token, a Token that cannot travel in a header
// and one short enough to guess.
func New(cfg Config) (http.Handler, error) {
	if cfg.Snapshots == nil {
		return nil, errors.New("creating admin handler: nil Snapshots")
	}
	if cfg.Pprof && cfg.Token == "" {
		return nil, errors.New("creating admin handler: pprof needs a token")
	}
	for i := 0; i < len(cfg.Token); i++ {
		if c := cfg.Token[i]; c <= ' ' || c > '~' {
			return nil, errors.New("creating admin handler: the token must be visible ASCII (no spaces or control characters)")
		}
	}
	if n := len(cfg.Token); n > 0 && n < policies.MinAdminTokenLen {
		return nil, fmt.Errorf("creating admin handler: the token must be at least %d characters, got %d", policies.MinAdminTokenLen, n)
	}
	if cfg.SessionTTL < 0 {
		return nil, fmt.Errorf("creating admin handler: negative session TTL %s", cfg.SessionTTL)
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = policies.DefaultSessionTTL
	}
	sess, err := newSessions(cfg.SessionTTL)
	if err != nil {
		return nil, fmt.Errorf("creating admin handler: %w", err)
	}
	h := &handler{cfg: cfg, tokenSum: sha256.Sum256([]byte(cfg.Token)), log: cfg.Logger, now: cfg.Clock,
		sessions: sess, guard: newGuard()}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.now == nil {
		h.now = time.Now
	}
	get := []string{http.MethodGet}
	h.paths = map[string]*endpoint{
		"/healthz":      {get, open, h.serveHealth},
		"/readyz":       {get, open, h.serveReady},
		"/metrics":      {get, withToken, h.serveMetrics},
		"/admin/config": {get, adminOnly, h.serveConfig},
		"/admin/keys":   {[]string{http.MethodGet, http.MethodDelete}, adminOnly, h.serveKeys},
		"/admin/reload": {[]string{http.MethodPost}, adminOnly, h.serveReload},
		"/admin/top":    {get, adminOnly, h.serveTop},
		"/admin/status": {get, adminOnly, h.serveStatus},
		loginPath:       {[]string{http.MethodPost}, login, h.serveLogin},
		"/admin/logout": {[]string{http.MethodPost}, open, h.serveLogout},
		statusPath:      {get, open, h.servePage},
	}
	if cfg.Pprof {
		mux := http.NewServeMux() // never http.DefaultServeMux
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		h.pprof = &endpoint{[]string{http.MethodGet, http.MethodPost}, withToken, mux.ServeHTTP}
	}
	return h, nil
}

// ServeHTTP finds the endpoint (404), checks the method (405), the peer's
// recent failures (429) and the token (403, 401), in that order, then
// serves.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ep := h.paths[r.URL.Path]
	if ep == nil && h.pprof != nil && strings.HasPrefix(r.URL.Path, "/debug/pprof/") {
		ep = h.pprof
	}
	if ep == nil {
		writeError(w, http.StatusNotFound, "no such admin endpoint: "+strconv.Quote(r.URL.Path)+
			" (see /healthz, /readyz, /metrics, /status, /admin/config, /admin/keys, /admin/reload, /admin/top, /admin/status)")
		return
	}
	if !allows(ep.methods, r.Method) {
		allow := slices.Clone(ep.methods)
		if slices.Contains(allow, http.MethodGet) {
			allow = append(allow, http.MethodHead)
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, r.Method+" is not allowed here; use "+strings.Join(allow, " or "))
		return
	}
	switch {
	case ep.access == open:
	case (ep.access == adminOnly || ep.access == login) && h.cfg.Token == "":
		h.log.Debug("admin: refused, no token configured", "path", r.URL.Path, "remote", r.RemoteAddr)
		writeError(w, http.StatusForbidden, noTokenMessage)
		return
	case h.cfg.Token == "":
	case ep.access != login && len(r.Header.Values("Authorization")) == 0 && h.authorized(r) == granted:
		// A live session was had with the token before: no guess, so the
		// page of an operator who shares an address with a guesser goes on.
	case h.throttled(w, r):
		return
	case ep.access == login: // serveLogin checks the form's token
	default:
		switch h.authorized(r) {
		case granted:
		case wrong:
			h.failed(r)
			fallthrough
		default:
			h.log.Debug("admin: refused, missing or wrong token", "path", r.URL.Path, "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeError(w, http.StatusUnauthorized, "this endpoint needs Authorization: Bearer <admin.token>")
			return
		}
	}
	ep.serve(w, r)
}

// throttled answers 429 with Retry-After, and reports true, when r's peer
// failed too often lately (see guard).
func (h *handler) throttled(w http.ResponseWriter, r *http.Request) bool {
	wait := h.guard.wait(peerOf(r.RemoteAddr), h.now())
	if wait <= 0 {
		return false
	}
	if h.cfg.OnAuthFailure != nil {
		h.cfg.OnAuthFailure(AuthThrottled)
	}
	secs := int64((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	msg := fmt.Sprintf("too many wrong tokens from this address: try again in %d s", secs)
	if r.URL.Path == loginPath && acceptsHTML(r) {
		writeLoginThrottled(w, msg)
		return true
	}
	writeError(w, http.StatusTooManyRequests, msg)
	return true
}

// failed counts a wrong token from r's peer, and logs it: at most
// maxFailures a minute for each peer, the rest being throttled.
func (h *handler) failed(r *http.Request) {
	h.log.Warn("admin: wrong token", "path", r.URL.Path, "remote", r.RemoteAddr)
	h.guard.fail(peerOf(r.RemoteAddr), h.now())
	if h.cfg.OnAuthFailure != nil {
		h.cfg.OnAuthFailure(AuthWrong)
	}
}

// allows reports whether method may call an endpoint of methods; GET
// implies HEAD.
func allows(methods []string, method string) bool {
	if method == http.MethodHead {
		method = http.MethodGet
	}
	return slices.Contains(methods, method)
}

// credential is what authorized found.
type credential int

const (
	missing credential = iota // no Authorization, and no live session to read with
	wrong                     // an Authorization that is not the token: counted
	granted
)

// authorized reports whether r carries exactly one "Authorization: Bearer
// <token>" with the configured token, or, to read (GET, HEAD), the status
// page's session cookie.
func (h *handler) authorized(r *http.Request) credential {
	vals := r.Header.Values("Authorization")
	if len(vals) == 0 {
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && h.sessionValid(r) {
			return granted
		}
		return missing
	}
	if len(vals) != 1 {
		return wrong
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || !h.tokenMatches(strings.TrimLeft(token, " ")) {
		return wrong
	}
	return granted
}

// tokenMatches reports whether token is the configured one. Digests are
// compared, so the time taken tells nothing about the token, not even its
// length.
func (h *handler) tokenMatches(token string) bool {
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], h.tokenSum[:]) == 1
}

func (h *handler) serveHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyBody is /readyz's answer.
type readyBody struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

func (h *handler) serveReady(w http.ResponseWriter, _ *http.Request) {
	if h.cfg.Ready != nil {
		if err := h.cfg.Ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, readyBody{Status: "not ready", Reason: err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, readyBody{Status: "ready"})
}

func (h *handler) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Metrics == nil {
		writeError(w, http.StatusNotFound, "this gateway serves no metrics")
		return
	}
	h.cfg.Metrics.ServeHTTP(w, r)
}

// reloadBody is /admin/reload's answer.
type reloadBody struct {
	Reloaded bool   `json:"reloaded"`
	Source   string `json:"source"`
	Digest   string `json:"digest"`
}

// reloadError is /admin/reload's 422: the load's error, and each of its
// problems ("file: place: message") on its own.
type reloadError struct {
	Code     int      `json:"code"`
	Message  string   `json:"message"`
	Problems []string `json:"problems,omitempty"`
}

func (h *handler) serveReload(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Reload == nil {
		writeError(w, http.StatusNotImplemented, "this gateway cannot reload from the admin API")
		return
	}
	if err := h.cfg.Reload(); err != nil {
		h.log.Warn("admin: reload failed, the configuration in force is kept", "remote", r.RemoteAddr, "error", err)
		body := reloadError{Code: http.StatusUnprocessableEntity * 100, Message: err.Error()}
		for _, fe := range policies.FieldErrors(err) {
			body.Problems = append(body.Problems, fe.Error())
		}
		writeJSON(w, http.StatusUnprocessableEntity, body)
		return
	}
	body := reloadBody{Reloaded: true}
	if snap := h.cfg.Snapshots.Load(); snap != nil {
		body.Source, body.Digest = snap.Source, digestHex(snap.Digest)
	}
	h.log.Info("admin: configuration reloaded", "remote", r.RemoteAddr, "source", body.Source, "digest", body.Digest)
	writeJSON(w, http.StatusOK, body)
}

// digestHex renders a snapshot's digest; "" for the zero digest of a
// snapshot built in memory.
func digestHex(d [32]byte) string {
	if d == ([32]byte{}) {
		return ""
	}
	return hex.EncodeToString(d[:])
}

// errorBody is every error the handler answers itself, as the proxy's.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Code: status * 100, Message: msg})
}

// writeJSON answers status with v as JSON. Answers are not cached: they say
// how things are now. HTML characters are left as they are (a message says
// "<admin.token>"): the answer is never HTML, and says so with nosniff.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // the handler's own types always encode
		status = http.StatusInternalServerError
		buf.Reset()
		enc.Encode(errorBody{Code: status * 100, Message: "encoding the answer failed: " + err.Error()})
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}
