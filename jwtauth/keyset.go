package jwtauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
)

// Defaults of KeySetConfig.
const (
	DefaultRefresh  = 5 * time.Minute
	DefaultCooldown = 30 * time.Second
	// maxDocumentBytes bounds a JWKS or discovery document read.
	maxDocumentBytes = 1 << 20
	fetchTimeout     = 10 * time.Second
)

// KeySetConfig says where a KeySet reads its keys. Exactly one of URL,
// Issuer (OIDC discovery) and File is set.
type KeySetConfig struct {
	// URL is a JWKS document's URL.
	URL string
	// Issuer, with URL and File empty, is discovered: its
	// /.well-known/openid-configuration names the jwks_uri.
	Issuer string
	// File is a JWKS document on disk, read again on every refresh.
	File string
	// Refresh is how often the keys are read again; zero means
	// DefaultRefresh.
	Refresh time.Duration
	// Cooldown is the least time between two refreshes asked for by an
	// unknown kid; zero means DefaultCooldown.
	Cooldown time.Duration
	// Client fetches the documents; nil means a client with a 10 s timeout.
	Client *http.Client
	// Clock is the time; nil means time.Now.
	Clock func() time.Time
	// Logger receives failed refreshes; nil means slog.Default().
	Logger *slog.Logger
	// OnRefresh, when set, is called after each refresh with its error.
	OnRefresh func(error)
}

// key is one verification key and a fingerprint of the JWK it was read
// from: a refresh that finds the same JWK keeps the same *key, so the
// tokens verified with it stay cached.
type key struct {
	kid, fp string
	pub     any
}

// KeySet holds the last good keys of one source and refreshes them in the
// background (Run). Build it with NewKeySet; it is safe for concurrent use.
type KeySet struct {
	cfg  KeySetConfig
	keys atomic.Pointer[map[string]*key]
	// kick asks Run for a refresh (an unknown kid); lastKick is when it
	// last did, in Unix nanoseconds, for the cooldown.
	kick     chan struct{}
	lastKick atomic.Int64
	// fetchMu makes refreshes one at a time.
	fetchMu sync.Mutex
}

// NewKeySet checks cfg and returns a KeySet with no keys; it starts
// nothing. Call Refresh once before serving, and Run for the background.
func NewKeySet(cfg KeySetConfig) (*KeySet, error) {
	n := 0
	for _, s := range []string{cfg.URL, cfg.File} {
		if s != "" {
			n++
		}
	}
	if n == 0 && cfg.Issuer == "" {
		return nil, errors.New("jwt keys: need a JWKS URL, an issuer to discover, or a file")
	}
	if n > 1 {
		return nil, errors.New("jwt keys: give a JWKS URL or a file, not both")
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = DefaultCooldown
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: fetchTimeout}
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	k := &KeySet{cfg: cfg, kick: make(chan struct{}, 1)}
	empty := map[string]*key{}
	k.keys.Store(&empty)
	return k, nil
}

// Run refreshes the keys every Refresh, and when an unknown kid asks,
// until ctx ends. A failed refresh keeps the last good keys.
func (k *KeySet) Run(ctx context.Context) error {
	t := time.NewTicker(k.cfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-k.kick:
		}
		_ = k.Refresh(ctx)
	}
}

// Refresh reads the keys once now and, when that works, serves them from
// then on. On failure the last good keys stay, and the error is logged
// and returned.
func (k *KeySet) Refresh(ctx context.Context) error {
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	err := k.refresh(ctx)
	if err != nil {
		k.cfg.Logger.Warn("refreshing the JWT keys failed; keeping the last good ones", "err", err)
	}
	if k.cfg.OnRefresh != nil {
		k.cfg.OnRefresh(err)
	}
	return err
}

func (k *KeySet) refresh(ctx context.Context) error {
	var doc []byte
	var err error
	switch {
	case k.cfg.File != "":
		doc, err = readFile(k.cfg.File)
	case k.cfg.URL != "":
		doc, err = k.get(ctx, k.cfg.URL)
	default:
		var u string
		if u, err = k.discover(ctx); err == nil {
			doc, err = k.get(ctx, u)
		}
	}
	if err != nil {
		return err
	}
	keys, err := parseJWKS(doc, *k.keys.Load())
	if err != nil {
		return err
	}
	k.keys.Store(&keys)
	return nil
}

// Key returns the key with kid, or asks for a refresh (at most once per
// cooldown, never waiting for it) and reports false.
func (k *KeySet) Key(kid string) (*key, bool) {
	if c, ok := (*k.keys.Load())[kid]; ok {
		return c, true
	}
	now := k.cfg.Clock().UnixNano()
	last := k.lastKick.Load()
	if now-last >= int64(k.cfg.Cooldown) && k.lastKick.CompareAndSwap(last, now) {
		select {
		case k.kick <- struct{}{}:
		default: // one is asked for already
		}
	}
	return nil, false
}

// current reports whether c is still the key served for its kid.
func (k *KeySet) current(c *key) bool { return (*k.keys.Load())[c.kid] == c }

// Len is the number of keys served.
func (k *KeySet) Len() int { return len(*k.keys.Load()) }

func (k *KeySet) discover(ctx context.Context) (string, error) {
	u := strings.TrimSuffix(k.cfg.Issuer, "/") + "/.well-known/openid-configuration"
	doc, err := k.get(ctx, u)
	if err != nil {
		return "", err
	}
	var d struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return "", fmt.Errorf("reading the discovery document %s: %w", u, err)
	}
	if d.Issuer != k.cfg.Issuer {
		return "", fmt.Errorf("the discovery document %s names issuer %q, not %q", u, d.Issuer, k.cfg.Issuer)
	}
	if d.JWKSURI == "" {
		return "", fmt.Errorf("the discovery document %s names no jwks_uri", u)
	}
	return d.JWKSURI, nil
}

func (k *KeySet) get(ctx context.Context, u string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", u, err)
	}
	resp, err := k.cfg.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching %s: status %d", u, resp.StatusCode)
	}
	doc, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", u, err)
	}
	if len(doc) > maxDocumentBytes {
		return nil, fmt.Errorf("fetching %s: document over %d bytes", u, maxDocumentBytes)
	}
	return doc, nil
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("reading jwt keys: %w", err)
	}
	defer f.Close()
	doc, err := io.ReadAll(io.LimitReader(f, maxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading jwt keys %s: %w", name, err)
	}
	if len(doc) > maxDocumentBytes {
		return nil, fmt.Errorf("reading jwt keys %s: over %d bytes", name, maxDocumentBytes)
	}
	return doc, nil
}

// parseJWKS reads a JWKS document's public keys. A key it cannot use (a
// symmetric one, an unknown type) is skipped; a document without a usable
// key is an error, so that a broken publication never empties the set.
// Keys unchanged since old are kept as they were.
func parseJWKS(doc []byte, old map[string]*key) (map[string]*key, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(doc, &set); err != nil {
		return nil, fmt.Errorf("reading the JWKS: %w", err)
	}
	keys := make(map[string]*key, len(set.Keys))
	for _, raw := range set.Keys {
		jwk, err := jwkset.NewJWKFromRawJSON(raw, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
		if err != nil {
			continue
		}
		m := jwk.Marshal()
		switch m.KTY {
		case jwkset.KtyRSA, jwkset.KtyEC, jwkset.KtyOKP:
		default:
			continue // no symmetric keys from a document: HMAC takes a configured secret
		}
		if m.USE != "" && m.USE != jwkset.UseSig {
			continue
		}
		fp, err := json.Marshal(m)
		if err != nil {
			continue
		}
		if c, ok := old[m.KID]; ok && c.fp == string(fp) {
			keys[m.KID] = c
			continue
		}
		keys[m.KID] = &key{kid: m.KID, fp: string(fp), pub: jwk.Key()}
	}
	if len(keys) == 0 {
		return nil, errors.New("the JWKS has no usable signing key")
	}
	return keys, nil
}
