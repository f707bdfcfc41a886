package proxy

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/ratelimit-gateway/gateway/proxy/h1"
)

// Transport tuning. The idle pool is sized for a gateway that multiplexes many
// clients onto few upstreams: with Go's default of 2 idle connections per
// host, a burst of concurrency closes and redials connections all the time.
const (
	transportMaxIdle        = 1024
	transportMaxIdlePerHost = 512
	transportIdleTimeout    = 90 * time.Second
	transportDialTimeout    = 5 * time.Second
	transportKeepAlive      = 30 * time.Second
	transportTLSTimeout     = 5 * time.Second
	transportExpectTimeout  = 1 * time.Second
	transportMaxRespHeader  = 1 << 20
)

// NewTransport returns the upstream transport the gateway uses, meant to be
// built once per process (in cmd) and shared by every handler and reload, so
// that its connection pools survive them: h1's lean HTTP/1.1 transport for
// plain-HTTP upstreams, over NewStandardTransport's for the rest (TLS and
// HTTP/2, upgrades, streamed uploads). The result is safe for concurrent use.
func NewTransport() *h1.Transport {
	return newTransport(newDialer().DialContext, nil)
}

// NewTransportWithBudget is NewTransport whose resends of a request on a
// new connection draw on retries, the budget the pools' retries draw on
// too (pool.Pools.Budget).
func NewTransportWithBudget(retries h1.RetryBudget) *h1.Transport {
	return newTransport(newDialer().DialContext, retries)
}

// NewStandardTransport returns net/http's transport as the gateway tunes it:
// the lean transport's fallback, and every upstream's with
// server.upstream_transport: standard. Built once per process too.
//
// It has no response-header timeout: each route's timeout bounds the wait
// for response headers instead. It ignores HTTP(S)_PROXY from the
// environment, and it does not ask for gzip on its own (DisableCompression),
// so clients get exactly the encoding they negotiated with the upstream.
func NewStandardTransport() *http.Transport {
	return newStandardTransport(newDialer().DialContext)
}

func newDialer() *net.Dialer {
	return &net.Dialer{Timeout: transportDialTimeout, KeepAlive: transportKeepAlive}
}

// dialFunc opens a connection to an upstream.
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// newTransport is NewTransport dialing with dial (tests watch connections).
func newTransport(dial dialFunc, retries h1.RetryBudget) *h1.Transport {
	return h1.New(h1.Config{
		Retries:                retries,
		Fallback:               newStandardTransport(dial),
		Dial:                   dial,
		MaxIdlePerHost:         transportMaxIdlePerHost,
		IdleTimeout:            transportIdleTimeout,
		MaxResponseHeaderBytes: transportMaxRespHeader,
	})
}

func newStandardTransport(dial dialFunc) *http.Transport {
	return &http.Transport{
		DialContext:            dial,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           transportMaxIdle,
		MaxIdleConnsPerHost:    transportMaxIdlePerHost,
		IdleConnTimeout:        transportIdleTimeout,
		TLSHandshakeTimeout:    transportTLSTimeout,
		ExpectContinueTimeout:  transportExpectTimeout,
		MaxResponseHeaderBytes: transportMaxRespHeader,
		DisableCompression:     true,
	}
}
