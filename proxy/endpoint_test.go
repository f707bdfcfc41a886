package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

const endpointsYAML = `
routes:
  - {name: shared-key, upstream: "UPSTREAM", llm: openai, upstream_api_key: sk-operator, strip_prefix: /shared, match: {path_prefix: /shared/}, policies: [tokens]}
  - {name: own-key, upstream: "UPSTREAM", llm: openai, strip_prefix: /own, match: {path_prefix: /own/}, policies: [tokens]}
  - {name: requests-only, upstream: "UPSTREAM", llm: openai, strip_prefix: /plain, match: {path_prefix: /plain/}, policies: [requests]}
  - {name: claude, upstream: "UPSTREAM", llm: anthropic, upstream_api_key: sk-operator, strip_prefix: /claude, match: {path_prefix: /claude/}, policies: [tokens]}
  - name: declared
    upstream: "UPSTREAM"
    llm: openai
    upstream_api_key: sk-operator
    strip_prefix: /declared
    match: {path_prefix: /declared/}
    policies: [tokens]
    endpoints:
      - {method: POST, path: "/v1/responses/compact", tokens: 300}
      - {method: POST, path: "/v1/things/{id}/run", tokens: 300}
policies:
  tokens: {key: "header:X-Tenant", cost: tokens, rate: 1000, per: 1h}
  requests: {key: "header:X-Tenant", rate: 1000, per: 1h}
`

// On a route that counts tokens, an endpoint its provider does not declare
// is answered 404 and one it refuses 403 (naming method and path), in the
// route's error shape, and neither reaches the upstream or carries the
// operator's key; reads of stored objects are refused where the route's
// upstream key is every tenant's, and pass where each tenant brings its
// own. A route that counts only requests forwards them as before. The
// endpoint is the provider's (the route's llm), whatever the path ends in.
func TestEndpointsUndeclaredAreRefused(t *testing.T) {
	var reached atomic.Int64
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	base, _ := gatewayOn(t, endpointsYAML, up.URL, newEngine(t, newTestClock()))
	tests := []struct {
		method, path string
		status       int
		shape        string // openai or anthropic: the error's type
	}{
		{"POST", "/shared/v1/batches", 403, "invalid_request_error"},
		{"GET", "/shared/v1/batches", 403, "invalid_request_error"}, // stored, under the shared key
		{"POST", "/shared/v1/batches/batch_1/cancel", 403, "invalid_request_error"},
		{"POST", "/shared/v1/fine_tuning/jobs", 403, "invalid_request_error"},
		{"POST", "/shared/v1/threads/runs", 403, "invalid_request_error"},
		{"POST", "/shared/v1/threads/thread_1/runs", 403, "invalid_request_error"},
		{"POST", "/shared/v1/threads/thread_1/messages", 403, "invalid_request_error"},
		{"POST", "/shared/v1/assistants", 403, "invalid_request_error"},
		{"POST", "/shared/v1/realtime/sessions", 403, "invalid_request_error"},
		{"POST", "/shared/v1/realtime/calls", 403, "invalid_request_error"},
		{"POST", "/shared/v1/realtime/client_secrets", 403, "invalid_request_error"},
		{"POST", "/shared/v1/responses/compact", 403, "invalid_request_error"},
		{"GET", "/shared/v1/files", 403, "invalid_request_error"},
		{"GET", "/shared/v1/files/file_1/content", 403, "invalid_request_error"},
		{"GET", "/shared/v1/chat/completions", 403, "invalid_request_error"},
		{"GET", "/shared/v1/chat/completions/chatcmpl_1", 403, "invalid_request_error"},
		{"GET", "/shared/v1/responses/resp_1", 403, "invalid_request_error"},
		{"POST", "/shared/v1/messages", 404, "invalid_request_error"}, // Anthropic's, not OpenAI's
		{"POST", "/shared/v1/unknown", 404, "invalid_request_error"},
		{"POST", "/shared/v1/chat/completions/", 404, "invalid_request_error"},
		{"POST", "/shared/chat/completions", 404, "invalid_request_error"},
		{"GET", "/shared/v1/models", 200, ""},
		{"GET", "/shared/v1/models/gpt-4o", 200, ""},
		{"GET", "/own/v1/files", 200, ""},
		{"GET", "/own/v1/responses/resp_1", 200, ""},
		{"POST", "/own/v1/batches", 403, "invalid_request_error"},
		{"POST", "/plain/v1/batches", 200, ""},
		{"POST", "/plain/v1/anything", 200, ""},
		{"POST", "/claude/v1/messages/batches", 403, "permission_error"},
		{"GET", "/claude/v1/messages/batches/msgbatch_1/results", 403, "permission_error"},
		{"POST", "/claude/v1/chat/completions", 404, "not_found_error"},
		{"GET", "/claude/v1/files", 403, "permission_error"},
		{"GET", "/claude/v1/models", 200, ""},
		{"POST", "/claude/v1/messages/count_tokens", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			before := reached.Load()
			req, _ := http.NewRequest(tt.method, base+tt.path, strings.NewReader(`{}`))
			req.Header.Set("X-Tenant", "acme")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status {
				body, _ := io.ReadAll(resp.Body)
				t.Fatalf("got %d %s, want %d", resp.StatusCode, body, tt.status)
			}
			if tt.status == 200 {
				if reached.Load() != before+1 {
					t.Errorf("the upstream was not reached")
				}
				return
			}
			if reached.Load() != before {
				t.Errorf("the upstream was reached, want the request refused before it")
			}
			var e struct {
				Error struct{ Type, Message string } `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error.Type != tt.shape {
				t.Fatalf("body: %+v (%v), want an error of type %s", e, err, tt.shape)
			}
			if want := tt.method + " " + tt.path; !strings.Contains(e.Error.Message, want) {
				t.Errorf("message %q does not name %q", e.Error.Message, want)
			}
		})
	}
}

// An endpoint the operator declares at a fixed cost is forwarded (with the
// operator's key) and takes that cost from the tokens policy: three calls
// of 300 fit in 1,000 tokens, the fourth is refused.
func TestEndpointsDeclaredAtAFixedCost(t *testing.T) {
	var keys []string
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get("Authorization"))
		io.WriteString(w, `{}`)
	}))
	base, settled := gatewayOn(t, endpointsYAML, up.URL, newEngine(t, newTestClock()))
	for _, path := range []string{"/declared/v1/responses/compact", "/declared/v1/things/t1/run"} {
		t.Run(path, func(t *testing.T) {
			var statuses []int
			for range 4 {
				req, _ := http.NewRequest("POST", base+path, strings.NewReader(`{"anything":"goes"}`))
				req.Header.Set("X-Tenant", path)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					<-settled
				}
				statuses = append(statuses, resp.StatusCode)
			}
			if want := []int{200, 200, 200, 429}; !equalInts(statuses, want) {
				t.Errorf("got %v, want %v", statuses, want)
			}
		})
	}
	for _, k := range keys {
		if k != "Bearer sk-operator" {
			t.Errorf("upstream saw Authorization %q, want the operator's key", k)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A cap of 0 is refused with 400; with both chat caps the call reserves
// the larger and the upstream receives it in both fields, so it is held to
// the reserved cap whichever it reads.
func TestCapsAreDefensive(t *testing.T) {
	var got []string
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, string(b))
		io.WriteString(w, `{"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	base, settled := gatewayOn(t, endpointsYAML, up.URL, newEngine(t, newTestClock()))
	call := func(body string) int {
		req, _ := http.NewRequest("POST", base+"/own/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("X-Tenant", "caps")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			<-settled
		}
		return resp.StatusCode
	}
	for _, body := range []string{
		`{"model":"gpt-4o-mini","messages":[],"max_tokens":0}`,
		`{"model":"gpt-4o-mini","messages":[],"max_completion_tokens":0}`,
		`{"model":"gpt-4o-mini","messages":[],"max_completion_tokens":5,"max_tokens":0}`,
	} {
		if s := call(body); s != http.StatusBadRequest {
			t.Errorf("%s: got %d, want 400", body, s)
		}
	}
	if len(got) != 0 {
		t.Fatalf("the upstream saw %q, want nothing", got)
	}
	// 1,000 tokens an hour: two caps whose larger is past it never fit
	// (had the smaller been reserved, the call would pass).
	if s := call(`{"model":"gpt-4o-mini","messages":[],"max_completion_tokens":10,"max_tokens":1200}`); s != http.StatusTooManyRequests {
		t.Errorf("two caps, the larger past the quota: got %d, want 429", s)
	}
	two := `{"model":"gpt-4o-mini","messages":[],"max_completion_tokens":10,"max_tokens":990}`
	if s := call(two); s != http.StatusOK {
		t.Fatalf("two caps: got %d, want 200", s)
	}
	if len(got) != 1 || !strings.Contains(got[0], `"max_completion_tokens":990`) || !strings.Contains(got[0], `"max_tokens":990`) {
		t.Fatalf("the upstream got %q, want both caps at 990", got)
	}
}

// A transcription's upload is held to its endpoint's limit (25 MiB and the
// form), not the route's max_body_bytes: a 2 MB file passes a route whose
// other calls are held to 1 MiB, and is charged its bound in seconds.
func TestEndpointsUploadHasItsOwnLimit(t *testing.T) {
	var sizes []int
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sizes = append(sizes, len(b))
		io.WriteString(w, `{"text":"hi"}`)
	}))
	base, settled := gatewayOn(t, `
routes:
  - {name: llm, upstream: "UPSTREAM", llm: openai, max_body_bytes: 1048576, match: {path_prefix: /v1/}, policies: [usd]}
policies:
  usd: {key: "header:X-Tenant", cost: usd, rate: 1, per: 1h}
prices:
  default: {input: 1, output: 1}
`, up.URL, newEngine(t, newTestClock()))
	form := "--B\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n" +
		"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.ogg\"\r\n\r\n" + strings.Repeat("x", 2_000_000) + "\r\n--B--\r\n"
	send := func(path, body string) int {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "multipart/form-data; boundary=B")
		req.Header.Set("X-Tenant", "t")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			<-settled
		}
		return resp.StatusCode
	}
	// 2,000,000 bytes at 750 a second: 2,667 s at $0.0001 a second, $0.27.
	for i, want := range []int{200, 200, 200, 429} {
		if got := send("/v1/audio/transcriptions", form); got != want {
			t.Fatalf("upload %d: got %d, want %d", i, got, want)
		}
	}
	if got := send("/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"`+strings.Repeat("a", 1_100_000)+`"}]}`); got != http.StatusRequestEntityTooLarge {
		t.Errorf("a chat call past the route's limit: got %d, want 413", got)
	}
	if len(sizes) != 3 || sizes[0] != len(form) {
		t.Errorf("the upstream got %v, want three whole forms of %d bytes", sizes, len(form))
	}
}
