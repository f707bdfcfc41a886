package llm

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Azure is Azure OpenAI's API, as routes with llm: azure speak it: OpenAI's
// request and response bodies under Azure's paths, a deployment in the
// path where Azure names one (routes[].deployments says which model it
// serves), and api-version in every query; and Azure's v1 API, OpenAI's
// own paths under /openai/v1/, the deployment in the body's model, with no
// dated api-version.
var Azure = &API{Name: "azure", Endpoints: slices.Concat(azureEndpoints, azureV1(openAIEndpoints))}

// AzureProvider is Azure OpenAI as a Provider: a tenant's key in api-key
// (where the SDK's AzureOpenAI client sends it) or, an Entra token, as a
// Bearer token; the operator's key sent upstream as api-key; Azure's error
// body; OpenAI's rate-limit headers, which Azure sends too.
var AzureProvider Provider = azureProvider{}

func init() { Register(AzureProvider) }

type azureProvider struct{}

func (azureProvider) Name() string         { return Azure.Name }
func (azureProvider) API() *API            { return Azure }
func (azureProvider) KeyHeaders() []string { return azureKeyHeaders }
func (azureProvider) Headers() HeaderSet   { return HeadersOpenAI }

var azureKeyHeaders = []string{"Api-Key", "Authorization"}

// AzureAPIVersion is the api-version sent upstream when a client sends
// none: Azure refuses a call without one.
const AzureAPIVersion = "2024-10-21"

// azureUsageSince is the first API version whose streams take
// stream_options; an earlier one refuses the field.
const azureUsageSince = "2024-09-01"

var azureEndpoints = []Endpoint{
	{Method: "POST", Path: "/openai/deployments/{deployment}/chat/completions", Kind: ChatCompletions, Bound: BoundTokens},
	{Method: "POST", Path: "/openai/deployments/{deployment}/completions", Kind: Completions, Bound: BoundTokens},
	{Method: "POST", Path: "/openai/deployments/{deployment}/embeddings", Kind: Embeddings, Bound: BoundTokens},
	{Method: "POST", Path: "/openai/deployments/{deployment}/images/generations", Kind: ImageGenerations, Bound: BoundTokens},
	{Method: "POST", Path: "/openai/deployments/{deployment}/audio/speech", Kind: Speech, Bound: BoundTokens},
	{Method: "POST", Path: "/openai/deployments/{deployment}/audio/transcriptions", Kind: Transcription, Bound: BoundTokens, MaxBody: MaxAudioUpload},
	{Method: "POST", Path: "/openai/deployments/{deployment}/audio/translations", Kind: Transcription, Bound: BoundTokens, MaxBody: MaxAudioUpload},
	{Method: "POST", Path: "/openai/deployments/{deployment}/images/edits", Kind: ImageEdits, Bound: BoundTokens, MaxBody: MaxImageUpload},
	// Served without a deployment in the path: the body's model names it.
	{Method: "POST", Path: "/openai/responses", Kind: Responses, Bound: BoundTokens},
	{Method: "GET", Path: "/openai/responses/{id}", Stored: true},
	{Method: "DELETE", Path: "/openai/responses/{id}", Stored: true},
	{Method: "GET", Path: "/openai/responses/{id}/input_items", Stored: true},
	{Method: "GET", Path: "/openai/models", Bound: BoundFree},
	{Method: "GET", Path: "/openai/models/{model}", Bound: BoundFree},
	{Method: "GET", Path: "/openai/files", Stored: true},
	{Method: "POST", Path: "/openai/files", Stored: true},
	{Method: "GET", Path: "/openai/files/{id}", Stored: true},
	{Method: "GET", Path: "/openai/files/{id}/content", Stored: true},
	{Method: "DELETE", Path: "/openai/files/{id}", Stored: true},

	{Method: "*", Path: "/openai/batches", Refused: refusedBatch},
	{Method: "*", Path: "/openai/batches/{rest...}", Refused: refusedBatch},
	{Method: "*", Path: "/openai/deployments/{deployment}/batches", Refused: refusedBatch},
	{Method: "*", Path: "/openai/fine_tuning/{rest...}", Refused: refusedTuning},
	{Method: "*", Path: "/openai/assistants", Refused: refusedRun},
	{Method: "*", Path: "/openai/assistants/{rest...}", Refused: refusedRun},
	{Method: "*", Path: "/openai/threads", Refused: refusedRun},
	{Method: "*", Path: "/openai/threads/{rest...}", Refused: refusedRun},
	{Method: "*", Path: "/openai/realtime", Refused: refusedRealtime},
	{Method: "*", Path: "/openai/realtime/{rest...}", Refused: refusedRealtime},
	{Method: "*", Path: "/openai/vector_stores", Refused: refusedStores},
	{Method: "*", Path: "/openai/vector_stores/{rest...}", Refused: refusedStores},
}

// azureV1Prefix is where Azure's v1 API serves OpenAI's paths.
const azureV1Prefix = "/openai"

// azureV1 is Azure's v1 API: each of OpenAI's endpoints, bounds and
// refusals as they are, under /openai.
func azureV1(openAI []Endpoint) []Endpoint {
	out := make([]Endpoint, len(openAI))
	for i, e := range openAI {
		e.Path = azureV1Prefix + e.Path
		out[i] = e
	}
	return out
}

// Upstream sends the operator's key as api-key, and the API version a
// client left out, but to the v1 API, which takes no dated version.
func (azureProvider) Upstream(out *http.Request, key string) {
	if key != "" {
		delete(out.Header, "Authorization")
		out.Header["Api-Key"] = []string{key}
	}
	if strings.HasPrefix(out.URL.Path, azureV1Prefix+"/v1/") {
		return
	}
	switch q := out.URL.Query(); {
	case q.Get("api-version") != "":
	case q.Has("api-version"):
		q.Set("api-version", AzureAPIVersion)
		out.URL.RawQuery = q.Encode()
	case out.URL.RawQuery == "":
		out.URL.RawQuery = "api-version=" + AzureAPIVersion
	default:
		out.URL.RawQuery += "&api-version=" + AzureAPIVersion
	}
}

// AsksUsage reports whether r's API version takes stream_options: from
// 2024-09-01 on, and the versionless ones ("preview", "latest", "v1").
func (azureProvider) AsksUsage(r *http.Request) bool {
	v := r.URL.Query().Get("api-version")
	if v == "" {
		v = AzureAPIVersion
	}
	if len(v) < len(azureUsageSince) || v[4] != '-' || v[0] < '0' || v[0] > '9' {
		return true
	}
	return v[:len(azureUsageSince)] >= azureUsageSince
}

// ErrorBody renders e as Azure OpenAI does: {"error": {"code", "message"}},
// the code the status; a 429 no wait fixes is insufficient_quota, which
// the SDK, told x-should-retry: false, raises at once.
func (azureProvider) ErrorBody(status int, e Refusal) []byte {
	code := strconv.Itoa(status)
	if status == http.StatusTooManyRequests && e.Final {
		code = "insufficient_quota"
	}
	type detail struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	b, _ := json.Marshal(struct {
		Error detail `json:"error"`
	}{detail{code, e.Message}}) // strings only: cannot fail
	return b
}
