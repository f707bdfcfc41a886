package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/certstore"
	"github.com/ratelimit-gateway/gateway/metrics"
	"github.com/ratelimit-gateway/gateway/policies"
)

// newCertStore loads server.tls's certificates: nil without any. m may be
// nil (check and explain count nothing).
func newCertStore(snap *policies.Snapshot, log *slog.Logger, m *metrics.Metrics) (*certstore.Store, error) {
	t := snap.Config.Server.TLS
	if !t.Enabled() {
		return nil, nil
	}
	cfg := certstore.Config{
		MinVersion: tls.VersionTLS12,
		ClientAuth: tls.RequireAndVerifyClientCert,
		Logger:     log,
		OnReload:   m.CertificateReload,
		NextProtos: alpnProtocols(snap.Config.Server.Protocols),
	}
	if t.MinVersion == policies.TLSVersion13 {
		cfg.MinVersion = tls.VersionTLS13
	}
	if t.ClientAuth == policies.ClientAuthVerifyIfGiven {
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	if t.ClientCAFile != "" {
		cfg.ClientCAFile = policies.ResolvePath(snap.Source, t.ClientCAFile)
	}
	for _, c := range t.Certificates {
		cfg.Pairs = append(cfg.Pairs, certstore.Pair{
			CertFile: policies.ResolvePath(snap.Source, c.CertFile),
			KeyFile:  policies.ResolvePath(snap.Source, c.KeyFile),
		})
	}
	store, err := certstore.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: server.tls: %w", snap.Source, err)
	}
	m.WatchCertificates(func() []metrics.Certificate {
		var out []metrics.Certificate
		for _, c := range store.Certificates() {
			out = append(out, metrics.Certificate{File: c.Pair.CertFile, NotAfter: c.NotAfter})
		}
		return out
	})
	return store, nil
}

// reload puts the config and the certificate files in force again: SIGHUP
// and /admin/reload. The outcomes are logged and counted where they happen.
func (p *process) reload() error {
	err := p.watcher.Reload()
	if p.certs != nil {
		if cerr := p.certs.Reload(); err == nil {
			err = cerr
		}
	}
	return err
}

// listenPlain opens server.tls.plain_listen beside the TLS listener: the
// routes (plain: serve) or a 308 to https (plain: redirect), which keeps
// the method and body.
func (p *process) listenPlain(tlsAddr net.Addr, newServer func(http.Handler) clientServer) error {
	t := p.snap.Config.Server.TLS
	if t.PlainListen == "" {
		return nil
	}
	var h http.Handler = p.handler
	if t.Plain == policies.PlainRedirect {
		_, port, _ := net.SplitHostPort(tlsAddr.String())
		h = redirectToHTTPS(port)
	}
	ln, err := net.Listen("tcp", t.PlainListen)
	if err != nil {
		return fmt.Errorf("%s: server.tls.plain_listen: listening on %s: %w", p.snap.Source, t.PlainListen, err)
	}
	p.onClose(ln.Close)
	p.plainLn, p.plainSrv = ln, newServer(h)
	if p.snap.Config.Server.ProxyProtocol {
		p.plainLn = acceptProxyProtocol(ln, p.current, p.snap.Config.Server.ReadHeaderTimeout)
	}
	p.log.Info("plain HTTP listening", "addr", ln.Addr().String(), "plain", t.Plain)
	return nil
}

// redirectToHTTPS answers 308 to the same host and target over https, on
// port (left out when 443).
func redirectToHTTPS(port string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if host == "" || strings.ContainsAny(host, "/\\@") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"code":40000,"message":"a redirect to https needs the request's Host"}`)
			return
		}
		if port != "443" {
			host = net.JoinHostPort(host, port)
		}
		http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
}

// describeServed says which certificate a name gets and why, for check and
// explain.
func describeServed(store *certstore.Store, name string) string {
	c, choice := store.Served(name)
	return fmt.Sprintf("%s (%s; %s match; expires %s)", c.Pair.CertFile, strings.Join(c.Names, ", "), choice.Match, c.NotAfter.UTC().Format(time.RFC3339))
}

// printTLS lists, for check, the certificates server.tls serves.
func printTLS(w io.Writer, snap *policies.Snapshot) error {
	store, err := newCertStore(snap, slog.New(slog.DiscardHandler), nil)
	if err != nil || store == nil {
		return err
	}
	t := snap.Config.Server.TLS
	clients := "none asked"
	if t.ClientCAFile != "" {
		clients = t.ClientAuth + ", signed by " + t.ClientCAFile
	}
	fmt.Fprintf(w, "\ntls on %s: min version %s, client certificates: %s\n", snap.Config.Server.Listen, t.MinVersion, clients)
	for i, c := range store.Certificates() {
		fmt.Fprintf(w, "  %s (%s; expires %s)\n", c.Pair.CertFile, strings.Join(c.Names, ", "), c.NotAfter.UTC().Format(time.RFC3339))
		if i == 0 {
			fmt.Fprintf(w, "    served too to a name no certificate has\n")
		}
	}
	return nil
}

// explainTLS is the certificate a client naming host is served ("" without
// server.tls).
func explainTLS(snap *policies.Snapshot, host string) (string, error) {
	store, err := newCertStore(snap, slog.New(slog.DiscardHandler), nil)
	if err != nil || store == nil {
		return "", err
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return describeServed(store, host), nil
}
