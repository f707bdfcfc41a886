package policies

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/url"
	"slices"
	"testing"
)

func TestTLSValidation(t *testing.T) {
	const pair = "server:\n  tls:\n    certificates: [{cert_file: a.crt, key_file: a.key}]\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"no key file", "server:\n  tls:\n    certificates: [{cert_file: a.crt}]\n" + withPolicy("{key: ip, rate: 1}"),
			"gateway.yaml: server.tls.certificates[0].key_file: must name a PEM private key file"},
		{"a file twice", "server:\n  tls:\n    certificates: [{cert_file: a.crt, key_file: a.key}, {cert_file: a.crt, key_file: b.key}]\n" + withPolicy("{key: ip, rate: 1}"),
			"gateway.yaml: server.tls.certificates[1].cert_file: is server.tls.certificates[0]'s too: name each certificate once"},
		{"min version", pair + "    min_version: \"1.1\"\n" + withPolicy("{key: ip, rate: 1}"),
			`gateway.yaml: server.tls.min_version: must be 1.2 or 1.3, got "1.1"`},
		{"verify_if_given without a client CA", pair + "    client_auth: verify_if_given\n" + withPolicy("{key: ip, rate: 1}"),
			"gateway.yaml: server.tls.client_auth: verify_if_given needs server.tls.client_ca_file: without it no client certificate is verified"},
		{"plain", pair + "    plain: open\n" + withPolicy("{key: ip, rate: 1}"),
			`gateway.yaml: server.tls.plain: must be redirect or serve, got "open"`},
		{"plain listener without tls", "server:\n  tls:\n    plain_listen: 127.0.0.1:8081\n" + withPolicy("{key: ip, rate: 1}"),
			"gateway.yaml: server.tls.plain_listen: needs server.tls.certificates: server.listen is plain HTTP without a certificate"},
		{"plain listener on the tls port", pair + "    plain_listen: 127.0.0.1:8080\n" + withPolicy("{key: ip, rate: 1}"),
			"gateway.yaml: server.tls.plain_listen: is server.listen too (127.0.0.1:8080): the plain listener needs an address of its own"},
		{"admin tls without tls", "admin: {tls: true}\n" + withPolicy("{key: ip, rate: 1}"),
			"gateway.yaml: admin.tls: needs server.tls.certificates: the admin listener serves their certificates"},
		{"cert key without a client CA", pair + withPolicy("{key: cert:san:uri, rate: 1}"),
			`gateway.yaml: policies.p.key: "cert:san:uri" reads the client certificate: set server.tls.client_ca_file, or no request would have one`},
		{"unknown cert field", pair + "    client_ca_file: ca.pem\n" + withPolicy("{key: cert:issuer, rate: 1}"),
			`gateway.yaml: policies.p.key: "cert:issuer": want cert:subject, cert:san:dns or cert:san:uri`},
		{"route asks without a client CA", pair + withRoute(`{name: r, upstream: "http://127.0.0.1:9000", client_certificate: require}`),
			"gateway.yaml: routes[0].client_certificate: needs server.tls.client_ca_file: without it no client certificate is verified"},
		{"certificate tenant without a client CA", pair + "tenants:\n  certificates: [{key: cert:san:uri, value: \"spiffe://x/a\", tenant: a}]\n" + withPolicy("{key: tenant, rate: 1}"),
			"gateway.yaml: tenants.certificates: needs server.tls.client_ca_file: without it no client certificate is verified"},
		{"certificate tenant key", pair + "    client_ca_file: ca.pem\ntenants:\n  certificates: [{key: cert:issuer, value: x, tenant: a}]\n" + withPolicy("{key: tenant, rate: 1}"),
			`gateway.yaml: tenants.certificates[0].key: must be cert:subject, cert:san:dns or cert:san:uri, got "cert:issuer"`},
		{"certificate tenant twice", pair + "    client_ca_file: ca.pem\ntenants:\n  certificates: [{key: cert:san:dns, value: a.test, tenant: a}, {key: cert:san:dns, value: a.test, tenant: b}]\n" + withPolicy("{key: tenant, rate: 1}"),
			`gateway.yaml: tenants.certificates[1]: binds cert:san:dns "a.test" again (also tenants.certificates[0])`},
		{"route client_certificate value", pair + "    client_ca_file: ca.pem\n" + withRoute(`{name: r, upstream: "http://127.0.0.1:9000", client_certificate: optional}`),
			`gateway.yaml: routes[0].client_certificate: must be require, or absent, got "optional"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if lines := errorLines(t, tc.yaml); !slices.Contains(lines, tc.want) {
				t.Errorf("got %q, want a line %q", lines, tc.want)
			}
		})
	}
}

func TestCertKeyParts(t *testing.T) {
	leaf := &x509.Certificate{
		Subject:  pkix.Name{CommonName: "svc", Organization: []string{"Example"}},
		DNSNames: []string{"a.example.test", "b.example.test"},
		URIs:     []*url.URL{{Scheme: "spiffe", Host: "example.test", Path: "/ns/a"}},
	}
	verified := &http.Request{TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}}
	unverified := &http.Request{TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}}
	for _, tc := range []struct {
		spec string
		r    *http.Request
		want string
		ok   bool
	}{
		{"cert:subject", verified, "CN=svc,O=Example", true},
		{"cert:san:dns", verified, "a.example.test,b.example.test", true},
		{"cert:san:uri", verified, "spiffe://example.test/ns/a", true},
		{"cert:san:uri", unverified, "", false}, // never a certificate the handshake did not verify
		{"cert:subject", &http.Request{}, "", false},
	} {
		parts, err := parseKeySpec(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := keyFunc(parts)(tc.r, &Subject{})
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %q %v, want %q %v", tc.spec, got, ok, tc.want, tc.ok)
		}
	}
}

func TestLookupCertificate(t *testing.T) {
	snap := mustParse(t, `server:
  tls:
    certificates: [{cert_file: a.crt, key_file: a.key}]
    client_ca_file: ca.pem
tenants:
  certificates:
    - {key: cert:san:dns, value: B.example.test, tenant: dns}
    - {key: cert:san:uri, value: "spiffe://example.test/ns/a", tenant: uri, plan: pro}
`+withPolicy("{key: tenant, rate: 1}"))
	leaf := func(dns string, uri *url.URL) *http.Request {
		c := &x509.Certificate{DNSNames: []string{dns}}
		if uri != nil {
			c.URIs = []*url.URL{uri}
		}
		return &http.Request{TLS: &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{c}}}}
	}
	spiffe := &url.URL{Scheme: "spiffe", Host: "example.test", Path: "/ns/a"}
	for _, tc := range []struct {
		name string
		r    *http.Request
		want Tenant
		ok   bool
	}{
		{"dns name, any case", leaf("b.example.test", nil), Tenant{Name: "dns"}, true},
		{"uri", leaf("z.test", spiffe), Tenant{Name: "uri", Plan: "pro"}, true},
		{"the first entry matched wins", leaf("b.example.test", spiffe), Tenant{Name: "dns"}, true},
		{"unbound", leaf("z.test", nil), Tenant{}, false},
		{"unverified", &http.Request{TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{DNSNames: []string{"b.example.test"}}}}}, Tenant{}, false},
	} {
		got, ok := snap.Tenants.LookupCertificate(tc.r)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
