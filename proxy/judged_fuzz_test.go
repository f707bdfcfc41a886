package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzCleanHeader: whatever names a client sends (any case, "_" for "-",
// named in Connection), no client address header from an untrusted peer,
// no URL-override header and no method-override header (when no route
// names one) survives the canonical pass, and a second pass finds nothing
// more to remove: what is judged is what is forwarded.
func FuzzCleanHeader(f *testing.F) {
	f.Add("X_Forwarded_For", "x-real-ip", "Connection", "X-Original-URL", "x_http_method_override")
	f.Add("Client_IP", "Upgrade", "HTTP2_Settings", "X-Forwarded-Port", "Forwarded")
	f.Add("X-API-Key", "Te", "Keep-Alive", "True_Client_Ip", "X_Rewrite_Url")
	f.Fuzz(func(t *testing.T, a, b, c, d, e string) {
		h := http.Header{}
		for i, name := range []string{a, b, c, d, e} {
			if name == "" || strings.ContainsAny(name, " :\r\n\x00") {
				continue
			}
			h.Add(name, []string{"6.6.6.6", "/closed", "DELETE", "upgrade, " + a, "trailers"}[i])
		}
		rules := headerRules{}
		out := cleanHeader(h, rules)
		if out == nil {
			out = h
		}
		for name := range out {
			switch kindOf(spelledAs(http.CanonicalHeaderKey(name))) {
			case clientAddrHeader, urlOverrideHeader, methodOverrideHeader:
				t.Fatalf("%q survived (sent %v, kept %v)", name, h, out)
			}
		}
		if again := cleanHeader(out, rules); again != nil {
			for name := range out {
				if _, ok := again[name]; !ok && name != "Connection" && name != "Upgrade" {
					t.Fatalf("a second pass removed %q from %v", name, out)
				}
			}
		}
	})
}
