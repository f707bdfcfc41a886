package policies

import "net"

// TLSConfig makes server.listen a TLS listener. Zero (no certificates) keeps
// it plain HTTP. The contents of the files follow a reload (of the config,
// of the files themselves, SIGHUP, /admin/reload); the keys themselves take
// effect at start only.
type TLSConfig struct {
	// Certificates are the pairs served. A connection gets the pair whose
	// certificate names its SNI exactly, else one whose wildcard covers it,
	// else the first pair.
	Certificates []TLSCertificate `koanf:"certificates"`
	// MinVersion is the lowest TLS version accepted: 1.2 (default) or 1.3.
	MinVersion string `koanf:"min_version"`
	// ClientCAFile, when set, is a PEM bundle of the CAs that sign client
	// certificates (mutual TLS).
	ClientCAFile string `koanf:"client_ca_file"`
	// ClientAuth is what a client without a certificate that ClientCAFile
	// verifies gets: require (default: refused in the handshake) or
	// verify_if_given (served; a route with client_certificate: require
	// answers 401).
	ClientAuth string `koanf:"client_auth"`
	// PlainListen, when set, is a plain-HTTP listener beside the TLS one.
	PlainListen string `koanf:"plain_listen"`
	// Plain is what PlainListen does: redirect (default: 308 to https) or
	// serve (the routes, as the TLS listener does).
	Plain string `koanf:"plain"`
}

// TLSCertificate is one certificate and its private key, in PEM files. A
// relative path is relative to the directory of the config file.
type TLSCertificate struct {
	CertFile string `koanf:"cert_file"`
	KeyFile  string `koanf:"key_file"`
}

// Enabled reports whether server.listen speaks TLS.
func (t *TLSConfig) Enabled() bool { return len(t.Certificates) > 0 }

// The values of server.tls.min_version, server.tls.client_auth and
// server.tls.plain.
const (
	TLSVersion12              = "1.2"
	TLSVersion13              = "1.3"
	ClientAuthRequire         = "require"
	ClientAuthVerifyIfGiven   = "verify_if_given"
	PlainRedirect             = "redirect"
	PlainServe                = "serve"
	ClientCertificateRequire  = "require"
	defaultTLSMinVersion      = TLSVersion12
	defaultClientAuth         = ClientAuthRequire
	defaultPlain              = PlainRedirect
	serverTLSPlace            = "server.tls"
	serverTLSCertificatesPath = serverTLSPlace + ".certificates"
)

// ResolvePath returns a path named in the config file at configSource: a
// relative one is relative to that file's directory.
func ResolvePath(configSource, path string) string {
	return resolveKeysPath(configSource, path)
}

func (t *TLSConfig) applyDefaults() {
	setDefault(&t.MinVersion, defaultTLSMinVersion)
	setDefault(&t.ClientAuth, defaultClientAuth)
	setDefault(&t.Plain, defaultPlain)
}

func validateTLS(p *problems, c *Config) {
	validateCertificateTenants(p, c)
	t := &c.Server.TLS
	seen := map[string]int{}
	for i, pair := range t.Certificates {
		place := indexPlace(serverTLSCertificatesPath, i)
		if pair.CertFile == "" {
			p.add(place+".cert_file", "must name a PEM certificate file")
		} else if j, dup := seen[pair.CertFile]; dup {
			p.addf(place+".cert_file", "is %s[%d]'s too: name each certificate once", serverTLSCertificatesPath, j)
		} else {
			seen[pair.CertFile] = i
		}
		if pair.KeyFile == "" {
			p.add(place+".key_file", "must name a PEM private key file")
		}
	}
	if t.MinVersion != TLSVersion12 && t.MinVersion != TLSVersion13 {
		p.addf(serverTLSPlace+".min_version", "must be 1.2 or 1.3, got %q", t.MinVersion)
	}
	if t.ClientAuth != ClientAuthRequire && t.ClientAuth != ClientAuthVerifyIfGiven {
		p.addf(serverTLSPlace+".client_auth", "must be require or verify_if_given, got %q", t.ClientAuth)
	}
	if t.ClientAuth == ClientAuthVerifyIfGiven && t.ClientCAFile == "" {
		p.add(serverTLSPlace+".client_auth", "verify_if_given needs server.tls.client_ca_file: without it no client certificate is verified")
	}
	if t.Plain != PlainRedirect && t.Plain != PlainServe {
		p.addf(serverTLSPlace+".plain", "must be redirect or serve, got %q", t.Plain)
	}
	for i, rt := range c.Routes {
		switch place := indexPlace("routes", i) + ".client_certificate"; {
		case rt.ClientCertificate != "" && rt.ClientCertificate != ClientCertificateRequire:
			p.addf(place, `must be require, or absent, got %q`, rt.ClientCertificate)
		case rt.ClientCertificate != "" && t.ClientCAFile == "":
			p.add(place, "needs server.tls.client_ca_file: without it no client certificate is verified")
		}
	}
	if t.Enabled() {
		if t.PlainListen != "" {
			if _, _, err := net.SplitHostPort(t.PlainListen); err != nil {
				p.addf(serverTLSPlace+".plain_listen", "must be host:port, got %q", t.PlainListen)
			} else if _, port, _ := net.SplitHostPort(t.PlainListen); t.PlainListen == c.Server.Listen && port != "0" {
				p.addf(serverTLSPlace+".plain_listen", "is server.listen too (%s): the plain listener needs an address of its own", t.PlainListen)
			}
		}
		return
	}
	// Without a certificate the rest would be ignored: say so.
	for _, k := range []struct {
		key string
		set bool
	}{{"client_ca_file", t.ClientCAFile != ""}, {"plain_listen", t.PlainListen != ""}} {
		if k.set {
			p.addf(serverTLSPlace+"."+k.key, "needs %s: server.listen is plain HTTP without a certificate", serverTLSCertificatesPath)
		}
	}
	if c.Admin.TLS {
		p.addf("admin.tls", "needs %s: the admin listener serves their certificates", serverTLSCertificatesPath)
	}
}
