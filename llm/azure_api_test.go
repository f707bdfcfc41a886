package llm

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
)

// Azure's provider: stream_options by API version, the operator's key and
// an api-version upstream, the deployment a path names, and its error body.
func TestAzureProvider(t *testing.T) {
	for _, tc := range []struct {
		query string
		asks  bool
	}{
		{"", true}, {"api-version=2024-10-21", true}, {"api-version=2024-09-01-preview", true},
		{"api-version=2025-04-01-preview", true}, {"api-version=preview", true},
		{"api-version=2024-08-01-preview", false}, {"api-version=2024-06-01", false}, {"api-version=2023-05-15", false},
	} {
		r := httptest.NewRequest("POST", "/openai/deployments/d/chat/completions?"+tc.query, nil)
		if got := AzureProvider.AsksUsage(r); got != tc.asks {
			t.Errorf("%q: asks usage %v, want %v", tc.query, got, tc.asks)
		}
	}

	for _, tc := range []struct{ query, want string }{
		{"", "api-version=" + AzureAPIVersion},
		{"a=1", "a=1&api-version=" + AzureAPIVersion},
		{"api-version=2024-06-01", "api-version=2024-06-01"},
		{"api-version=", "api-version=" + AzureAPIVersion},
	} {
		out := httptest.NewRequest("POST", "http://up/openai/responses?"+tc.query, nil)
		out.Header.Set("Authorization", "Bearer tenant")
		AzureProvider.Upstream(out, "operator")
		if out.URL.RawQuery != tc.want || out.Header.Get("Api-Key") != "operator" || out.Header.Get("Authorization") != "" {
			t.Errorf("%q: got query %q, api-key %q, authorization %q; want %q, operator, none", tc.query, out.URL.RawQuery, out.Header.Get("Api-Key"), out.Header.Get("Authorization"), tc.want)
		}
	}

	path := "/openai/deployments/my-chat/chat/completions"
	ep := Azure.Lookup("POST", path)
	if ep == nil || ep.Kind != ChatCompletions || Segment(ep.Path, path, "deployment") != "my-chat" || !Azure.Deployments() || OpenAI.Deployments() {
		t.Fatalf("got endpoint %+v; want a chat call on deployment my-chat, deployments on Azure's API alone", ep)
	}

	var body struct {
		Error struct{ Code, Message string }
	}
	for _, tc := range []struct {
		status int
		final  bool
		code   string
	}{{429, false, "429"}, {429, true, "insufficient_quota"}, {401, false, "401"}} {
		if err := json.Unmarshal(AzureProvider.ErrorBody(tc.status, Refusal{Message: "m", Final: tc.final}), &body); err != nil || body.Error.Code != tc.code || body.Error.Message != "m" {
			t.Errorf("%d final %v: got %+v (%v), want code %q", tc.status, tc.final, body, err, tc.code)
		}
	}
}
