// Package jwttest is the signing key of an identity provider, for tests
// that verify bearer JWTs against a JWKS: an RSA key and its JWKS document.
package jwttest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"testing"

	"github.com/MicahParks/jwkset"
)

// Key makes a 2048-bit RSA signing key and the JWKS document that
// publishes its public half under kid.
func Key(t testing.TB, kid string) (*rsa.PrivateKey, []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	jwk, err := jwkset.NewJWKFromKey(&key.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, USE: jwkset.UseSig}})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{jwk.Marshal()}})
	if err != nil {
		t.Fatal(err)
	}
	return key, doc
}
