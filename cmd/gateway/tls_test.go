package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/certtest"
)

var plainLine = regexp.MustCompile(`plain HTTP listening" addr=(\S+)`)

// tlsSite is a config directory with a CA, a default certificate in a
// Kubernetes-style Secret directory (tls/) and one for api.example.test.
type tlsSite struct {
	ca     *certtest.CA
	dir    string
	secret *certtest.SecretDir
}

func newTLSSite(t *testing.T) *tlsSite {
	t.Helper()
	s := &tlsSite{ca: certtest.NewCA(t, "test CA"), dir: t.TempDir()}
	s.secret = &certtest.SecretDir{Dir: filepath.Join(s.dir, "tls")}
	if err := os.Mkdir(s.secret.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s.swap(t, "default.test")
	c, k := s.ca.Issue(t, certtest.Leaf{CommonName: "api", DNSNames: []string{"api.example.test"}})
	s.write(t, "api.crt", c)
	s.write(t, "api.key", k)
	return s
}

// swap publishes a new default certificate for name, as Kubernetes updates
// a Secret: one rename of its "..data" symlink.
func (s *tlsSite) swap(t *testing.T, names ...string) {
	t.Helper()
	c, k := s.ca.Issue(t, certtest.Leaf{CommonName: names[0], DNSNames: names})
	s.secret.Write(t, map[string][]byte{"tls.crt": c, "tls.key": k})
}

func (s *tlsSite) write(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.dir, name), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// config writes gateway.yaml with the server and admin sections given and
// an unlimited route to the echo upstream; it returns its path.
func (s *tlsSite) config(t *testing.T, server, admin string) string {
	t.Helper()
	yaml := fmt.Sprintf(`server:
  listen: 127.0.0.1:0
  tls:
    certificates:
      - {cert_file: tls/tls.crt, key_file: tls/tls.key}
      - {cert_file: api.crt, key_file: api.key}
%s
admin:
  listen: 127.0.0.1:0
%s
routes:
  - {name: api, upstream: "builtin:echo"}
`, server, admin)
	s.write(t, "gateway.yaml", []byte(yaml))
	return filepath.Join(s.dir, "gateway.yaml")
}

// client trusts the site's CA and names sni; keepAlive false makes every
// request a new connection, with its own handshake.
func (s *tlsSite) client(sni string, keepAlive bool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: s.ca.Pool(), ServerName: sni},
		DisableKeepAlives: !keepAlive,
	}}
}

// httpsBase is the gateway's address over TLS.
func httpsBase(g *gateway) string { return strings.Replace(g.base, "http://", "https://", 1) }

// servedName sends GET / and returns the first DNS name of the certificate
// the connection got.
func servedName(t *testing.T, c *http.Client, url string) (string, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return resp.TLS.PeerCertificates[0].DNSNames[0], nil
}

func TestTLSListenerServesBySNI(t *testing.T) {
	site := newTLSSite(t)
	g := startGateway(t, "tls", site.config(t, "", "  tls: true"))
	base := httpsBase(g)
	for sni, want := range map[string]string{
		"api.example.test":   "api.example.test",
		"default.test":       "default.test",
		"other.example.test": "default.test", // no wildcard: the first pair
	} {
		c := site.client(sni, false)
		c.Transport.(*http.Transport).TLSClientConfig.InsecureSkipVerify = sni == "other.example.test"
		got, err := servedName(t, c, base+"/")
		if err != nil || got != want {
			t.Errorf("SNI %s: served %q (%v), want %q", sni, got, err, want)
		}
	}
	// A plain-HTTP request to the TLS port is refused, never served.
	if resp, err := http.Get(g.base + "/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS listener: got %d, want 400", resp.StatusCode)
		}
	}
	// The admin listener speaks TLS with the same certificates.
	adm := "https://" + g.waitLog(t, 0, adminLine)[1]
	resp, err := site.client("default.test", false).Get(adm + "/healthz")
	if err != nil {
		t.Fatalf("admin over TLS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin /healthz over TLS: got %d, want 200", resp.StatusCode)
	}
}

func TestTLSPlainListenerRedirects(t *testing.T) {
	site := newTLSSite(t)
	g := startGateway(t, "redirect", site.config(t, "    plain_listen: 127.0.0.1:0", ""))
	plain := "http://" + g.waitLog(t, 0, plainLine)[1]
	_, tlsPort, _ := strings.Cut(strings.TrimPrefix(g.base, "http://"), ":")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodPost, plain+"/v1/things?a=1", strings.NewReader("body"))
	req.Host = "api.example.test"
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := "https://api.example.test:" + tlsPort + "/v1/things?a=1"
	if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != want {
		t.Fatalf("POST on the plain listener: got %d Location %q, want 308 %q", resp.StatusCode, resp.Header.Get("Location"), want)
	}
}

func TestTLSPlainListenerServes(t *testing.T) {
	site := newTLSSite(t)
	g := startGateway(t, "plain", site.config(t, "    plain_listen: 127.0.0.1:0\n    plain: serve", ""))
	plain := "http://" + g.waitLog(t, 0, plainLine)[1]
	resp, err := http.Get(plain + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET on the plain listener with plain: serve: got %d, want 200", resp.StatusCode)
	}
}

func TestTLSBadCertificateFailsStart(t *testing.T) {
	site := newTLSSite(t)
	site.write(t, "api.key", []byte("not a key"))
	path := site.config(t, "", "")
	g, exited := serveOutcome(t, "badcert", path)
	if !exited || g.code != 1 || !strings.Contains(g.output(), path+": server.tls: ") || !strings.Contains(g.output(), "api.key") {
		t.Fatalf("start with a bad key: exited %v code %d, want 1 naming the config and api.key:\n%s", exited, g.code, g.output())
	}
}

func TestCheckAndExplainShowTheCertificate(t *testing.T) {
	site := newTLSSite(t)
	path := site.config(t, "", "")
	var out, errOut strings.Builder
	if code := run(context.Background(), []string{"check", "-config", path}, &out, &errOut); code != 0 {
		t.Fatalf("check: exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{filepath.Join(site.dir, "api.crt") + " (api.example.test; expires", "default.test"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	run(context.Background(), []string{"explain", "-config", path, "https://www.example.test/"}, &out, &errOut)
	if want := "tls/tls.crt (default.test; first match"; !strings.Contains(out.String(), want) {
		t.Errorf("explain output lacks %q:\n%s", want, out.String())
	}
}
