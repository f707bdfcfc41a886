package policies

import (
	"net/http"
	"strings"
)

// certFields are the cert:NAME key parts: what of the verified client
// certificate (mutual TLS) identifies the caller.
var certFields = map[string]func(r *http.Request) string{
	// The subject's distinguished name, as RFC 2253 writes it.
	"subject": func(r *http.Request) string { return r.TLS.VerifiedChains[0][0].Subject.String() },
	// Every DNS (or URI) name of the certificate, in its order: one value
	// per certificate, so a second name never makes a second bucket.
	"san:dns": func(r *http.Request) string { return strings.Join(r.TLS.VerifiedChains[0][0].DNSNames, ",") },
	"san:uri": func(r *http.Request) string {
		uris := r.TLS.VerifiedChains[0][0].URIs
		out := make([]string, len(uris))
		for i, u := range uris {
			out[i] = u.String()
		}
		return strings.Join(out, ",")
	},
}

// certValue reads field of the request's client certificate, only when the
// TLS handshake verified it against server.tls.client_ca_file: a
// certificate the gateway did not verify identifies nobody.
func certValue(r *http.Request, field string) (string, bool) {
	if r == nil || !VerifiedClientCertificate(r) {
		return "", false
	}
	v := certFields[field](r)
	return v, v != ""
}

// VerifiedClientCertificate reports whether r came with a client
// certificate that the TLS handshake verified.
func VerifiedClientCertificate(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0
}

// readsCert reports whether parsed key parts read the client certificate.
func readsCert(parts []keyPart) bool {
	for _, p := range parts {
		if p.source == sourceCert {
			return true
		}
	}
	return false
}
