package redislimit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// keyDigest identifies a user-supplied key by the first 16 bytes of its
// SHA-256: fixed size, no byte of the key reaches Redis or the denial cache.
type keyDigest [16]byte

func digestKey(key string) keyDigest {
	sum := sha256.Sum256([]byte(key))
	var d keyDigest
	copy(d[:], sum[:16])
	return d
}

// maxPolicyNameInKey bounds the policy part of a Redis key; longer names (the
// config forbids them anyway) are hashed like keys.
const maxPolicyNameInKey = 64

// redisBaseKey returns "rl:{<policy>:<hex digest>}". Everything of one
// (policy, key) lives under this hash tag, so each script touches one Cluster
// slot, and keys of one policy spread over all slots. The policy name is used
// as is when it is made of [A-Za-z0-9_.-] (what the config allows), else
// hashed, so no "{", "}", CR or LF can reach a key from either part.
func redisBaseKey(policy string, d keyDigest) string {
	return redisKey("", policy, d)
}

// redisKey is prefix followed by redisBaseKey(policy, d), built in one
// allocation.
func redisKey(prefix, policy string, d keyDigest) string {
	const hexDigits = 32
	name := policy
	if !safePolicyName(name) {
		sum := sha256.Sum256([]byte(name))
		name = "h" + hex.EncodeToString(sum[:8])
	}
	var b strings.Builder // one allocation: String does not copy
	b.Grow(len(prefix) + len("rl:{") + len(name) + 1 + hexDigits + 1)
	b.WriteString(prefix)
	b.WriteString("rl:{")
	b.WriteString(name)
	b.WriteByte(':')
	var digits [hexDigits]byte
	hex.Encode(digits[:], d[:])
	b.Write(digits[:])
	b.WriteByte('}')
	return b.String()
}

func safePolicyName(s string) bool {
	if s == "" || len(s) > maxPolicyNameInKey {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// The keys of each algorithm under one base key. Each algorithm has its own
// suffix so a policy whose algorithm changes on reload never reads another
// algorithm's value (a WRONGTYPE error). GCRA puts redis_rate's "rate:" in
// front of the base key instead (its state format); the hash tag stays the
// same.
const (
	gcraKeyPrefix    = "rate:" // what redis_rate puts in front of a key
	slidingLogSuffix = ":sw"
	slidingSumSuffix = ":swn"
	fixedSuffix      = ":fw"
)
