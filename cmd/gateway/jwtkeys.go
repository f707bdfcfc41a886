package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/ratelimit-gateway/gateway/jwtauth"
	"github.com/ratelimit-gateway/gateway/policies"
)

// jwtKeysWait bounds the first read of the signing keys at start.
const jwtKeysWait = 10 * time.Second

// newJWTKeys builds the signing keys of tenants.jwt, once for the process,
// and reads them once. A failed first read is logged, not fatal: tokens
// are refused (unknown_kid) until a refresh works, which the first one
// presented asks for. It returns nil keys when tenants.jwt has no key
// source (none, or an HMAC secret only).
func newJWTKeys(ctx context.Context, j *policies.JWT, log *slog.Logger) (*jwtauth.KeySet, error) {
	if j == nil || (j.JWKSURL == "" && !j.Discovery && j.KeysFile == "") {
		return nil, nil
	}
	cfg := jwtauth.KeySetConfig{URL: j.JWKSURL, File: j.KeysFile, Refresh: j.Refresh, Cooldown: j.UnknownKidCooldown, Logger: log}
	if j.Discovery {
		cfg.Issuer = j.Issuer
	}
	keys, err := jwtauth.NewKeySet(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, jwtKeysWait)
	defer cancel()
	if err := keys.Refresh(ctx); err == nil {
		log.Info("JWT signing keys read", "keys", keys.Len())
	}
	return keys, nil
}

// jwtKeySource is what of tenants.jwt the key set is built from at start.
func jwtKeySource(j *policies.JWTConfig) []any {
	if j == nil {
		return nil
	}
	return []any{j.JWKSURL, j.Discovery, j.KeysFile, j.Refresh, j.UnknownKidCooldown}
}

// tokenReasons are the verifier's refusal reasons, as metric labels.
func tokenReasons() []string {
	rs := make([]string, len(jwtauth.Reasons))
	for i, r := range jwtauth.Reasons {
		rs[i] = string(r)
	}
	return rs
}
