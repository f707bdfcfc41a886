package proxy

import (
	"crypto/tls"
	"net/http"
	"net/http/httputil"
	"reflect"
	"testing"
)

// TestSetXForwardedAsHttputil sets the X-Forwarded fields with
// setXForwarded and with httputil's SetXForwarded on the same requests and
// compares what goes upstream.
func TestSetXForwardedAsHttputil(t *testing.T) {
	for _, c := range []struct {
		name, remote, host string
		prior              []string
		tls                bool
	}{
		{"an IPv4 peer", "192.0.2.1:40000", "gw.example", nil, false},
		{"an IPv6 peer over TLS", "[2001:db8::1]:443", "gw.example:8443", nil, true},
		{"a chain from a trusted proxy", "10.0.0.2:1", "h", []string{"198.51.100.7", "203.0.113.9, 10.0.0.1"}, false},
		{"an empty chain", "10.0.0.2:1", "h", []string{}, false},
		{"a peer with no port", "10.0.0.2", "h", []string{"198.51.100.7"}, false},
		{"no peer", "", "", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			build := func() *httputil.ProxyRequest {
				in := &http.Request{RemoteAddr: c.remote, Host: c.host, Header: http.Header{"X-Forwarded-Host": {"spoofed"}}}
				if c.tls {
					in.TLS = &tls.ConnectionState{}
				}
				out := &http.Request{Header: http.Header{"Accept": {"*/*"}}}
				if c.prior != nil {
					out.Header["X-Forwarded-For"] = append([]string(nil), c.prior...)
				}
				return &httputil.ProxyRequest{In: in, Out: out}
			}
			got, want := build(), build()
			setXForwarded(got)
			want.SetXForwarded()
			if !reflect.DeepEqual(got.Out.Header, want.Out.Header) {
				t.Errorf("got %v, want %v", got.Out.Header, want.Out.Header)
			}
		})
	}
}
