package metrics

import (
	"testing"
	"time"
)

func TestCertificateMetrics(t *testing.T) {
	m := New()
	e := scrape(t, m)
	if got := e.value(t, "gateway_tls_certificate_reloads_total", "result=failure"); got != 0 {
		t.Fatalf("failures before any reload: got %v, want 0 (present from the start)", got)
	}
	if _, ok := e["gateway_tls_certificate_expiry_timestamp_seconds"]; ok {
		t.Fatal("an expiry series without a certificate")
	}
	notAfter := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	m.WatchCertificates(func() []Certificate { return []Certificate{{File: "/etc/tls/tls.crt", NotAfter: notAfter}} })
	m.CertificateReload(true)
	m.CertificateReload(false)
	m.CertificateReload(false)
	e = scrape(t, m)
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"gateway_tls_certificate_expiry_timestamp_seconds", "cert_file=/etc/tls/tls.crt", float64(notAfter.Unix())},
		{"gateway_tls_certificate_reloads_total", "result=success", 1},
		{"gateway_tls_certificate_reloads_total", "result=failure", 2},
	} {
		if got := e.value(t, c.name, c.labels); got != c.want {
			t.Errorf("%s{%s}: got %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
