package llm

import (
	"encoding/json"
	"net/http"
)

// Anthropic is Anthropic's API, as routes with llm: anthropic speak it.
var Anthropic = &API{Name: "anthropic", Endpoints: anthropicEndpoints}

// AnthropicProvider is Anthropic's Messages API as a Provider, spoken so
// that Anthropic's SDKs understand it: errors in its shape ({"type":
// "error", "error": {"type": "rate_limit_error", ...}}, which the SDKs
// raise as RateLimitError and retry after retry-after), its
// anthropic-ratelimit-* headers, and the x-api-key header upstream.
var AnthropicProvider Provider = anthropicProvider{}

func init() { Register(AnthropicProvider) }

type anthropicProvider struct{}

func (anthropicProvider) Name() string                 { return Anthropic.Name }
func (anthropicProvider) API() *API                    { return Anthropic }
func (anthropicProvider) KeyHeaders() []string         { return llmKeyHeaders }
func (anthropicProvider) Headers() HeaderSet           { return HeadersAnthropic }
func (anthropicProvider) AsksUsage(*http.Request) bool { return true }

// anthropicVersion is sent upstream when a client sends no
// anthropic-version (the API requires one).
const anthropicVersion = "2023-06-01"

// Upstream puts the operator's key where Anthropic reads it, and the API
// version a client left out.
func (anthropicProvider) Upstream(out *http.Request, key string) {
	if key != "" {
		out.Header.Del("Authorization")
		out.Header.Set("X-Api-Key", key)
	}
	if out.Header.Get("Anthropic-Version") == "" {
		out.Header.Set("Anthropic-Version", anthropicVersion)
	}
}

// ErrorBody renders e as Anthropic would for status.
func (anthropicProvider) ErrorBody(status int, e Refusal) []byte {
	typ := "api_error"
	switch status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusRequestHeaderFieldsTooLarge:
		typ = "invalid_request_error"
	case http.StatusUnauthorized:
		typ = "authentication_error"
	case http.StatusForbidden:
		typ = "permission_error"
	case http.StatusNotFound:
		typ = "not_found_error"
	case http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case http.StatusServiceUnavailable:
		typ = "overloaded_error"
	}
	type detail struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	b, _ := json.Marshal(struct {
		Type  string `json:"type"`
		Error detail `json:"error"`
	}{"error", detail{typ, e.Message}}) // strings only: cannot fail
	return b
}

var anthropicEndpoints = []Endpoint{
	{Method: "POST", Path: "/v1/messages", Kind: AnthropicMessages, Bound: BoundTokens},
	// Counting tokens is free (it takes from the requests limit only).
	{Method: "POST", Path: "/v1/messages/count_tokens", Bound: BoundFree},
	{Method: "*", Path: "/v1/messages/batches", Refused: "a message batch is billed later, for requests the gateway never sees"},
	{Method: "*", Path: "/v1/messages/batches/{rest...}", Refused: "a message batch is billed later, for requests the gateway never sees"},

	{Method: "GET", Path: "/v1/models", Bound: BoundFree},
	{Method: "GET", Path: "/v1/models/{model}", Bound: BoundFree},

	{Method: "GET", Path: "/v1/files", Stored: true},
	{Method: "POST", Path: "/v1/files", Stored: true},
	{Method: "GET", Path: "/v1/files/{id}", Stored: true},
	{Method: "GET", Path: "/v1/files/{id}/content", Stored: true},
	{Method: "DELETE", Path: "/v1/files/{id}", Stored: true},
}
