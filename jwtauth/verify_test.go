package jwtauth

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/ratelimit-gateway/gateway/internal/clocktest"
)

// keysFor is a KeySet over a local JWKS server publishing signers, loaded
// once.
func keysFor(t *testing.T, clock *clocktest.Clock, signers ...signer) (*KeySet, *jwksServer) {
	t.Helper()
	srv := newJWKSServer(t, jwksDoc(t, signers...))
	ks, err := NewKeySet(KeySetConfig{URL: srv.URL + "/jwks", Clock: clock.Now})
	if err != nil {
		t.Fatalf("NewKeySet: %v", err)
	}
	if err := ks.Refresh(context.Background()); err != nil {
		t.Fatalf("first refresh: %v", err)
	}
	return ks, srv
}

func TestVerifyRefusesCraftedTokens(t *testing.T) {
	clock := clocktest.New(t0)
	good, ec := newRSA(t, "k1"), newEC(t, "e1")
	stranger := newRSA(t, "k1") // same kid, other key: a forged signature
	ks, _ := keysFor(t, clock, good, ec)
	v := NewVerifier(ks, 0)

	pubDER, err := x509.MarshalPKIXPublicKey(&good.rsa.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	confused := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": testIssuer, "aud": testAudience, "exp": t0.Add(time.Hour).Unix()})
	confused.Header["kid"] = "k1"
	confusedTok, err := confused.SignedString(pubPEM) // RS→HS: the public key as an HMAC secret
	if err != nil {
		t.Fatal(err)
	}
	none := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"iss": testIssuer, "aud": testAudience, "exp": t0.Add(time.Hour).Unix()})
	noneTok, err := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	valid := good.token(t, nil)
	parts := strings.Split(valid, ".")
	flipped := parts[0] + "." + parts[1] + "." + parts[2][:len(parts[2])-4] + "AAAA"

	tests := []struct {
		name  string
		token string
		rules func(*Rules)
		want  Reason
	}{
		{"alg none", noneTok, func(r *Rules) { r.Algorithms = append(r.Algorithms, "none") }, ReasonAlgorithm},
		{"RS to HS confusion without a secret", confusedTok, func(r *Rules) { r.Algorithms = append(r.Algorithms, "HS256") }, ReasonAlgorithm},
		{"RS to HS confusion with another secret", confusedTok, func(r *Rules) {
			r.Algorithms, r.HMACSecret = append(r.Algorithms, "HS256"), []byte("the configured secret")
		}, ReasonBadSignature},
		{"HS not in the allowlist", confusedTok, nil, ReasonAlgorithm},
		{"expired beyond leeway", good.token(t, jwt.MapClaims{"exp": t0.Add(-31 * time.Second).Unix()}), nil, ReasonExpired},
		{"not yet valid", good.token(t, jwt.MapClaims{"nbf": t0.Add(time.Minute).Unix()}), nil, ReasonNotYetValid},
		{"wrong issuer", good.token(t, jwt.MapClaims{"iss": "https://evil.test/"}), nil, ReasonWrongIssuer},
		{"wrong audience", good.token(t, jwt.MapClaims{"aud": "other"}), nil, ReasonWrongAudience},
		{"no exp", good.token(t, jwt.MapClaims{"exp": nil}), nil, ReasonMissingClaim},
		{"no iss", good.token(t, jwt.MapClaims{"iss": nil}), nil, ReasonMissingClaim},
		{"forged signature", stranger.token(t, nil), nil, ReasonBadSignature},
		{"flipped signature", flipped, nil, ReasonBadSignature},
		{"bad base64", "eyJhbGciOiJSUzI1NiJ9.@@@.abc", nil, ReasonMalformed},
		{"not JSON", base64.RawURLEncoding.EncodeToString([]byte("{")) + ".e30.sig", nil, ReasonMalformed},
		{"huge", good.token(t, jwt.MapClaims{"pad": strings.Repeat("x", MaxTokenBytes)}), nil, ReasonTooLarge},
		{"unknown kid", newRSA(t, "k9").token(t, nil), nil, ReasonUnknownKey},
		{"unknown alg", base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"XX1","kid":"k1"}`)) + ".e30.c2ln", nil, ReasonAlgorithm},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testRules()
			if tt.rules != nil {
				tt.rules(r)
			}
			claims, verr := v.Verify(tt.token, r, clock.Now())
			if verr == nil {
				t.Fatalf("got claims %v, want refusal %s", claims, tt.want)
			}
			if verr.Reason != tt.want {
				t.Errorf("got reason %s (%s), want %s", verr.Reason, verr.Msg, tt.want)
			}
			if strings.Contains(verr.Msg, tt.token) || strings.Contains(verr.Msg, "eyJ") {
				t.Errorf("the refusal echoes the token: %q", verr.Msg)
			}
		})
	}
}

func TestVerifyAccepts(t *testing.T) {
	clock := clocktest.New(t0)
	rs, ec := newRSA(t, "k1"), newEC(t, "e1")
	ks, _ := keysFor(t, clock, rs, ec)
	v := NewVerifier(ks, 0)
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": testIssuer, "aud": []string{"x", testAudience}, "exp": t0.Add(time.Hour).Unix(), "sub": "h"})
	hsTok, err := hs.SignedString([]byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, token, sub string
		rules            func(*Rules)
	}{
		{"RS256", rs.token(t, nil), "user-1", nil},
		{"ES256", ec.token(t, jwt.MapClaims{"sub": "e"}), "e", nil},
		{"expired within leeway", rs.token(t, jwt.MapClaims{"exp": t0.Add(-10 * time.Second).Unix(), "sub": "l"}), "l", nil},
		{"HS256 with the configured secret", hsTok, "h", func(r *Rules) { r.Algorithms, r.HMACSecret = []string{"HS256"}, []byte("s3cret") }},
		{"nested claims", rs.token(t, jwt.MapClaims{"org": map[string]any{"id": "acme"}, "sub": "n"}), "n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testRules()
			if tt.rules != nil {
				tt.rules(r)
			}
			claims, verr := v.Verify(tt.token, r, clock.Now())
			if verr != nil {
				t.Fatalf("refused: %s (%s)", verr.Reason, verr.Msg)
			}
			if claims["sub"] != tt.sub {
				t.Errorf("got sub %v, want %s", claims["sub"], tt.sub)
			}
		})
	}
}

func TestLooksLikeJWS(t *testing.T) {
	rs := newRSA(t, "k1")
	tests := []struct {
		in   string
		want bool
	}{
		{rs.token(t, nil), true},
		{"sk-live-0123456789", false},
		{"a.b.c", false}, // "a" is no JSON header
		{"eyJhbGciOiJSUzI1NiJ9..", false},
		{"eyJhbGciOiJSUzI1NiJ9.e30.", true},    // empty signature: a JWS still, refused by verification
		{"eyJ0eXAiOiJKV1QifQ.e30.c2ln", false}, // no alg
		{"key.with.dots+slash/", false},
	}
	for _, tt := range tests {
		if got := LooksLikeJWS(tt.in); got != tt.want {
			t.Errorf("LooksLikeJWS(%.30q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
