package builtin

import (
	"bufio"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The mock bills what a request hides outside the fields it reads as its
// prompt, and a prediction as output; it answers in gzip when asked; it
// streams in the delta kind a test names.
func TestOpenAIMockBillsHiddenFields(t *testing.T) {
	m := OpenAIMock(OpenAIMockConfig{CompletionTokens: 5})
	srv := newServer(t, m)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	call := func(body, acceptEncoding, delta string) (*http.Response, MockBill) {
		t.Helper()
		before := m.Billed()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Accept-Encoding", acceptEncoding)
		req.Header.Set(MockDeltaHeader, delta)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		after := m.Billed()
		return resp, MockBill{Input: after.Input - before.Input, Output: after.Output - before.Output}
	}
	hidden := strings.Repeat("word ", 100) // 500 runes: 125 tokens by the estimate
	plain := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	resp, base := call(plain, "", "")
	resp.Body.Close()
	for _, tt := range []struct {
		name string
		body string
		in   int64 // more than the plain call's, at least
		out  int64
	}{
		{"legacy function_call", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","function_call":{"name":"f","arguments":"` + hidden + `"}}]}`, 125, 0},
		{"response_format", `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"schema":{"d":"` + hidden + `"}}}`, 125, 0},
		{"prediction", `{"model":"m","messages":[{"role":"user","content":"hi"}],"prediction":{"type":"content","content":"` + hidden + `"}}`, 0, 125},
	} {
		resp, bill := call(tt.body, "", "")
		resp.Body.Close()
		if bill.Input < base.Input+tt.in || bill.Output < base.Output+tt.out {
			t.Errorf("%s: billed %+v, want at least %d more input and %d more output than %+v", tt.name, bill, tt.in, tt.out, base)
		}
	}
	resp, _ = call(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "br, gzip, deflate", "audio")
	defer resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip when asked", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	audio := 0
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"audio":{"data":"`) {
			audio++
		}
	}
	if audio != 5 {
		t.Fatalf("%d audio deltas, want 5", audio)
	}
	io.Copy(io.Discard, zr)
}
