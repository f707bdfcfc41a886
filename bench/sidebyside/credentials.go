package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The identity targets: one tenant known by an API key, and the same
// tenant known by a bearer JWT. The gateway checks a token's signature
// once and keeps the verified token until it expires, so the algorithm
// (HS256 here, no key file to write) costs the first request only.
const (
	benchAPIKey        = "bench-api-key-0123456789abcdef"
	benchAPIKeyTenants = `tenants:
  keys:
    "sha256:` + benchAPIKeyDigest + `": {tenant: bench}`
	// benchAPIKeyDigest is the SHA-256 of benchAPIKey (gateway key-digest).
	benchAPIKeyDigest = "0dd15cfc56b2789ca4f60b16f8e338df1db7801849d429ccc8d819fbe627ba49"
	benchJWTSecret    = "bench-jwt-secret-0123456789abcdef0123456789"
	benchJWTTenants   = `tenants:
  jwt:
    issuer: https://bench.invalid/
    audiences: [bench]
    algorithms: [HS256]
    hmac_secret: ` + benchJWTSecret + `
    tenant_claim: tenant`
)

// credentials gives an identity target its request header: the API key,
// or a token valid for a day.
func (l *lab) credentials(t *target) error {
	switch t.name {
	case tGatewayAPIKey:
		t.header = http.Header{"X-Api-Key": {benchAPIKey}}
	case tGatewayJWT:
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"iss": "https://bench.invalid/", "aud": "bench", "tenant": "bench",
			"exp": time.Now().Add(24 * time.Hour).Unix(),
		}).SignedString([]byte(benchJWTSecret))
		if err != nil {
			return fmt.Errorf("signing the bench JWT: %w", err)
		}
		t.header = http.Header{"Authorization": {"Bearer " + s}}
	}
	return nil
}
