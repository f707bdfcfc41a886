package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratelimit-gateway/gateway/proxy/h1"
)

// The lean transport's pool and counters, after requests over real HTTP:
// one connection dialed and reused, one request handed to the fallback.
func TestWatchTransport(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	fallback := &http.Transport{}
	tr := h1.New(h1.Config{Fallback: fallback})
	t.Cleanup(tr.CloseIdleConnections)
	m := New()
	m.WatchTransport(tr.Stats)

	send := func(r *http.Request) {
		t.Helper()
		res, err := tr.RoundTrip(r)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	for range 3 {
		r, _ := http.NewRequest("GET", up.URL+"/", nil)
		send(r)
	}
	streamed, _ := http.NewRequest("POST", up.URL+"/", io.NopCloser(io.LimitReader(neverEnding{}, 10)))
	streamed.ContentLength = 10
	send(streamed)

	scrape(t, m).wantValues(t, map[string]float64{
		"gateway_upstream_idle_connections":        1,
		"gateway_upstream_dials_total":             1,
		"gateway_upstream_reused_total":            2,
		"gateway_upstream_stale_connections_total": 0,
		"gateway_upstream_retries_total":           0,
		"gateway_upstream_fallback_total":          1,
	})

	m.WatchTransport(nil)
	if _, ok := scrape(t, m)["gateway_upstream_dials_total"]; ok {
		t.Error("still exposed after WatchTransport(nil)")
	}
}

// neverEnding is a body that is not in memory: it streams.
type neverEnding struct{}

func (neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}
