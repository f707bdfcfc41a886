package jwtauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

const (
	testIssuer   = "https://id.example.test/"
	testAudience = "api"
)

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func testRules() *Rules {
	return &Rules{Issuer: testIssuer, Audiences: []string{testAudience}, Algorithms: []string{"RS256", "ES256"}, Leeway: 30 * time.Second}
}

// signer is a private key with its kid.
type signer struct {
	kid string
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
}

func newRSA(t testing.TB, kid string) signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("generating an RSA key: %v", err)
	}
	return signer{kid: kid, rsa: k}
}

func newEC(t testing.TB, kid string) signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generating an EC key: %v", err)
	}
	return signer{kid: kid, ec: k}
}

func (s signer) public() any {
	if s.rsa != nil {
		return &s.rsa.PublicKey
	}
	return &s.ec.PublicKey
}

// token signs claims, filling in iss, aud and exp (an hour after t0) when
// they are absent.
func (s signer) token(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	full := jwt.MapClaims{"iss": testIssuer, "aud": testAudience, "exp": t0.Add(time.Hour).Unix(), "sub": "user-1"}
	for k, v := range claims {
		if v == nil {
			delete(full, k)
			continue
		}
		full[k] = v
	}
	method, priv := jwt.SigningMethod(jwt.SigningMethodRS256), any(s.rsa)
	if s.ec != nil {
		method, priv = jwt.SigningMethodES256, s.ec
	}
	tok := jwt.NewWithClaims(method, full)
	tok.Header["kid"] = s.kid
	out, err := tok.SignedString(priv)
	if err != nil {
		t.Fatalf("signing: %v", err)
	}
	return out
}

// jwksDoc is the JWKS of signers' public keys.
func jwksDoc(t testing.TB, signers ...signer) []byte {
	t.Helper()
	var set jwkset.JWKSMarshal
	for _, s := range signers {
		jwk, err := jwkset.NewJWKFromKey(s.public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: s.kid, USE: jwkset.UseSig}})
		if err != nil {
			t.Fatalf("making a JWK: %v", err)
		}
		set.Keys = append(set.Keys, jwk.Marshal())
	}
	doc, err := json.Marshal(set)
	if err != nil {
		t.Fatalf("marshalling the JWKS: %v", err)
	}
	return doc
}

// jwksServer serves a JWKS document that tests change, and can be down.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	doc     []byte
	down    atomic.Bool
	fetches atomic.Int64
}

func newJWKSServer(t testing.TB, doc []byte) *jwksServer {
	t.Helper()
	s := &jwksServer{doc: doc}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		if s.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			json.NewEncoder(w).Encode(map[string]string{"issuer": s.URL, "jwks_uri": s.URL + "/jwks"})
		default:
			s.mu.Lock()
			doc := s.doc
			s.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.Write(doc)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) publish(doc []byte) {
	s.mu.Lock()
	s.doc = doc
	s.mu.Unlock()
}
