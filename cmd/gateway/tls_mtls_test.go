package main

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/certtest"
)

// mtlsClient presents a client certificate that ca signed for uri
// (nil ca: no certificate).
func mtlsClient(t *testing.T, site *tlsSite, ca *certtest.CA, uri string) *http.Client {
	t.Helper()
	c := site.client("default.test", false)
	if ca != nil {
		certPEM, keyPEM := ca.Issue(t, certtest.Leaf{CommonName: "client", URIs: []string{uri}, Client: true})
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		c.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{pair}
	}
	return c
}

func TestMutualTLSRequiredRefusesInTheHandshake(t *testing.T) {
	site := newTLSSite(t)
	clients := certtest.NewCA(t, "clients")
	site.write(t, "clients.pem", clients.PEM())
	g := startGateway(t, "mtls", site.config(t, "    client_ca_file: clients.pem", ""))
	base := httpsBase(g)
	for name, tc := range map[string]struct {
		ca   *certtest.CA
		pass bool
	}{
		"no certificate":              {nil, false},
		"a certificate of another CA": {certtest.NewCA(t, "stranger"), false},
		"a certificate the CA signed": {clients, true},
	} {
		resp, err := mtlsClient(t, site, tc.ca, "spiffe://example.test/a").Get(base + "/")
		if err == nil {
			resp.Body.Close()
		}
		if tc.pass != (err == nil && resp.StatusCode == http.StatusOK) {
			t.Errorf("%s: got %v, want served %v", name, err, tc.pass)
		}
	}
}

func TestMutualTLSRouteAsksAndPolicyKeysOnTheCertificate(t *testing.T) {
	site := newTLSSite(t)
	clients := certtest.NewCA(t, "clients")
	site.write(t, "clients.pem", clients.PEM())
	yaml := `server:
  listen: 127.0.0.1:0
  tls:
    certificates: [{cert_file: tls/tls.crt, key_file: tls/tls.key}]
    client_ca_file: clients.pem
    client_auth: verify_if_given
admin: {listen: ""}
policies:
  per-workload:
    key: cert:san:uri
    rate: 2
    per: 1h
    burst: 2
routes:
  - name: secure
    match: {path_prefix: /secure/}
    upstream: builtin:echo
    client_certificate: require
    policies: [per-workload]
  - name: open
    match: {path_prefix: /}
    upstream: builtin:echo
`
	site.write(t, "gateway.yaml", []byte(yaml))
	g := startGateway(t, "mtls-route", site.dir+"/gateway.yaml")
	base := httpsBase(g)
	get := func(c *http.Client, path string) (int, string) {
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	anon := mtlsClient(t, site, nil, "")
	if code, _ := get(anon, "/open"); code != http.StatusOK {
		t.Fatalf("open route without a certificate: got %d, want 200", code)
	}
	code, body := get(anon, "/secure/x")
	var e struct{ Code int }
	if code != http.StatusUnauthorized || json.Unmarshal([]byte(body), &e) != nil || e.Code != 40100 {
		t.Fatalf("secure route without a certificate: got %d %s, want 401 with code 40100", code, body)
	}
	a := mtlsClient(t, site, clients, "spiffe://example.test/a")
	b := mtlsClient(t, site, clients, "spiffe://example.test/b")
	for i, want := range []int{200, 200, 429} {
		if code, body := get(a, "/secure/x"); code != want {
			t.Fatalf("workload a, request %d: got %d %s, want %d", i+1, code, body, want)
		}
	}
	// Another identity has a bucket of its own.
	if code, body := get(b, "/secure/x"); code != http.StatusOK {
		t.Fatalf("workload b: got %d %s, want 200", code, body)
	}
}

// TestTenantBoundToACertificate: a tenant's policy counts a workload by its
// certificate, as it counts an API key's holder; a certificate bound to no
// tenant lacks the key.
func TestTenantBoundToACertificate(t *testing.T) {
	site := newTLSSite(t)
	clients := certtest.NewCA(t, "clients")
	site.write(t, "clients.pem", clients.PEM())
	site.write(t, "gateway.yaml", []byte(`server:
  listen: 127.0.0.1:0
  tls:
    certificates: [{cert_file: tls/tls.crt, key_file: tls/tls.key}]
    client_ca_file: clients.pem
admin: {listen: ""}
tenants:
  certificates:
    - {key: cert:san:uri, value: "spiffe://example.test/billing", tenant: billing, plan: small}
policies:
  per-tenant:
    key: tenant
    rate: 100
    per: 1h
    plans: {small: 2}
    on_missing_key: reject
routes:
  - {name: api, match: {path_prefix: /}, upstream: "builtin:echo", policies: [per-tenant]}
`))
	g := startGateway(t, "cert-tenant", site.dir+"/gateway.yaml")
	base := httpsBase(g)
	status := func(c *http.Client) int {
		resp, err := c.Get(base + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	billing := mtlsClient(t, site, clients, "spiffe://example.test/billing")
	for i, want := range []int{200, 200, 429} { // plan small: 2 an hour
		if got := status(billing); got != want {
			t.Fatalf("billing, request %d: got %d, want %d", i+1, got, want)
		}
	}
	if got := status(mtlsClient(t, site, clients, "spiffe://example.test/other")); got != http.StatusUnauthorized {
		t.Fatalf("a certificate bound to no tenant: got %d, want 401", got)
	}
}
