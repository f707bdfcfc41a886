package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/builtin"
)

const azureYAML = `
tenants:
  quota_path: /openai/quota
  keys:
    sk-azure: {tenant: acme, plan: free}
routes:
  - name: azure
    match: {path_prefix: /openai/}
    upstream: UP
    llm: azure
    upstream_api_key: operator-key
    deployments: {chat: gpt-4o-mini, old: gpt-3.5-turbo, ears: whisper-1}
    policies: [tokens]
policies:
  tokens: {key: tenant, cost: tokens, rate: 100000, per: 1h, on_missing_key: reject}
`

// azureSeen is what an Azure OpenAI mock behind the gateway received.
type azureSeen struct {
	header http.Header
	query  string
	body   string
}

func newAzureGateway(t *testing.T) (string, chan azureSeen) {
	t.Helper()
	mock := builtin.AzureMock(builtin.OpenAIMock(builtin.OpenAIMockConfig{CompletionTokens: 20}))
	seen := make(chan azureSeen, 16)
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen <- azureSeen{r.Header.Clone(), r.URL.RawQuery, string(body)}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		mock.ServeHTTP(w, r)
	}))
	snap := compileYAML(t, strings.ReplaceAll(azureYAML, "UP", up.URL))
	srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	return srv.URL, seen
}

func azurePost(t *testing.T, url, key, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Api-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// An llm: azure route reads the tenant's key from api-key, sends the
// operator's as api-key with an api-version, asks a stream for its usage
// only under an API version that takes stream_options, counts a
// deployment's call as the model routes[].deployments names, and refuses
// in Azure's error shape what it cannot price or identify.
func TestAzureRoute(t *testing.T) {
	base, seen := newAzureGateway(t)
	const chat = `{"messages":[{"role":"user","content":"hi"}],"max_tokens":10}`
	const stream = `{"messages":[{"role":"user","content":"hi"}],"max_tokens":10,"stream":true}`

	t.Run("the operator's key and an api-version upstream", func(t *testing.T) {
		resp, body := azurePost(t, base+"/openai/deployments/chat/chat/completions", "sk-azure", chat)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("got %d %s, want 200", resp.StatusCode, body)
		}
		s := <-seen
		if got := s.header.Get("Api-Key"); got != "operator-key" || s.header.Get("Authorization") != "" {
			t.Errorf("upstream api-key %q, authorization %q: want operator-key and none", got, s.header.Get("Authorization"))
		}
		if s.query != "api-version=2024-10-21" {
			t.Errorf("upstream query %q, want the default api-version", s.query)
		}
		if resp.Header.Get("X-Ratelimit-Remaining-Tokens") == "" {
			t.Errorf("no x-ratelimit-remaining-tokens on an azure route's answer")
		}
	})
	t.Run("stream_options only where the API version takes it", func(t *testing.T) {
		for _, tc := range []struct {
			version string
			asks    bool
		}{{"2024-10-21", true}, {"2024-09-01-preview", true}, {"2024-06-01", false}, {"2024-02-15-preview", false}} {
			resp, body := azurePost(t, base+"/openai/deployments/chat/chat/completions?api-version="+tc.version, "sk-azure", stream)
			s := <-seen
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, "data: [DONE]") {
				t.Errorf("%s: got %d %q, want a stream", tc.version, resp.StatusCode, body)
			}
			if got := strings.Contains(s.body, "stream_options"); got != tc.asks {
				t.Errorf("%s: stream_options sent %v, want %v", tc.version, got, tc.asks)
			}
			if s.query != "api-version="+tc.version {
				t.Errorf("%s: upstream query %q, want the client's", tc.version, s.query)
			}
		}
	})
	t.Run("a deployment is counted as its model", func(t *testing.T) {
		r, _ := http.NewRequest("POST", "http://gw/openai/deployments/old/chat/completions?api-version=2024-10-21", strings.NewReader(chat))
		r.Header.Set("Api-Key", "sk-azure")
		r.RemoteAddr = "203.0.113.7:1234"
		e := Explain(compileYAML(t, strings.ReplaceAll(azureYAML, "UP", "http://127.0.0.1:9")), r, ExplainOptions{ReadBody: true})
		if e.LLM == nil || e.LLM.Model != "gpt-3.5-turbo" || e.Identity == nil || e.Identity.Tenant != "acme" {
			t.Fatalf("got llm %+v, identity %+v; want a call on gpt-3.5-turbo by acme", e.LLM, e.Identity)
		}
	})
	t.Run("the v1 API: the body's model is the deployment, no dated api-version", func(t *testing.T) {
		resp, body := azurePost(t, base+"/openai/v1/chat/completions", "sk-azure", `{"model":"old","messages":[{"role":"user","content":"hi"}],"max_tokens":10}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("got %d %s, want 200", resp.StatusCode, body)
		}
		if s := <-seen; s.query != "" || s.header.Get("Api-Key") != "operator-key" {
			t.Errorf("upstream query %q, api-key %q: want none and the operator's key", s.query, s.header.Get("Api-Key"))
		}
		r, _ := http.NewRequest("POST", "http://gw/openai/v1/chat/completions", strings.NewReader(`{"model":"old","messages":[{"role":"user","content":"hi"}]}`))
		r.Header.Set("Api-Key", "sk-azure")
		e := Explain(compileYAML(t, strings.ReplaceAll(azureYAML, "UP", "http://127.0.0.1:9")), r, ExplainOptions{ReadBody: true})
		if e.LLM == nil || e.LLM.Model != "gpt-3.5-turbo" {
			t.Fatalf("got llm %+v, want a call on gpt-3.5-turbo", e.LLM)
		}
	})
	t.Run("a transcription on a deployment is counted as its model", func(t *testing.T) {
		// The SDK sends the deployment's name as the form's model.
		form := "--B\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nears\r\n" +
			"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\n\r\n" + strings.Repeat("x", 7500) + "\r\n--B--\r\n"
		req, _ := http.NewRequest("POST", base+"/openai/deployments/ears/audio/transcriptions", strings.NewReader(form))
		req.Header.Set("Content-Type", "multipart/form-data; boundary=B")
		req.Header.Set("Api-Key", "sk-azure")
		r := req.Clone(req.Context())
		r.Body = io.NopCloser(strings.NewReader(form))
		e := Explain(compileYAML(t, strings.ReplaceAll(azureYAML, "UP", "http://127.0.0.1:9")), r, ExplainOptions{ReadBody: true})
		if e.LLM == nil || e.LLM.Model != "whisper-1" {
			t.Fatalf("got llm %+v, want a call on whisper-1", e.LLM)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if s := <-seen; resp.StatusCode != http.StatusOK || s.body != form {
			t.Errorf("got %d %s, upstream body intact %v; want 200 and the form as sent", resp.StatusCode, b, s.body == form)
		}
	})
	t.Run("the quota report reads api-key", func(t *testing.T) {
		req, _ := http.NewRequest("GET", base+"/openai/quota", nil)
		req.Header.Set("Api-Key", "sk-azure")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var q struct{ Tenant string }
		if err := json.NewDecoder(resp.Body).Decode(&q); err != nil || resp.StatusCode != http.StatusOK || q.Tenant != "acme" {
			t.Errorf("got %d, tenant %q (%v); want 200 for acme", resp.StatusCode, q.Tenant, err)
		}
	})
	for _, tc := range []struct {
		name, path, key string
		status          int
		code            string
	}{
		{"a deployment the route does not map", "/openai/deployments/other/chat/completions", "sk-azure", http.StatusBadRequest, "400"},
		{"no key", "/openai/deployments/chat/chat/completions", "", http.StatusUnauthorized, "401"},
		{"an endpoint Azure's API does not declare", "/openai/deployments/chat/unknown", "sk-azure", http.StatusNotFound, "404"},
		{"a v1 call naming a deployment the route does not map", "/openai/v1/chat/completions", "sk-azure", http.StatusBadRequest, "400"},
		{"a batch on the v1 API", "/openai/v1/batches", "sk-azure", http.StatusForbidden, "403"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := azurePost(t, base+tc.path, tc.key, chat)
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != tc.status || e.Error.Code != tc.code || e.Error.Message == "" {
				t.Errorf("got %d %s, want %d in Azure's shape with code %q", resp.StatusCode, body, tc.status, tc.code)
			}
		})
	}
}
