package jwtauth

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MaxTokenBytes bounds a token: a longer one is refused before it is
// decoded.
const MaxTokenBytes = 8 << 10

// Rules are what a token must satisfy besides its signature.
type Rules struct {
	// Issuer is the iss a token must carry; required.
	Issuer string
	// Audiences: a token's aud must name one of them; required.
	Audiences []string
	// Algorithms is the allowlist of alg values; "none" is never accepted,
	// and HS* only with HMACSecret.
	Algorithms []string
	// Leeway absorbs clock skew in exp, nbf and iat.
	Leeway time.Duration
	// HMACSecret verifies HS256/384/512 tokens; nil refuses them.
	HMACSecret []byte
}

// Claims are a verified token's claims. They may be shared by several
// requests (the cache): read them, never change them.
type Claims map[string]any

// Verifier checks tokens against Rules and the keys of a KeySet, and
// keeps verified tokens until they expire so that a hot token is verified
// once. Build it with NewVerifier; it is safe for concurrent use.
type Verifier struct {
	keys  *KeySet
	cache *cache
}

// NewVerifier returns a Verifier over keys (nil: HMAC tokens only) that
// caches up to maxCached tokens (≤ 0: DefaultMaxCached).
func NewVerifier(keys *KeySet, maxCached int) *Verifier {
	if maxCached <= 0 {
		maxCached = DefaultMaxCached
	}
	return &Verifier{keys: keys, cache: newCache(maxCached)}
}

// Verify checks raw against r at now and returns its claims, or the
// reason it is refused. It never waits on the network: a token whose kid
// is unknown is refused at once, and the key set is asked for a refresh.
func (v *Verifier) Verify(raw string, r *Rules, now time.Time) (Claims, *Error) {
	if len(raw) > MaxTokenBytes {
		return nil, refuse(ReasonTooLarge, "the bearer token is over 8 KiB")
	}
	sum := sha(raw)
	if c, ok := v.cache.get(sum); ok {
		if v.stillGood(c, r, now) {
			return c.claims, nil
		}
		v.cache.drop(sum)
	}
	var used *key
	var alg string
	p := jwt.NewParser(
		jwt.WithJSONNumber(),
		jwt.WithLeeway(r.Leeway),
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithExpirationRequired(),
		jwt.WithIssuer(r.Issuer),
		jwt.WithAudience(r.Audiences...),
	)
	claims := jwt.MapClaims{}
	_, err := p.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) {
		alg = t.Method.Alg()
		if alg == "none" || !slices.Contains(r.Algorithms, alg) {
			return nil, refuse(ReasonAlgorithm, "the bearer token's algorithm is not accepted here")
		}
		if _, hmac := t.Method.(*jwt.SigningMethodHMAC); hmac {
			if len(r.HMACSecret) == 0 {
				return nil, refuse(ReasonAlgorithm, "the bearer token's algorithm is not accepted here")
			}
			return r.HMACSecret, nil
		}
		kid, _ := t.Header["kid"].(string)
		if v.keys == nil {
			return nil, refuse(ReasonUnknownKey, "no signing keys are configured")
		}
		k, ok := v.keys.Key(kid)
		if !ok {
			return nil, refuse(ReasonUnknownKey, "the bearer token's signing key (kid) is not known (yet)")
		}
		used = k
		return k.pub, nil
	})
	if err != nil {
		return nil, classify(err)
	}
	if used != nil { // HMAC tokens are cheap to verify again, and their secret may change on reload
		v.cache.put(sum, newEntry(claims, used, alg), now)
	}
	return Claims(claims), nil
}

// stillGood reports whether a cached token passes r at now: everything
// but its signature is checked again, so a reload's rules apply to it.
func (v *Verifier) stillGood(c *entry, r *Rules, now time.Time) bool {
	if !now.Before(c.exp.Add(r.Leeway)) || !v.keys.current(c.key) {
		return false
	}
	if !c.nbf.IsZero() && now.Add(r.Leeway).Before(c.nbf) {
		return false
	}
	if c.iss != r.Issuer || !slices.Contains(r.Algorithms, c.alg) {
		return false
	}
	for _, a := range c.aud {
		if slices.Contains(r.Audiences, a) {
			return true
		}
	}
	return false
}

// newEntry is a verified token as the cache keeps it.
func newEntry(claims jwt.MapClaims, k *key, alg string) *entry {
	e := &entry{claims: Claims(claims), key: k, alg: alg}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		e.exp = exp.Time
	}
	if nbf, err := claims.GetNotBefore(); err == nil && nbf != nil {
		e.nbf = nbf.Time
	}
	e.iss, _ = claims.GetIssuer()
	e.aud, _ = claims.GetAudience()
	return e
}

// LooksLikeJWS reports whether s has the shape of a compact JWS: three
// base64url segments whose first decodes to a JSON object with an alg. A
// bearer value of that shape is treated as a JWT, anything else as an API
// key.
func LooksLikeJWS(s string) bool {
	if strings.Count(s, ".") != 2 || len(s) > MaxTokenBytes {
		return false
	}
	head, rest, _ := strings.Cut(s, ".")
	payload, sig, _ := strings.Cut(rest, ".")
	if head == "" || payload == "" || !isBase64URL(head) || !isBase64URL(payload) || !isBase64URL(sig) {
		return false
	}
	h, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return false
	}
	var hdr map[string]any
	if json.Unmarshal(h, &hdr) != nil {
		return false
	}
	_, ok := hdr["alg"].(string)
	return ok
}

func isBase64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
