// Package clienttest gives the tests that flood a server over real HTTP
// (proxy's and cmd/gateway's) one client for it.
package clienttest

import (
	"net/http"
	"testing"
	"time"
)

// New returns a client that really keeps conns connections to one host
// open at once (the default transport keeps 2 idle per host and would
// serialize a flood), asks for no compression, and gives up on a request
// after 10s, which in a test is a failure, not a wait. Its idle
// connections are closed when the test ends.
func New(t testing.TB, conns int) *http.Client {
	t.Helper()
	tr := &http.Transport{
		MaxConnsPerHost:     conns,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}
