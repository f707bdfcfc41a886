package proxy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy/idempotency"
)

// maxIdempotencyKey bounds the client's key: Stripe's limit, and more than a
// UUID needs.
const maxIdempotencyKey = 255

// hdrReplayed marks a response replayed from a stored record.
const hdrReplayed = "Idempotent-Replayed"

// idemRequest is a request subject to its route's idempotency.
type idemRequest struct {
	cfg *policies.Idempotency
	// clientKey is the client's idempotency key, as sent.
	clientKey string
	// fp is the request's fingerprint: method, path, query and body.
	fp [32]byte
	// who is the caller the key belongs to (see scope).
	who string
	// key is the store's key: route, caller, method, path and the client's
	// key; set once the client is identified.
	key string
}

// readIdempotency returns the idempotency of r on route, nil when none
// applies, with r's body held (see readBody) so that it can be
// fingerprinted and then forwarded; on an llm route the body the call
// step already read is used, not read again. A problem is an HTTP status and a
// message.
func readIdempotency(w http.ResponseWriter, r *http.Request, route *policies.Route) (*http.Request, *idemRequest, int, string) {
	cfg := route.Idempotency
	if !cfg.Applies(r.Method) {
		return r, nil, 0, ""
	}
	vs := r.Header[cfg.Header]
	switch {
	case len(vs) == 0 && cfg.Required:
		return r, nil, http.StatusBadRequest, fmt.Sprintf("this route needs an %s header on %s requests", cfg.Header, r.Method)
	case len(vs) == 0:
		return r, nil, 0, ""
	case len(vs) > 1:
		return r, nil, http.StatusBadRequest, fmt.Sprintf("the %s header must be sent once", cfg.Header)
	case !validIdempotencyKey(vs[0]):
		return r, nil, http.StatusBadRequest, fmt.Sprintf("the %s header must be 1 to %d visible ASCII characters", cfg.Header, maxIdempotencyKey)
	}
	r, body, status, msg := readBody(w, r, route)
	if status != 0 {
		return r, nil, status, msg
	}
	h := sha256.New()
	for _, s := range []string{r.Method, r.URL.Path, r.URL.RawQuery} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(body)
	idem := &idemRequest{cfg: cfg, clientKey: vs[0]}
	h.Sum(idem.fp[:0])
	return r, idem, 0, ""
}

func validIdempotencyKey(k string) bool {
	if k == "" || len(k) > maxIdempotencyKey {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// scope keys idem by the route and the caller that could have produced its
// response: the tenant of a known API key or verified JWT; a JWT without a
// tenant by the digest of its sub (callers behind one address must not
// share responses); an unknown key by its digest (it is never stored as
// sent, and a key nobody knows must not share a keyless client's
// responses); no key by the client network. Two tenants, two
// routes, or a keyed and a keyless caller may use the same client key.
func (idem *idemRequest) scope(route *policies.Route, r *http.Request, s *policies.Subject) {
	switch {
	case s.Tenant != nil:
		idem.who = "tenant:" + s.Tenant.Name
	case s.Credential == policies.CredentialJWT && jwtSubject(s) != "":
		idem.who = "sub:" + policies.KeyDigest(jwtSubject(s))
	case s.APIKey != "":
		idem.who = "key:" + policies.KeyDigest(s.APIKey)
	default:
		idem.who = "ip:" + s.ClientNet.String()
	}
	idem.key = "route:" + route.Name + "\x00" + idem.who + "\x00" + r.Method + "\x00" + r.URL.Path + "\x00" + idem.clientKey
}

// needsKey reports whether idem is refused for want of a known API key: its
// route keeps responses for tenants only (require_api_key).
func (idem *idemRequest) needsKey(s *policies.Subject) bool {
	return idem.cfg.RequireAPIKey && s.Tenant == nil
}

// claimIdempotency claims idem's key for r. It returns the hold when r is to
// be forwarded (nil with FailOpen when the store failed); otherwise it has
// answered r (a replay, 409, 422, 503, or nothing to a client gone) and
// returns answered.
func (h *Handler) claimIdempotency(w http.ResponseWriter, r *http.Request, route *policies.Route, v limiter.Verdict, idem *idemRequest) (hold idempotency.Owner, answered bool) {
	cfg := idem.cfg
	terms := idempotency.Terms{LockTTL: cfg.LockTTL, ReplayTTL: cfg.ReplayTTL}
	claim, err := h.idempotency.Begin(r.Context(), idem.key, terms)
	if err == nil && claim.Busy() && cfg.Wait {
		claim, err = h.waitIdempotency(r, idem, terms)
	}
	routeAttr := slog.String("route", route.Name)
	switch {
	case err != nil && r.Context().Err() != nil:
		h.logAnswer(r.Context(), r, statusClientClosed, "client left while waiting for its idempotency key", routeAttr)
		w.WriteHeader(statusClientClosed)
		return nil, true
	case err != nil && cfg.FailOpen:
		h.log.Warn("idempotency store failed; forwarding without the key's protection (on_redis_error: allow)", "route", route.Name, "err", err)
		return nil, false
	case err != nil:
		setRateLimitHeaders(w.Header(), v, route.RateLimitHeaders)
		w.Header()[hdrRetryAfter] = []string{"1"}
		h.writeError(w, r, http.StatusServiceUnavailable, errorBody{
			Message: fmt.Sprintf("the %s of this request cannot be checked right now; try again shortly", cfg.Header),
		}, routeAttr, slog.Any("err", err))
		return nil, true
	case claim.Owner != nil:
		return claim.Owner, false
	case claim.Record == nil: // busy
		setRateLimitHeaders(w.Header(), v, route.RateLimitHeaders)
		w.Header()[hdrRetryAfter] = []string{"1"}
		msg := fmt.Sprintf("a request with this %s is in progress; retry after it finishes", cfg.Header)
		if cfg.Wait {
			msg = fmt.Sprintf("a request with this %s is still in progress after %s; retry after it finishes", cfg.Header, cfg.MaxWait)
		}
		h.writeError(w, r, http.StatusConflict, errorBody{Message: msg}, routeAttr)
		return nil, true
	case claim.Record.Fingerprint != idem.fp:
		setRateLimitHeaders(w.Header(), v, route.RateLimitHeaders)
		h.writeError(w, r, http.StatusUnprocessableEntity, errorBody{
			Message: fmt.Sprintf("this %s was used with a different request (method, path, query or body); use a new key", cfg.Header),
		}, routeAttr)
		return nil, true
	case claim.Record.Partial:
		setRateLimitHeaders(w.Header(), v, route.RateLimitHeaders)
		h.writeError(w, r, http.StatusConflict, errorBody{
			Message: fmt.Sprintf("the request with this %s was completed (status %d), but its response was not kept to be replayed",
				cfg.Header, claim.Record.Status),
		}, routeAttr)
		return nil, true
	}
	replay(w, claim.Record, v, route.RateLimitHeaders)
	return nil, true
}

// waitIdempotency waits, up to the route's max_wait, for the holder of
// idem's key to finish, and claims the key again each time it may have.
// The result is busy when the wait ran out; an error when the client left.
func (h *Handler) waitIdempotency(r *http.Request, idem *idemRequest, terms idempotency.Terms) (idempotency.Claim, error) {
	ctx, cancel := context.WithTimeout(r.Context(), idem.cfg.MaxWait)
	defer cancel()
	for {
		if err := h.idempotency.Wait(ctx, idem.key); err != nil {
			if r.Context().Err() != nil {
				return idempotency.Claim{}, r.Context().Err()
			}
			return idempotency.Claim{}, nil // max_wait passed: still busy
		}
		claim, err := h.idempotency.Begin(r.Context(), idem.key, terms)
		if err != nil || !claim.Busy() {
			return claim, err
		}
	}
}

// replay answers with a stored response: its status, kept headers and body,
// the rate-limit headers of this request's own verdict, and
// Idempotent-Replayed: true.
func replay(w http.ResponseWriter, rec *idempotency.Record, v limiter.Verdict, set policies.RateLimitHeaders) {
	hdr := w.Header()
	for name, vs := range rec.Header {
		hdr[name] = vs
	}
	setRateLimitHeaders(hdr, v, set)
	hdr[hdrReplayed] = []string{"true"}
	hdr["Content-Length"] = []string{strconv.Itoa(len(rec.Body))}
	w.WriteHeader(rec.Status)
	w.Write(rec.Body)
}

// idemState is what forwarding an idempotent request keeps: the hold, and
// the response as it passes.
type idemState struct {
	req  *idemRequest
	hold idempotency.Owner
	// status and header are the upstream response's; status is 0 until one
	// arrived.
	status int
	header http.Header
	body   *teeBody
}

// capture keeps resp's status, chosen headers and (through its body, up to
// the cap) what the record of the request will hold.
func (s *idemState) capture(resp *http.Response) {
	s.status = resp.StatusCode
	s.header = http.Header{}
	for _, name := range s.req.cfg.ReplayHeaders {
		if vs := resp.Header[name]; len(vs) > 0 {
			s.header[name] = vs
		}
	}
	switch {
	case resp.StatusCode == http.StatusSwitchingProtocols:
		// The body is a connection: nothing to keep.
	case resp.Body == nil || resp.Body == http.NoBody:
		s.body = &teeBody{eof: true}
	default:
		s.body = &teeBody{ReadCloser: resp.Body, max: s.req.cfg.MaxResponseBytes}
		resp.Body = s.body
	}
}

// finish stores the request's record and releases the key, or releases it
// without a record when the upstream failed (no response, or a 5xx) so that
// the client may retry.
func (s *idemState) finish(ctx context.Context, log *slog.Logger, route string) {
	ctx = context.WithoutCancel(ctx) // the client may have gone; the key must still be settled
	if s.status == 0 || s.status >= 500 {
		if err := s.hold.Abort(ctx); err != nil && !errors.Is(err, idempotency.ErrLost) {
			log.Warn("releasing an idempotency key", "route", route, "err", err)
		}
		return
	}
	rec := &idempotency.Record{Fingerprint: s.req.fp, Status: s.status, Header: s.header}
	if s.body != nil && s.body.complete() {
		rec.Body = s.body.buf
	} else {
		rec.Partial = true
	}
	switch err := s.hold.Complete(ctx, rec); {
	case errors.Is(err, idempotency.ErrLost):
		// Another request holds the key now (ours expired while the
		// upstream worked): its record will be the one kept.
		log.Warn("idempotency key lost while its request was upstream; its response is not kept",
			"route", route, "fence", s.hold.Fence())
	case err != nil:
		log.Warn("storing an idempotent response", "route", route, "err", err)
	}
}
