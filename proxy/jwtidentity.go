package proxy

import (
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/jwtauth"
	"github.com/ratelimit-gateway/gateway/policies"
)

// tokens verifies the bearer JWTs of tenants.jwt. A nil *tokens (Explain
// without one) verifies HMAC tokens only: it has no signing keys.
type tokens struct {
	v   *jwtauth.Verifier
	now func() time.Time
}

// hmacOnly verifies without signing keys, for a Handler or Explain given
// no verifier: a token signed with a key pair is refused (unknown_kid).
var hmacOnly = &tokens{v: jwtauth.NewVerifier(nil, 0), now: time.Now}

// rulesOf is the jwtauth form of a snapshot's tenants.jwt, made once per
// snapshot: a request does not build it again.
type rulesOf struct {
	of    *policies.JWT
	rules *jwtauth.Rules
}

var rulesCache atomic.Pointer[rulesOf]

func jwtRules(j *policies.JWT) *jwtauth.Rules {
	if c := rulesCache.Load(); c != nil && c.of == j {
		return c.rules
	}
	r := &jwtauth.Rules{Issuer: j.Issuer, Audiences: j.Audiences, Algorithms: j.Algorithms, Leeway: j.Leeway, HMACSecret: j.HMACSecret}
	rulesCache.Store(&rulesOf{of: j, rules: r})
	return r
}

// presentedToken returns the JWT r carries, and whether r carries one: in
// tenants.jwt's header or cookie, or in a header an API key is read from,
// a value shaped as a compact JWS. Such a value is never an API key.
func presentedToken(r *http.Request, j *policies.JWT, keyHeaders []string) (string, bool) {
	if tok := j.Token(r); tok != "" && jwtauth.LooksLikeJWS(tok) {
		return tok, true
	}
	for _, h := range keyHeaders {
		if v := apiKey(r, h); v != "" {
			return v, jwtauth.LooksLikeJWS(v)
		}
	}
	return "", false
}

// identifyToken verifies tok and fills s from its claims: the tenant and
// plan of tenants.jwt's claims, the claims for claim:NAME keys. A refused
// token leaves s without identity, with TokenRefused saying why.
func (t *tokens) identifyToken(s *policies.Subject, j *policies.JWT, tok string) {
	if t == nil {
		t = hmacOnly
	}
	claims, verr := t.v.Verify(tok, jwtRules(j), t.now())
	if verr != nil {
		s.TokenRefused = &policies.TokenRefusal{Reason: string(verr.Reason), Message: verr.Msg}
		return
	}
	if j.TenantClaim != nil {
		name, ok := policies.ClaimValue(claims, j.TenantClaim)
		if !ok {
			s.TokenRefused = &policies.TokenRefusal{Reason: string(jwtauth.ReasonMissingClaim),
				Message: "the bearer token has no tenant claim (a string or number) where tenants.jwt.tenant_claim says"}
			return
		}
		plan, _ := policies.ClaimValue(claims, j.PlanClaim)
		s.Tenant = &policies.Tenant{Name: name, Plan: plan}
	}
	s.Claims, s.Credential = claims, policies.CredentialJWT
}

// TokenObserver is told why each refused JWT was refused; an Observer
// that implements it gets it.
type TokenObserver interface {
	TokenRefused(reason string)
}

// writeTokenRefused answers 401 for a refused JWT (route nil: the quota
// report), saying which check failed, never quoting the token, and counts
// it by reason.
func (h *Handler) writeTokenRefused(w http.ResponseWriter, r *http.Request, snap *policies.Snapshot, route *policies.Route, why *policies.TokenRefusal) {
	if o, ok := h.metrics.(TokenObserver); ok {
		o.TokenRefused(why.Reason)
	}
	w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	var attrs []slog.Attr
	if route != nil {
		attrs = append(attrs, slog.String("route", route.Name))
	}
	attrs = append(attrs, slog.String("reason", why.Reason))
	h.writeError(w, r, http.StatusUnauthorized, errorBody{Message: why.Message + " (" + why.Reason + ")"}, attrs...)
}

// removeToken drops a verified JWT from out (tenants.jwt.forward: remove):
// its cookie, the other cookies kept, or its header.
func removeToken(out *http.Request, j *policies.JWT) {
	if j.Cookie == "" {
		out.Header.Del(j.Header)
		return
	}
	var kept []*http.Cookie
	for _, c := range out.Cookies() {
		if c.Name != j.Cookie {
			kept = append(kept, c)
		}
	}
	out.Header.Del("Cookie")
	for _, c := range kept {
		out.AddCookie(c)
	}
}

// jwtSubject is a verified token's sub, or "".
func jwtSubject(s *policies.Subject) string {
	sub, _ := policies.ClaimValue(s.Claims, subPath)
	return sub
}

var subPath = []string{"sub"}
