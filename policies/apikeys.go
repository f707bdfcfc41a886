package policies

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// DigestPrefix starts an API key written in tenants.keys as its digest:
// "sha256:" and the 64 lower-case hex digits of the key's SHA-256. The file
// then grants access without holding any key.
const DigestPrefix = "sha256:"

// KeyDigest returns the digest the gateway knows an API key by, in the form
// tenants.keys accepts ("sha256:<hex>"). It is what "gateway key-digest"
// prints, what an api_key policy keys on (without the prefix), and what an
// unknown key's idempotency scope holds.
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return DigestPrefix + hex.EncodeToString(sum[:])
}

// digestEntry reports whether a tenants.keys entry is written as a digest,
// and returns the digest's hex digits (lower case).
func digestEntry(entry string) (hexDigits string, isDigest bool) {
	d, ok := strings.CutPrefix(entry, DigestPrefix)
	if !ok {
		return "", false
	}
	return strings.ToLower(d), true
}

// validDigestHex reports whether d is 64 hex digits.
func validDigestHex(d string) bool {
	if len(d) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(d)
	return err == nil
}

// Lookup returns the tenant of an API key: an entry written as the key
// itself, or one written as its digest. It is safe for concurrent use.
func (t *Tenants) Lookup(key string) (Tenant, bool) {
	if key == "" {
		return Tenant{}, false
	}
	if tn, ok := t.Keys[key]; ok {
		return tn, true
	}
	if len(t.Digests) == 0 {
		return Tenant{}, false
	}
	sum := sha256.Sum256([]byte(key))
	tn, ok := t.Digests[sum]
	return tn, ok
}

// HasTenant reports whether some API key, plain or digest, belongs to the
// tenant name.
func (t *Tenants) HasTenant(name string) bool {
	for _, tn := range t.Keys {
		if tn.Name == name {
			return true
		}
	}
	for _, tn := range t.Digests {
		if tn.Name == name {
			return true
		}
	}
	return false
}

// keyEntryPlace names a tenants.keys entry in an error or warning: a key
// written in plain text by the start of its digest, so that the message
// that points at it does not repeat it ("gateway key-digest" finds which
// entry it is); an entry written as a digest as itself.
func keyEntryPlace(entry string) string {
	if _, isDigest := digestEntry(entry); isDigest {
		return entry
	}
	return KeyDigest(entry)[:len(DigestPrefix)+12] + "…"
}
