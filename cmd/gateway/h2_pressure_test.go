//go:build pressure

package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestPressureHTTP2RapidResetFloodIsCut floods one h2c connection with streams each
// reset as soon as it opens (CVE-2023-44487) while other clients keep
// asking: net/http's mitigation ends the flooding connection, and the
// others are served all along.
func TestPressureHTTP2RapidResetFloodIsCut(t *testing.T) {
	g := startGateway(t, "reset", writeConfig(t, "gateway.yaml", `server:
  listen: 127.0.0.1:0
  protocols: [http1, h2, h2c]
  max_concurrent_streams: 8
admin: {listen: ""}
routes:
  - {name: api, upstream: "builtin:echo"}
`))
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fr := http2.NewFramer(conn, conn)
	if _, err := io.WriteString(conn, h2cPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// The server's answer: a GOAWAY, and the connection's end.
	goaway := make(chan http2.ErrCode, 1)
	go func() {
		defer close(goaway)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if ga, ok := f.(*http2.GoAwayFrame); ok {
				t.Logf("GOAWAY %v %q", ga.ErrCode, ga.DebugData())
				goaway <- ga.ErrCode
				return
			}
		}
	}()
	var block strings.Builder
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "gateway.test"}, {Name: ":path", Value: "/flood"},
		{Name: "x-echo-delay", Value: "1s"},
	} {
		enc.WriteField(f)
	}
	// Others keep being served while the flood runs.
	stop := make(chan struct{})
	var served, failed atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			c := newTestClient(t)
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := send(c, http.MethodGet, g.base+"/ok")
				if err != nil || r.status != http.StatusOK {
					failed.Add(1)
					continue
				}
				served.Add(1)
			}
		})
	}
	const maxStreams = 2000000
	sent := 0
	for id := uint32(1); sent < maxStreams; id += 2 {
		err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte(block.String()), EndStream: true, EndHeaders: true})
		if err == nil {
			err = fr.WriteRSTStream(id, http2.ErrCodeCancel)
		}
		if err != nil {
			break // the server closed the connection
		}
		sent++
	}
	code, got := <-goaway
	close(stop)
	wg.Wait()
	t.Logf("flood: %d streams opened and reset before the end; GOAWAY %v (%v); others: %d served, %d failed", sent, code, got, served.Load(), failed.Load())
	if !got || code != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("flooding connection: got GOAWAY %v (received %v), want ENHANCE_YOUR_CALM", code, got)
	}
	if sent >= maxStreams {
		t.Errorf("the flood ran its %d streams uncut", maxStreams)
	}
	if failed.Load() != 0 || served.Load() == 0 {
		t.Errorf("other clients during the flood: %d served, %d failed; want all served", served.Load(), failed.Load())
	}
}
