package h1

import (
	"context"
	"io"
	"net/http"
	"testing"
)

// BenchmarkTransport sends GETs to a loopback upstream through the lean
// transport and through a tuned http.Transport, the anchor; compare ns/op of
// the two within one run:
//
//	go test -run '^$' -bench BenchmarkTransport -benchmem ./proxy/h1/
func BenchmarkTransport(b *testing.B) {
	up := newCountingServer(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	}))
	std := &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true}
	lean := New(Config{Fallback: std})
	b.Cleanup(lean.CloseIdleConnections)
	for _, tt := range []struct {
		name string
		rt   http.RoundTripper
	}{{"http.Transport", std}, {"h1", lean}} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequestWithContext(context.Background(), "GET", up.URL+"/bench", nil)
					res, err := tt.rt.RoundTrip(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			})
		})
	}
}
