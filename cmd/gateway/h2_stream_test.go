package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/proto"
)

// TestStreamsFlushOverHTTP2 streams an event stream and a chunked answer
// from an HTTP/1.1 upstream to clients over HTTP/1.1 and h2c: each part
// reaches the client while the upstream still holds the next one back.
func TestStreamsFlushOverHTTP2(t *testing.T) {
	release := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", r.URL.Query().Get("type"))
		rc := http.NewResponseController(w)
		io.WriteString(w, "data: first\n\n")
		rc.Flush()
		select { // the next part waits for the client to have the first
		case <-release:
		case <-time.After(5 * time.Second):
		}
		io.WriteString(w, "data: second\n\n")
	}))
	defer up.Close()
	g := startGateway(t, "flush", writeConfig(t, "gateway.yaml", `server:
  listen: 127.0.0.1:0
  protocols: [http1, h2, h2c]
admin: {listen: ""}
routes:
  - {name: stream, upstream: "`+up.URL+`"}
`))
	for _, client := range []struct {
		name string
		c    *http.Client
	}{{"HTTP/1.1", http.DefaultClient}, {"h2c", h2cClient(nil)}} {
		for _, ct := range []string{"text/event-stream", "text/plain"} {
			t.Run(client.name+" "+ct, func(t *testing.T) {
				resp, err := client.c.Get(g.base + "/events?type=" + ct)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				br := bufio.NewReader(resp.Body)
				start := time.Now()
				line, err := br.ReadString('\n')
				if err != nil || line != "data: first\n" {
					t.Fatalf("first part: %q (%v)", line, err)
				}
				if took := time.Since(start); took > 3*time.Second {
					t.Fatalf("the first part took %s: held until the upstream's next", took)
				}
				release <- struct{}{}
				rest, _ := io.ReadAll(br)
				if string(rest) != "\ndata: second\n\n" {
					t.Fatalf("rest: %q", rest)
				}
			})
		}
	}
}

// grpcFrame is a gRPC message as it travels: a flag byte, a length, the bytes.
func grpcFrame(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	out := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

// streamFrames is what the server sent on one stream, in order.
type streamFrames struct {
	kinds   []string // "headers", "data"
	data    []int    // each DATA frame's length
	status  string   // grpc-status, from whichever HEADERS carried it
	endedBy string
}

// TestGRPCFramesOverHTTP2 reads gRPC answers through the gateway frame by
// frame: no zero-length DATA frame, every stream ended by a HEADERS frame
// carrying grpc-status, and an answer without messages (the upstream's
// error, the gateway's refusal) trailers-only: one HEADERS frame.
func TestGRPCFramesOverHTTP2(t *testing.T) {
	up := startGRPCUpstream(t)
	g := startGateway(t, "frames", writeConfig(t, "gateway.yaml", `server:
  listen: 127.0.0.1:0
  protocols: [http1, h2, h2c]
admin: {listen: ""}
routes:
  - name: grpc
    match: {path_prefix: /grpc.testing.TestService/}
    upstream: http://`+up+`
    upstream_protocol: h2c
`))
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(conn, h2cPreface)
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings()
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	id := uint32(1)
	call := func(method string, msg proto.Message) streamFrames {
		hbuf.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "gateway.test"},
			{":path", method}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, true, grpcFrame(msg)); err != nil {
			t.Fatal(err)
		}
		var got streamFrames
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("%s: %v", method, err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
				continue
			case *http2.WindowUpdateFrame, *http2.PingFrame:
				continue
			case *http2.MetaHeadersFrame:
				if f.StreamID != id {
					continue
				}
				got.kinds = append(got.kinds, "headers")
				if v := f.PseudoValue("status"); v != "" && v != "200" {
					t.Errorf("%s: HTTP status %s, want 200", method, v)
				}
				for _, hf := range f.RegularFields() {
					if hf.Name == "grpc-status" {
						got.status = hf.Value
					}
				}
				if f.StreamEnded() {
					got.endedBy = "headers"
				}
			case *http2.DataFrame:
				if f.StreamID != id {
					continue
				}
				got.kinds = append(got.kinds, "data")
				got.data = append(got.data, len(f.Data()))
				if n := len(f.Data()); n > 0 {
					fr.WriteWindowUpdate(0, uint32(n))
				}
				if f.StreamEnded() {
					got.endedBy = "data"
				}
			case *http2.RSTStreamFrame:
				if f.StreamID != id || f.ErrCode == http2.ErrCodeNo {
					continue // after a whole answer: the rest of a request body is not wanted
				}
				t.Fatalf("%s: stream reset: %v", method, f.ErrCode)
			case *http2.GoAwayFrame:
				t.Fatalf("%s: GOAWAY %v", method, f.ErrCode)
			}
			if got.endedBy != "" {
				id += 2
				return got
			}
		}
	}
	stream := &testpb.StreamingOutputCallRequest{}
	for range 3 {
		stream.ResponseParameters = append(stream.ResponseParameters, &testpb.ResponseParameters{Size: 10})
	}
	for _, tc := range []struct {
		name, method string
		msg          proto.Message
		status       string
		trailersOnly bool
	}{
		{"unary", "/grpc.testing.TestService/UnaryCall", &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("hi")}}, "0", false},
		// The service sends its metadata first: headers, then trailers.
		{"upstream error after headers", "/grpc.testing.TestService/UnaryCall", &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: 5, Message: "gone"}}, "5", false},
		{"server stream", "/grpc.testing.TestService/StreamingOutputCall", stream, "0", false},
		{"upstream trailers-only", "/grpc.testing.TestService/UnimplementedCall", &testpb.Empty{}, "12", true},
		{"gateway refusal", "/other.Service/Call", &testpb.Empty{}, "12", true},
	} {
		for i := range 20 { // the frames must not depend on timing
			got := call(tc.method, tc.msg)
			desc := fmt.Sprintf("%s #%d: frames %v, data lengths %v", tc.name, i, got.kinds, got.data)
			for _, n := range got.data {
				if n == 0 {
					t.Fatalf("%s: a zero-length DATA frame", desc)
				}
			}
			if got.endedBy != "headers" || got.status != tc.status {
				t.Fatalf("%s: ended by %s with grpc-status %q, want HEADERS with %s", desc, got.endedBy, got.status, tc.status)
			}
			if tc.trailersOnly && len(got.kinds) != 1 {
				t.Fatalf("%s: want trailers-only, one HEADERS frame", desc)
			}
		}
	}
}

// TestLLMStreamsOverHTTP2 streams the same llm calls over HTTP/1.1 and h2c,
// each protocol for a tenant of its own, with enforce: reserve and enforce:
// stream: the usage read from the stream settles them alike, so each
// call leaves the same tokens over both.
func TestLLMStreamsOverHTTP2(t *testing.T) {
	g := startGateway(t, "llm-h2", writeConfig(t, "gateway.yaml", `server:
  listen: 127.0.0.1:0
  protocols: [http1, h2, h2c]
admin: {listen: ""}
tenants:
  keys:
    sk-reserve-h1: {tenant: reserve-h1}
    sk-reserve-h2: {tenant: reserve-h2}
    sk-stream-h1: {tenant: stream-h1}
    sk-stream-h2: {tenant: stream-h2}
routes:
  - {name: reserve, match: {path_prefix: /reserve/}, strip_prefix: /reserve, upstream: "builtin:openai-mock", llm: openai, default_max_tokens: 256, policies: [tokens]}
  - {name: stream, match: {path_prefix: /stream/}, strip_prefix: /stream, upstream: "builtin:openai-mock", llm: openai, enforce: stream, stream_window: 64, policies: [tokens]}
policies:
  # A year's quota: what refills while the test runs stays under a token.
  tokens: {key: tenant, cost: tokens, rate: 100000, per: 8760h, on_missing_key: reject}
`))
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Tell me about rate limits."}],"stream":true}`
	remaining := func(c *http.Client, enforce, proto string) []int {
		var out []int
		for range 3 {
			req, _ := http.NewRequest(http.MethodPost, g.base+"/"+enforce+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer sk-"+enforce+"-"+proto)
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			events, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !bytes.Contains(events, []byte("data: [DONE]")) {
				t.Fatalf("%s over %s: %d %q", enforce, proto, resp.StatusCode, events)
			}
			if want := map[string]int{"h1": 1, "h2": 2}[proto]; resp.ProtoMajor != want {
				t.Fatalf("%s: served over %s", proto, resp.Proto)
			}
			n, err := strconv.Atoi(resp.Header.Get("X-Ratelimit-Remaining-Tokens"))
			if err != nil {
				t.Fatalf("%s over %s: X-Ratelimit-Remaining-Tokens %q", enforce, proto, resp.Header.Get("X-Ratelimit-Remaining-Tokens"))
			}
			out = append(out, n)
		}
		return out
	}
	for _, enforce := range []string{"reserve", "stream"} {
		h1 := remaining(http.DefaultClient, enforce, "h1")
		h2 := remaining(h2cClient(nil), enforce, "h2")
		t.Logf("enforce: %s: remaining tokens over HTTP/1.1 %v, over h2c %v", enforce, h1, h2)
		for i := range h1 {
			// The same within the token a refill may add between them.
			if d := h1[i] - h2[i]; d < -1 || d > 1 || i > 0 && (h1[i] >= h1[i-1] || h2[i] >= h2[i-1]) {
				t.Errorf("enforce: %s: remaining tokens over HTTP/1.1 %v, over h2c %v; want the same, falling", enforce, h1, h2)
				break
			}
		}
	}
}
