package certstore

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Pair names one certificate (with its chain) and its private key, PEM files.
type Pair struct {
	CertFile, KeyFile string
}

// Config is what a Store serves.
type Config struct {
	// Pairs are the certificates; the first is served when no other names
	// the client's SNI. At least one.
	Pairs []Pair
	// MinVersion is the lowest TLS version accepted (tls.VersionTLS12 when 0).
	MinVersion uint16
	// ClientCAFile, when set, names a PEM bundle of client CAs; ClientAuth
	// then says what a client without a certificate they verify gets.
	ClientCAFile string
	ClientAuth   tls.ClientAuthType
	// NextProtos are the ALPN protocols offered (http/1.1 when nil).
	NextProtos []string
	// Debounce is how long Run waits after the last change event before
	// it reloads (100 ms when 0): a certificate and its key are replaced
	// one after the other.
	Debounce time.Duration
	// Logger hears every reload that changes something, and each failure.
	Logger *slog.Logger
	// OnReload, when set, hears each reload that saw changed files: ok is
	// false when a file failed to load and the one in force was kept.
	OnReload func(ok bool)
}

// Store is the certificates in force. Safe for concurrent use: handshakes
// read one immutable state, which a reload replaces with one atomic store.
type Store struct {
	cfg     Config
	mu      sync.Mutex // serialises reloads
	state   atomic.Pointer[state]
	running atomic.Bool
}

// state is one generation of what is served.
type state struct {
	pairs    []*loaded // aligned with Config.Pairs
	exact    map[string]int
	wildcard map[string]int // by the suffix after "*."
	ca       *loadedCA      // nil without a client CA
	config   *tls.Config    // with the client CA, if any
	noClient *tls.Config    // without: for the admin listener
}

type loaded struct {
	certPEM, keyPEM []byte
	cert            *tls.Certificate
}

type loadedCA struct {
	pem  []byte
	pool *x509.CertPool
}

// New loads every file; a file that cannot be loaded is an error naming it.
func New(cfg Config) (*Store, error) {
	if len(cfg.Pairs) == 0 {
		return nil, errors.New("certstore: no certificate")
	}
	if cfg.Logger == nil {
		return nil, errors.New("certstore: nil logger")
	}
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	if cfg.NextProtos == nil {
		cfg.NextProtos = []string{"http/1.1"}
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 100 * time.Millisecond
	}
	s := &Store{cfg: cfg}
	st := &state{pairs: make([]*loaded, len(cfg.Pairs))}
	for i, p := range cfg.Pairs {
		l, err := loadPair(p)
		if err != nil {
			return nil, err
		}
		st.pairs[i] = l
	}
	if cfg.ClientCAFile != "" {
		ca, err := loadCA(cfg.ClientCAFile)
		if err != nil {
			return nil, err
		}
		st.ca = ca
	}
	s.state.Store(s.index(st))
	return s, nil
}

// TLSConfig returns the listener's config: each handshake reads the state
// in force, so a reload reaches new connections at once and leaves the
// open ones alone. With a client CA, it asks for client certificates.
func (s *Store) TLSConfig() *tls.Config {
	return s.outer(func(st *state) *tls.Config { return st.config })
}

// TLSConfigWithoutClientAuth is TLSConfig that never asks for a client
// certificate.
func (s *Store) TLSConfigWithoutClientAuth() *tls.Config {
	return s.outer(func(st *state) *tls.Config { return st.noClient })
}

func (s *Store) outer(pick func(*state) *tls.Config) *tls.Config {
	return &tls.Config{
		MinVersion: s.cfg.MinVersion,
		NextProtos: s.cfg.NextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return pick(s.state.Load()), nil
		},
	}
}

// Reload reads every file again. A pair or CA bundle whose files are
// unchanged is kept as is; one that fails to load keeps the one in force
// and is logged with its file and the reason. The error joins the failures.
func (s *Store) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.state.Load()
	st := &state{pairs: make([]*loaded, len(old.pairs)), ca: old.ca}
	changed := false
	var errs []error
	for i, p := range s.cfg.Pairs {
		st.pairs[i] = old.pairs[i]
		certPEM, keyPEM, err := readPair(p)
		if err == nil && bytes.Equal(certPEM, old.pairs[i].certPEM) && bytes.Equal(keyPEM, old.pairs[i].keyPEM) {
			continue
		}
		changed = true
		var l *loaded
		if err == nil {
			l, err = parsePair(p, certPEM, keyPEM)
		}
		if err != nil {
			errs = append(errs, err)
			s.cfg.Logger.Error("certificate reload failed; keeping the one in force", "cert_file", p.CertFile, "key_file", p.KeyFile, "error", err.Error())
			continue
		}
		st.pairs[i] = l
		s.cfg.Logger.Info("certificate reloaded", "cert_file", p.CertFile, "names", strings.Join(names(l.cert.Leaf), ","), "not_after", l.cert.Leaf.NotAfter)
	}
	if f := s.cfg.ClientCAFile; f != "" {
		data, err := os.ReadFile(f)
		if err != nil || !bytes.Equal(data, old.ca.pem) {
			changed = true
			ca, err := loadCA(f)
			if err != nil {
				errs = append(errs, err)
				s.cfg.Logger.Error("client CA reload failed; keeping the one in force", "client_ca_file", f, "error", err.Error())
			} else {
				st.ca = ca
				s.cfg.Logger.Info("client CA reloaded", "client_ca_file", f)
			}
		}
	}
	if !changed {
		return nil
	}
	s.state.Store(s.index(st))
	if s.cfg.OnReload != nil {
		s.cfg.OnReload(len(errs) == 0)
	}
	return errors.Join(errs...)
}

// index builds st's name maps and the tls.Config handshakes use.
func (s *Store) index(st *state) *state {
	st.exact, st.wildcard = map[string]int{}, map[string]int{}
	for i, l := range st.pairs {
		for _, n := range names(l.cert.Leaf) {
			n = strings.ToLower(n)
			m, key := st.exact, n
			if suffix, ok := strings.CutPrefix(n, "*."); ok {
				m, key = st.wildcard, suffix
			}
			if _, taken := m[key]; !taken { // the first pair naming it wins
				m[key] = i
			}
		}
	}
	st.config = &tls.Config{
		MinVersion: s.cfg.MinVersion,
		NextProtos: s.cfg.NextProtos,
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return st.pairs[st.pick(h.ServerName).Index].cert, nil
		},
	}
	st.noClient = st.config.Clone()
	if st.ca != nil {
		st.config.ClientCAs = st.ca.pool
		st.config.ClientAuth = s.cfg.ClientAuth
	}
	return st
}

func readPair(p Pair) (certPEM, keyPEM []byte, err error) {
	if certPEM, err = os.ReadFile(p.CertFile); err != nil {
		return nil, nil, fmt.Errorf("reading certificate: %w", err)
	}
	if keyPEM, err = os.ReadFile(p.KeyFile); err != nil {
		return nil, nil, fmt.Errorf("reading key: %w", err)
	}
	return certPEM, keyPEM, nil
}

func loadPair(p Pair) (*loaded, error) {
	certPEM, keyPEM, err := readPair(p)
	if err != nil {
		return nil, err
	}
	return parsePair(p, certPEM, keyPEM)
}

// parsePair checks that the key is the certificate's; a pair replaced one
// file at a time fails here until both are in place.
func parsePair(p Pair, certPEM, keyPEM []byte) (*loaded, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w", p.CertFile, p.KeyFile, err)
	}
	if cert.Leaf == nil { // GODEBUG=x509keypairleaf=0 leaves it out
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s: %w", p.CertFile, err)
		}
	}
	return &loaded{certPEM: certPEM, keyPEM: keyPEM, cert: &cert}, nil
}

func loadCA(file string) (*loadedCA, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", file)
	}
	return &loadedCA{pem: data, pool: pool}, nil
}

// names are what a certificate answers for: its DNS names, else its
// subject's common name.
func names(c *x509.Certificate) []string {
	if len(c.DNSNames) > 0 {
		return c.DNSNames
	}
	if c.Subject.CommonName != "" {
		return []string{c.Subject.CommonName}
	}
	return nil
}
