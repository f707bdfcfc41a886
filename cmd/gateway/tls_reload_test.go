package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/certtest"
)

// waitServed opens new connections to base naming sni until one is served
// a certificate whose first name is want, failing after 10s.
func waitServed(t *testing.T, site *tlsSite, base, sni, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := servedName(t, site.client(sni, false), base+"/")
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("new connections still served %q (%v) 10s after the swap, want %q", got, err, want)
		}
	}
}

// TestTLSCertificateSwapUnderFlood swaps the Secret's certificate twice
// while 64 clients send requests, half of them on a new connection each
// time: no request fails, and new connections get the new certificate.
func TestTLSCertificateSwapUnderFlood(t *testing.T) {
	const clients = 64
	site := newTLSSite(t)
	g := startGateway(t, "flood", site.config(t, "", ""))
	base := httpsBase(g)
	stop := make(chan struct{})
	var sent, failed atomic.Int64
	// progress hears every request's end, so that each swap happens while
	// the flood runs: at least 64 requests before each, and after the last.
	progress := make(chan struct{}, clients)
	awaitRequests := func(n int) {
		for range n {
			<-progress
		}
	}
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := range clients {
		c := site.client("default.test", i%2 == 0)
		wg.Go(func() {
			// Bounded: until both swaps are seen, at most 2,000 requests.
			for range 2000 {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				if _, err := servedName(t, c, base+"/"); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		})
	}
	for _, gen := range []string{"two.test", "three.test"} {
		awaitRequests(clients)
		start := time.Now()
		site.swap(t, gen, "default.test")
		waitServed(t, site, base, "default.test", gen)
		t.Logf("%s served to new connections %v after the swap", gen, time.Since(start).Round(time.Millisecond))
	}
	awaitRequests(clients)
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed during the swaps; the first: %v", n, sent.Load(), firstErr.Load())
	}
	if n := sent.Load(); n < clients {
		t.Fatalf("%d requests sent, want at least one a client", n)
	}
	t.Logf("%d requests over %d clients, none failed, through two swaps", sent.Load(), clients)
}

// TestTLSFailedReloadKeepsTheCertificate publishes a pair whose key is not
// the certificate's: the certificate in force is still served, the failure
// is logged with the file and counted, and /admin/reload says so.
func TestTLSFailedReloadKeepsTheCertificate(t *testing.T) {
	token := strings.Repeat("t", 32)
	site := newTLSSite(t)
	g := startGateway(t, "badswap", site.config(t, "", fmt.Sprintf("  token: %s", token)))
	base, adm := httpsBase(g), g.adminBase(t)
	from := g.logLen()
	c, _ := site.ca.Issue(t, certtest.Leaf{CommonName: "bad.test", DNSNames: []string{"bad.test"}})
	_, k := site.ca.Issue(t, certtest.Leaf{CommonName: "other", DNSNames: []string{"other"}})
	site.secret.Write(t, map[string][]byte{"tls.crt": c, "tls.key": k})
	code, body := adminDo(t, http.MethodPost, adm+"/admin/reload", token)
	if code != http.StatusUnprocessableEntity || !strings.Contains(string(body), "tls.crt") {
		t.Fatalf("/admin/reload with a bad pair: got %d %s, want 422 naming tls.crt", code, body)
	}
	g.waitLog(t, from, regexp.MustCompile(`certificate reload failed.*cert_file=\S*tls/tls.crt.*error=`))
	if got, err := servedName(t, site.client("default.test", false), base+"/"); err != nil || got != "default.test" {
		t.Fatalf("after the failed reload: served %q (%v), want default.test", got, err)
	}
	_, metrics := adminDo(t, http.MethodGet, adm+"/metrics", token)
	if !regexp.MustCompile(`gateway_tls_certificate_reloads_total\{result="failure"\} [1-9]`).Match(metrics) ||
		!regexp.MustCompile(`gateway_tls_certificate_expiry_timestamp_seconds\{cert_file="\S+tls/tls.crt"\} \d`).Match(metrics) {
		t.Fatalf("/metrics lacks the failure or the expiry:\n%s", grepLines(string(metrics), "gateway_tls_"))
	}
	// The pair put right is served, by the same reload.
	site.swap(t, "good.test", "default.test")
	if code, body := adminDo(t, http.MethodPost, adm+"/admin/reload", token); code != http.StatusOK {
		t.Fatalf("/admin/reload with a good pair: got %d %s", code, body)
	}
	if got, err := servedName(t, site.client("default.test", false), base+"/"); err != nil || got != "good.test" {
		t.Fatalf("after the good reload: served %q (%v), want good.test", got, err)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestSIGHUPCallsTheReload: the signal's handler calls the reload it is
// given: run gives it p.reload, the one /admin/reload calls (config and
// certificates both, see TestTLSFailedReloadKeepsTheCertificate).
func TestSIGHUPCallsTheReload(t *testing.T) {
	hup := make(chan os.Signal, 1)
	reloads := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		reloadOnHUP(ctx, hup, func() error { reloads <- struct{}{}; return nil }, slog.New(slog.DiscardHandler))
	}()
	hup <- syscall.SIGHUP
	<-reloads
	cancel()
	<-done
}
