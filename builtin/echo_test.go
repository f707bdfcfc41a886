package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestEcho(t *testing.T) {
	srv := httptest.NewServer(Echo())
	t.Cleanup(srv.Close)

	big := strings.Repeat("a", MaxEchoBody+10)
	// "é" is two bytes; placing it across the cut leaves half a rune.
	splitRune := strings.Repeat("a", MaxEchoBody-1) + "é"
	binary := []byte{0xff, 0xfe, 0x00, 0x01}

	tests := []struct {
		name          string
		method        string
		target        string
		body          io.Reader
		header        http.Header
		wantPath      string
		wantQuery     string
		wantBody      string
		wantBase64    []byte
		wantTruncated bool
		wantLength    int64
	}{
		{name: "get with query", method: "GET", target: "/a/b?x=1&y=%20", wantPath: "/a/b", wantQuery: "x=1&y=%20"},
		{name: "post body", method: "POST", target: "/p", body: strings.NewReader(`{"k":"v"}`),
			wantPath: "/p", wantBody: `{"k":"v"}`, wantLength: 9},
		{name: "chunked body", method: "PUT", target: "/c", body: io.MultiReader(strings.NewReader("chunk")),
			wantPath: "/c", wantBody: "chunk", wantLength: -1},
		{name: "truncated", method: "POST", target: "/big", body: strings.NewReader(big),
			wantPath: "/big", wantBody: big[:MaxEchoBody], wantTruncated: true, wantLength: int64(len(big))},
		{name: "truncated inside a rune", method: "POST", target: "/r", body: strings.NewReader(splitRune),
			wantPath: "/r", wantBody: splitRune[:MaxEchoBody-1], wantTruncated: true, wantLength: int64(len(splitRune))},
		{name: "binary body", method: "POST", target: "/bin", body: bytes.NewReader(binary),
			wantPath: "/bin", wantBase64: binary, wantLength: 4},
		{name: "headers", method: "GET", target: "/h", header: http.Header{"X-Test": {"one", "two"}}, wantPath: "/h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.target, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			for k, vs := range tt.header {
				req.Header[k] = vs
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status: got %d, want 200", resp.StatusCode)
			}
			if got, want := resp.Header.Get("Content-Type"), "application/json; charset=utf-8"; got != want {
				t.Errorf("Content-Type: got %q, want %q", got, want)
			}
			var got EchoResponse
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatalf("decoding echo: %v", err)
			}
			if got.Method != tt.method {
				t.Errorf("method: got %q, want %q", got.Method, tt.method)
			}
			if got.Path != tt.wantPath {
				t.Errorf("path: got %q, want %q", got.Path, tt.wantPath)
			}
			if got.URI != tt.target {
				t.Errorf("uri: got %q, want %q", got.URI, tt.target)
			}
			if got.RawQuery != tt.wantQuery {
				t.Errorf("raw_query: got %q, want %q", got.RawQuery, tt.wantQuery)
			}
			if got.Body != tt.wantBody {
				t.Errorf("body: got %d bytes, want %d bytes", len(got.Body), len(tt.wantBody))
			}
			if !bytes.Equal(got.BodyBase64, tt.wantBase64) {
				t.Errorf("body_base64: got %v, want %v", got.BodyBase64, tt.wantBase64)
			}
			if got.BodyTruncated != tt.wantTruncated {
				t.Errorf("body_truncated: got %v, want %v", got.BodyTruncated, tt.wantTruncated)
			}
			if got.ContentLength != tt.wantLength {
				t.Errorf("content_length: got %d, want %d", got.ContentLength, tt.wantLength)
			}
			if want := strings.TrimPrefix(srv.URL, "http://"); got.Host != want {
				t.Errorf("host: got %q, want %q", got.Host, want)
			}
			if !strings.HasPrefix(got.RemoteAddr, "127.0.0.1:") {
				t.Errorf("remote_addr: got %q, want 127.0.0.1:port", got.RemoteAddr)
			}
			for k, vs := range tt.header {
				if g := strings.Join(got.Headers[k], ","); g != strings.Join(vs, ",") {
					t.Errorf("header %s: got %q, want %q", k, g, strings.Join(vs, ","))
				}
			}
		})
	}
}

// X-Echo-Delay holds the answer at least that long, and a client that
// leaves ends the wait at once.
func TestEchoDelay(t *testing.T) {
	started, returned := make(chan struct{}, 2), make(chan struct{}, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		defer func() { returned <- struct{}{} }()
		Echo().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("X-Echo-Delay", "50ms")
	start := time.Now()
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if took := time.Since(start); resp.StatusCode != 200 || took < 50*time.Millisecond {
		t.Fatalf("delayed: %d after %s, want 200 after at least 50ms", resp.StatusCode, took)
	}
	<-started
	<-returned

	ctx, cancel := context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	req.Header.Set("X-Echo-Delay", "1h")
	errc := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a cancelled request got an answer")
	}
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the echo still waits for a client that left")
	}
}
