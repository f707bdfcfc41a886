package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/certtest"
)

// The TLS targets terminate TLS in front of the same upstream, each beside
// its plain twin. wrk speaks HTTP/1.1 over TLS on keep-alive connections:
// each of its connections shakes hands once, so a run measures what TLS
// costs a request on an open connection.
const (
	tNginxTLS   = "nginx-proxy-tls"
	tCaddyTLS   = "caddy-tls"
	tGatewayTLS = "gateway-local-tls"
)

// tlsTargets are what -only tls runs: the TLS targets and their plain
// twins, with gateway-local-stdserver, the gateway on the server its TLS
// connections go to (net/http's), without TLS.
var tlsTargets = []string{tNginxProxy, tCaddy, tGatewayLocal, tGatewayStdSrv, tNginxTLS, tCaddyTLS, tGatewayTLS}

// tlsPairs are the TLS ratios, of rps and of CPU a request: each TLS
// target over its plain twin, and the gateway over the others, all
// terminating TLS.
var tlsPairs = [][2]string{
	{tGatewayTLS, tGatewayLocal}, {tGatewayTLS, tGatewayStdSrv}, {tCaddyTLS, tCaddy}, {tNginxTLS, tNginxProxy},
	{tGatewayTLS, tCaddyTLS}, {tGatewayTLS, tNginxTLS},
}

// scheme is the URL scheme of the target named name and, for a TLS target,
// the run's certificate and key files, made at the first call: one
// self-signed ECDSA P-256 pair for localhost that every TLS target serves
// (wrk does not verify it).
func (l *lab) scheme(name string) (scheme, cert, key string, err error) {
	if !strings.HasSuffix(name, "-tls") {
		return "http", "", "", nil
	}
	cert, key = filepath.Join(l.dir, "tls", "cert.pem"), filepath.Join(l.dir, "tls", "key.pem")
	if _, err := os.Stat(key); err == nil {
		return "https", cert, key, nil
	}
	var certPEM, keyPEM []byte
	err = l.withTB(func() {
		certPEM, keyPEM = certtest.NewCA(&l.tb, "bench").Issue(&l.tb, certtest.Leaf{CommonName: "localhost", DNSNames: []string{"localhost"}})
	})
	if err == nil {
		err = os.MkdirAll(filepath.Dir(cert), 0o755)
	}
	if err == nil {
		err = os.WriteFile(cert, certPEM, 0o644)
	}
	if err == nil {
		err = os.WriteFile(key, keyPEM, 0o600)
	}
	return "https", cert, key, err
}

// tlsRatios are the RATIO lines of tlsPairs: rps, then CPU a request
// (perf's task-clock of the target's servers over its requests).
func tlsRatios(runs map[string][]sample) []ratio {
	units := []struct {
		prefix string
		f      func(sample) float64
	}{
		{"", func(r sample) float64 { return r.RPS }},
		{"cpu-per-req ", func(r sample) float64 { return usec(r.CPU) / float64(max(r.Requests, 1)) }},
	}
	var out []ratio
	for _, u := range units {
		for _, p := range tlsPairs {
			a, okA := median(runs, p[0], u.f)
			b, okB := median(runs, p[1], u.f)
			out = append(out, div(u.prefix+p[0]+"/"+p[1], a, b, okA && okB))
		}
	}
	return out
}
