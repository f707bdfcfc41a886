package main

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// The identity targets: one tenant known by an API key, and the same
// tenant known by a JWT whose signing key is in a JWKS file beside the
// config (written by credentials).
const (
	benchAPIKey        = "bench-api-key-0123456789abcdef"
	benchAPIKeyTenants = `tenants:
  keys:
    "sha256:` + benchAPIKeyDigest + `": {tenant: bench}`
	// benchAPIKeyDigest is the SHA-256 of benchAPIKey (gateway key-digest).
	benchAPIKeyDigest = "0dd15cfc56b2789ca4f60b16f8e338df1db7801849d429ccc8d819fbe627ba49"
	benchJWTTenants   = `tenants:
  jwt:
    issuer: https://bench.invalid/
    audiences: [bench]
    keys_file: ` + tGatewayJWT + `.jwks.json
    tenant_claim: tenant`
)

// credentials gives an identity target its request header, and the JWT
// target its key: a fresh RSA key, its JWKS in the config's directory
// (named after the target's name, which cfg's keys_file is pointed at),
// and a token valid for a day.
func (l *lab) credentials(t *target, name string, cfg *gatewayConfig) error {
	switch t.name {
	case tGatewayAPIKey:
		t.header = http.Header{"X-Api-Key": {benchAPIKey}}
	case tGatewayJWT:
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return fmt.Errorf("making the bench JWT key: %w", err)
		}
		jwk, err := jwkset.NewJWKFromKey(&key.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: "bench", USE: jwkset.UseSig}})
		if err != nil {
			return fmt.Errorf("making the bench JWKS: %w", err)
		}
		doc, err := json.Marshal(jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{jwk.Marshal()}})
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(l.dir, name+".jwks.json"), doc, 0o644); err != nil {
			return err
		}
		cfg.Tenants = strings.ReplaceAll(cfg.Tenants, tGatewayJWT+".jwks.json", name+".jwks.json")
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
			"iss": "https://bench.invalid/", "aud": "bench", "tenant": "bench", "sub": name,
			"exp": time.Now().Add(24 * time.Hour).Unix(),
		})
		tok.Header["kid"] = "bench"
		s, err := tok.SignedString(key)
		if err != nil {
			return fmt.Errorf("signing the bench JWT: %w", err)
		}
		t.header = http.Header{"Authorization": {"Bearer " + s}}
	}
	return nil
}
