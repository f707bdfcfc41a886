package policies

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"
)

// JWTConfig is tenants.jwt: callers identified by a bearer JWT, beside API
// keys. It is global: every route accepts both, and a bearer value shaped
// as a compact JWS is verified as a JWT, never looked up as a key.
type JWTConfig struct {
	// Issuer is the iss every token must carry (required).
	Issuer string `koanf:"issuer"`
	// Audiences: a token's aud must name one of them (required).
	Audiences []string `koanf:"audiences"`
	// JWKSURL, Discovery (OIDC discovery of Issuer) and KeysFile (a JWKS
	// document, relative to the config file) say where the signing keys
	// are; exactly one, or none with an HMAC secret alone.
	JWKSURL   string `koanf:"jwks_url" redact:"url"`
	Discovery bool   `koanf:"discovery"`
	KeysFile  string `koanf:"keys_file"`
	// Algorithms is the alg allowlist (default RS256, ES256); none never,
	// HS256/384/512 only with HMACSecret.
	Algorithms []string `koanf:"algorithms"`
	// HMACSecret verifies HS* tokens.
	HMACSecret string `koanf:"hmac_secret" redact:"set"`
	// Leeway absorbs clock skew in exp, nbf and iat (default 30s).
	Leeway time.Duration `koanf:"leeway"`
	// Header carries the token (default Authorization, "Bearer <token>");
	// Cookie, when set, is read instead.
	Header string `koanf:"header"`
	Cookie string `koanf:"cookie"`
	// TenantClaim and PlanClaim name the claims that are the caller's
	// tenant and plan (paths: "org.id"; "\." is a dot inside a name).
	TenantClaim string `koanf:"tenant_claim"`
	PlanClaim   string `koanf:"plan_claim"`
	// Forward is what goes upstream: as_received (default) or remove (the
	// token's header or cookie is dropped).
	Forward string `koanf:"forward"`
	// Refresh is how often the keys are fetched again (default 5m);
	// UnknownKidCooldown the least time between two fetches asked for by
	// an unknown kid (default 30s).
	Refresh            time.Duration `koanf:"refresh"`
	UnknownKidCooldown time.Duration `koanf:"unknown_kid_cooldown"`
}

// Defaults of tenants.jwt.
const (
	DefaultJWTLeeway   = 30 * time.Second
	DefaultJWTHeader   = "Authorization"
	DefaultJWTRefresh  = 5 * time.Minute
	DefaultJWTCooldown = 30 * time.Second
	JWTForwardAsIs     = "as_received"
	JWTForwardRemove   = "remove"
)

// DefaultJWTAlgorithms is tenants.jwt.algorithms when none are given.
var DefaultJWTAlgorithms = []string{"RS256", "ES256"}

// jwtAlgorithms are the algorithms tenants.jwt.algorithms may name.
var jwtAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "HS256", "HS384", "HS512"}

// JWT is tenants.jwt compiled.
type JWT struct {
	Issuer     string
	Audiences  []string
	Algorithms []string
	Leeway     time.Duration
	HMACSecret []byte
	// JWKSURL, Discovery and KeysFile (resolved) are the key source;
	// cmd builds the key set from them at start.
	JWKSURL   string
	Discovery bool
	KeysFile  string
	// Header is canonical; Cookie, when set, is read instead.
	Header, Cookie string
	// TenantClaim and PlanClaim are claim paths; nil for none.
	TenantClaim, PlanClaim []string
	// Remove drops the token before forwarding.
	Remove             bool
	Refresh            time.Duration
	UnknownKidCooldown time.Duration
}

// Token returns the token r carries where tenants.jwt reads it, or "".
func (j *JWT) Token(r *http.Request) string {
	if j.Cookie != "" {
		c, err := r.Cookie(j.Cookie)
		if err != nil {
			return ""
		}
		return c.Value
	}
	v := r.Header.Get(j.Header)
	if j.Header == "Authorization" {
		tok, ok := cutBearer(v)
		if !ok {
			return ""
		}
		return tok
	}
	return v
}

// cutBearer returns the credentials of an "Authorization: Bearer x" value.
func cutBearer(v string) (string, bool) {
	if len(v) < 7 || !strings.EqualFold(v[:7], "bearer ") {
		return "", false
	}
	return strings.TrimSpace(v[7:]), true
}

func applyJWTDefaults(j *JWTConfig) {
	if j == nil {
		return
	}
	setDefault(&j.Leeway, DefaultJWTLeeway)
	setDefault(&j.Header, DefaultJWTHeader)
	setDefault(&j.Forward, JWTForwardAsIs)
	setDefault(&j.Refresh, DefaultJWTRefresh)
	setDefault(&j.UnknownKidCooldown, DefaultJWTCooldown)
	if len(j.Algorithms) == 0 {
		j.Algorithms = slices.Clone(DefaultJWTAlgorithms)
	}
}

func validateJWT(p *problems, j *JWTConfig) {
	if j == nil {
		return
	}
	const at = "tenants.jwt"
	if strings.TrimSpace(j.Issuer) == "" {
		p.add(at+".issuer", "required: the iss every token must carry")
	}
	if len(j.Audiences) == 0 || slices.Contains(j.Audiences, "") {
		p.add(at+".audiences", "required: one or more non-empty audiences, one of which a token's aud must name")
	}
	hmacOnly := j.HMACSecret != ""
	for _, a := range j.Algorithms {
		switch {
		case strings.EqualFold(a, "none"):
			p.add(at+".algorithms", "\"none\" is never accepted: an unsigned token proves nothing")
		case !slices.Contains(jwtAlgorithms, a):
			p.addf(at+".algorithms", "unknown algorithm %q (want one of %s)", a, strings.Join(jwtAlgorithms, ", "))
		case strings.HasPrefix(a, "HS") && j.HMACSecret == "":
			p.addf(at+".algorithms", "%s needs tenants.jwt.hmac_secret", a)
		case !strings.HasPrefix(a, "HS"):
			hmacOnly = false
		}
	}
	if j.HMACSecret != "" && !slices.ContainsFunc(j.Algorithms, func(a string) bool { return strings.HasPrefix(a, "HS") }) {
		p.add(at+".hmac_secret", "set, but no HS algorithm is in tenants.jwt.algorithms")
	}
	if j.HMACSecret != "" && len(j.HMACSecret) < 32 {
		p.add(at+".hmac_secret", "must be at least 32 bytes")
	}
	sources := 0
	for _, set := range []bool{j.JWKSURL != "", j.Discovery, j.KeysFile != ""} {
		if set {
			sources++
		}
	}
	switch {
	case sources > 1:
		p.add(at, "give one of jwks_url, discovery and keys_file")
	case sources == 0 && !hmacOnly:
		p.add(at, "needs signing keys: jwks_url, discovery: true, or keys_file")
	}
	if j.JWKSURL != "" && !strings.HasPrefix(j.JWKSURL, "https://") && !strings.HasPrefix(j.JWKSURL, "http://") {
		p.add(at+".jwks_url", "must be an http(s) URL")
	}
	if j.Discovery && !strings.HasPrefix(j.Issuer, "https://") && !strings.HasPrefix(j.Issuer, "http://") {
		p.add(at+".discovery", "needs an issuer that is an http(s) URL")
	}
	if j.Leeway < 0 || j.Leeway > 5*time.Minute {
		p.addf(at+".leeway", "must be between 0s and 5m, got %s", j.Leeway)
	}
	if j.Refresh < time.Second {
		p.addf(at+".refresh", "must be at least 1s, got %s", j.Refresh)
	}
	if j.UnknownKidCooldown < time.Second {
		p.addf(at+".unknown_kid_cooldown", "must be at least 1s, got %s", j.UnknownKidCooldown)
	}
	if j.Cookie != "" && !isToken(j.Cookie) {
		p.addf(at+".cookie", "must be a cookie name, got %q", j.Cookie)
	}
	if !isToken(j.Header) {
		p.addf(at+".header", "must be a header name, got %q", j.Header)
	}
	for place, c := range map[string]string{at + ".tenant_claim": j.TenantClaim, at + ".plan_claim": j.PlanClaim} {
		if c == "" {
			continue
		}
		if _, err := ParseClaimPath(c); err != nil {
			p.addf(place, "%v", err)
		}
	}
	if j.Forward != JWTForwardAsIs && j.Forward != JWTForwardRemove {
		p.addf(at+".forward", "must be %s or %s, got %q", JWTForwardAsIs, JWTForwardRemove, j.Forward)
	}
}

func compileJWT(j *JWTConfig) *JWT {
	if j == nil {
		return nil
	}
	out := &JWT{
		Issuer: j.Issuer, Audiences: slices.Clone(j.Audiences), Algorithms: slices.Clone(j.Algorithms),
		Leeway: j.Leeway, JWKSURL: j.JWKSURL, Discovery: j.Discovery, KeysFile: j.KeysFile,
		Header: http.CanonicalHeaderKey(j.Header), Cookie: j.Cookie, Remove: j.Forward == JWTForwardRemove,
		Refresh: j.Refresh, UnknownKidCooldown: j.UnknownKidCooldown,
	}
	if j.HMACSecret != "" {
		out.HMACSecret = []byte(j.HMACSecret)
	}
	out.TenantClaim, _ = ParseClaimPath(j.TenantClaim)
	out.PlanClaim, _ = ParseClaimPath(j.PlanClaim)
	return out
}

// ParseClaimPath splits a claim path at its dots: "org.id" is the claim id
// inside the object org. A dot inside a claim's name is written "\.", a
// backslash "\\" ("https://example\.com/tenant" is one claim). "" is no
// path (nil).
func ParseClaimPath(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var path []string
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i+1 == len(s) || (s[i+1] != '.' && s[i+1] != '\\') {
				return nil, errors.New(`a claim path escapes only "." and "\" with "\"`)
			}
			i++
			b.WriteByte(s[i])
		case '.':
			if b.Len() == 0 {
				return nil, errors.New("a claim path has an empty name")
			}
			path = append(path, b.String())
			b.Reset()
		default:
			b.WriteByte(c)
		}
	}
	if b.Len() == 0 {
		return nil, errors.New("a claim path has an empty name")
	}
	return append(path, b.String()), nil
}

// ClaimValue is the value at path in claims as a key: a string, a number
// as written, or a boolean. An array, an object, null or a missing claim
// is no key (false).
func ClaimValue(claims map[string]any, path []string) (string, bool) {
	if claims == nil || len(path) == 0 {
		return "", false
	}
	var v any = claims
	for _, name := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = m[name]; !ok {
			return "", false
		}
	}
	switch x := v.(type) {
	case string:
		return x, x != ""
	case bool:
		if x {
			return "true", true
		}
		return "false", true
	case interface{ String() string }: // json.Number: the digits as sent
		s := x.String()
		return s, s != ""
	default:
		return "", false
	}
}
