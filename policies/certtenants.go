package policies

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// CertificateTenantConfig binds a client certificate identity to a tenant,
// as an entry of tenants.keys binds an API key.
type CertificateTenantConfig struct {
	// Key is what of the verified certificate is matched: cert:subject,
	// cert:san:dns or cert:san:uri.
	Key string `koanf:"key"`
	// Value is the subject (as RFC 2253 writes it), or one DNS or URI name
	// the certificate must have.
	Value  string `koanf:"value"`
	Tenant string `koanf:"tenant"`
	Plan   string `koanf:"plan"`
}

// CertificateTenant is one compiled entry of tenants.certificates.
type CertificateTenant struct {
	field, value string
	Tenant       Tenant
}

// LookupCertificate returns the tenant of r's verified client certificate:
// the first entry of tenants.certificates, in config order, that it
// matches. A certificate the handshake did not verify has none.
func (t *Tenants) LookupCertificate(r *http.Request) (Tenant, bool) {
	if len(t.Certificates) == 0 || !VerifiedClientCertificate(r) {
		return Tenant{}, false
	}
	leaf := r.TLS.VerifiedChains[0][0]
	for _, e := range t.Certificates {
		var match bool
		switch e.field {
		case "subject":
			match = leaf.Subject.String() == e.value
		case "san:dns":
			match = slices.ContainsFunc(leaf.DNSNames, func(n string) bool { return strings.EqualFold(n, e.value) })
		case "san:uri":
			match = slices.ContainsFunc(leaf.URIs, func(u *url.URL) bool { return u.String() == e.value })
		}
		if match {
			return e.Tenant, true
		}
	}
	return Tenant{}, false
}

func compileCertificateTenants(c *Config) []CertificateTenant {
	var out []CertificateTenant
	for _, e := range c.Tenants.Certificates {
		field, _ := strings.CutPrefix(strings.ToLower(e.Key), "cert:")
		out = append(out, CertificateTenant{field: field, value: e.Value, Tenant: Tenant{Name: e.Tenant, Plan: e.Plan}})
	}
	return out
}

func validateCertificateTenants(p *problems, c *Config) {
	seen := map[[2]string]int{}
	for i, e := range c.Tenants.Certificates {
		place := indexPlace("tenants.certificates", i)
		field, isCert := strings.CutPrefix(strings.ToLower(e.Key), "cert:")
		if _, known := certFields[field]; !isCert || !known {
			p.addf(place+".key", "must be cert:subject, cert:san:dns or cert:san:uri, got %q", e.Key)
		}
		if e.Value == "" {
			p.add(place+".value", "required: the subject, or the DNS or URI name, that binds the tenant")
		}
		if e.Tenant == "" {
			p.add(place+".tenant", "required")
		}
		id := [2]string{field, e.Value}
		if j, dup := seen[id]; dup {
			p.addf(place, "binds %s %q again (also tenants.certificates[%d])", e.Key, e.Value, j)
		} else {
			seen[id] = i
		}
		if i == 0 && c.Server.TLS.ClientCAFile == "" {
			p.add("tenants.certificates", "needs server.tls.client_ca_file: without it no client certificate is verified")
		}
	}
}
