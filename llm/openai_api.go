package llm

import (
	"encoding/json"
	"net/http"
)

// OpenAI is OpenAI's API (and the APIs compatible with it), as routes with
// llm: openai speak it.
var OpenAI = &API{Name: "openai", Endpoints: openAIEndpoints}

// OpenAIProvider is OpenAI's API as a Provider: keys as Bearer tokens (or
// x-api-key, for clients that send one there), errors in OpenAI's shape
// (the SDKs raise RateLimitError on a 429, and treat insufficient_quota
// as final), x-ratelimit-* headers.
var OpenAIProvider Provider = openAIProvider{}

func init() { Register(OpenAIProvider) }

type openAIProvider struct{}

func (openAIProvider) Name() string                           { return OpenAI.Name }
func (openAIProvider) API() *API                              { return OpenAI }
func (openAIProvider) KeyHeaders() []string                   { return llmKeyHeaders }
func (openAIProvider) Headers() HeaderSet                     { return HeadersOpenAI }
func (openAIProvider) AsksUsage(*http.Request) bool           { return true }
func (openAIProvider) ErrorBody(status int, e Refusal) []byte { return OpenAIErrorBody(status, e) }

// Upstream sends the operator's key as a Bearer token: the tenant's key
// identifies it to the gateway only.
func (openAIProvider) Upstream(out *http.Request, key string) {
	if key != "" {
		delete(out.Header, "X-Api-Key")
		out.Header["Authorization"] = []string{"Bearer " + key}
	}
}

// llmKeyHeaders are where OpenAI's and Anthropic's clients send a key.
var llmKeyHeaders = []string{"Authorization", "X-Api-Key"}

// openAIError is OpenAI's error body.
type openAIError struct {
	Error openAIErrorDetail `json:"error"`
}

type openAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// OpenAIErrorBody renders e as OpenAI would for status (Azure OpenAI's
// SDK reads the same shape).
func OpenAIErrorBody(status int, e Refusal) []byte {
	typ, code := "invalid_request_error", ""
	switch {
	case status == http.StatusTooManyRequests:
		typ, code = "rate_limit_exceeded", "rate_limit_exceeded"
		if e.Final {
			typ, code = "insufficient_quota", "insufficient_quota"
		}
	case status == http.StatusUnauthorized:
		code = "invalid_api_key"
	case status == http.StatusNotFound:
		code = "not_found"
	case status >= 500:
		typ = "server_error"
	}
	body := openAIError{Error: openAIErrorDetail{Message: e.Message, Type: typ}}
	if code != "" {
		body.Error.Code = &code
	}
	b, _ := json.Marshal(body) // strings and pointers to strings: cannot fail
	return b
}

// Why the endpoints OpenAI bills in ways a request does not bound are
// refused.
const (
	refusedBatch    = "a batch is billed later, for requests the gateway never sees"
	refusedTuning   = "a fine-tuning job is billed by its training tokens and hours, which its request does not bound"
	refusedRun      = "an assistants run calls the model on a stored thread as often as it needs, which its request does not bound"
	refusedRealtime = "a realtime session bills audio and text for as long as it lasts, and a client secret mints a key that bypasses the gateway"
	refusedCompact  = "compaction bills a stored conversation the request does not hold"
	refusedStores   = "vector stores and uploads bill storage and tools outside the request"
	refusedVideo    = "a video is billed by seconds generated, which the gateway does not bound"
	refusedVoice    = "custom voices are made and billed outside any call the gateway bounds"
)

var openAIEndpoints = []Endpoint{
	{Method: "POST", Path: "/v1/chat/completions", Kind: ChatCompletions, Bound: BoundTokens},
	{Method: "POST", Path: "/v1/completions", Kind: Completions, Bound: BoundTokens},
	{Method: "POST", Path: "/v1/responses", Kind: Responses, Bound: BoundTokens},
	{Method: "POST", Path: "/v1/responses/compact", Refused: refusedCompact},
	{Method: "POST", Path: "/v1/embeddings", Kind: Embeddings, Bound: BoundTokens},
	{Method: "POST", Path: "/v1/moderations", Bound: BoundFree},
	{Method: "POST", Path: "/v1/images/generations", Kind: ImageGenerations, Bound: BoundTokens},
	{Method: "POST", Path: "/v1/images/edits", Kind: ImageEdits, Bound: BoundTokens, MaxBody: MaxImageUpload},
	{Method: "POST", Path: "/v1/images/variations", Kind: ImageVariations, Bound: BoundTokens, MaxBody: MaxImageUpload},
	{Method: "POST", Path: "/v1/audio/speech", Kind: Speech, Bound: BoundTokens},
	{Method: "POST", Path: "/v1/audio/transcriptions", Kind: Transcription, Bound: BoundTokens, MaxBody: MaxAudioUpload},
	{Method: "POST", Path: "/v1/audio/translations", Kind: Transcription, Bound: BoundTokens, MaxBody: MaxAudioUpload},

	// Free reads.
	{Method: "GET", Path: "/v1/models", Bound: BoundFree},
	{Method: "GET", Path: "/v1/models/{model}", Bound: BoundFree},

	// Objects stored under the key that made them.
	{Method: "GET", Path: "/v1/chat/completions", Stored: true},
	{Method: "GET", Path: "/v1/chat/completions/{id}", Stored: true},
	{Method: "GET", Path: "/v1/chat/completions/{id}/messages", Stored: true},
	{Method: "DELETE", Path: "/v1/chat/completions/{id}", Stored: true},
	{Method: "GET", Path: "/v1/responses/{id}", Stored: true},
	{Method: "GET", Path: "/v1/responses/{id}/input_items", Stored: true},
	{Method: "DELETE", Path: "/v1/responses/{id}", Stored: true},
	{Method: "GET", Path: "/v1/files", Stored: true},
	{Method: "POST", Path: "/v1/files", Stored: true},
	{Method: "GET", Path: "/v1/files/{id}", Stored: true},
	{Method: "GET", Path: "/v1/files/{id}/content", Stored: true},
	{Method: "DELETE", Path: "/v1/files/{id}", Stored: true},
	{Method: "GET", Path: "/v1/batches", Stored: true},
	{Method: "GET", Path: "/v1/batches/{id}", Stored: true},

	// Known, and refused: what they bill cannot be bounded from the
	// request.
	{Method: "*", Path: "/v1/batches", Refused: refusedBatch},
	{Method: "*", Path: "/v1/batches/{rest...}", Refused: refusedBatch},
	{Method: "*", Path: "/v1/fine_tuning/{rest...}", Refused: refusedTuning},
	{Method: "*", Path: "/v1/assistants", Refused: refusedRun},
	{Method: "*", Path: "/v1/assistants/{rest...}", Refused: refusedRun},
	{Method: "*", Path: "/v1/threads", Refused: refusedRun},
	{Method: "*", Path: "/v1/threads/{rest...}", Refused: refusedRun},
	{Method: "*", Path: "/v1/realtime/{rest...}", Refused: refusedRealtime},
	{Method: "*", Path: "/v1/vector_stores", Refused: refusedStores},
	{Method: "*", Path: "/v1/vector_stores/{rest...}", Refused: refusedStores},
	{Method: "*", Path: "/v1/uploads", Refused: refusedStores},
	{Method: "*", Path: "/v1/uploads/{rest...}", Refused: refusedStores},
	{Method: "*", Path: "/v1/videos", Refused: refusedVideo},
	{Method: "*", Path: "/v1/videos/{rest...}", Refused: refusedVideo},
	{Method: "*", Path: "/v1/audio/voices", Refused: refusedVoice},
	{Method: "*", Path: "/v1/audio/voices/{rest...}", Refused: refusedVoice},
}
