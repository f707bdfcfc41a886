// Package llm reads the token cost out of OpenAI-compatible (and Anthropic
// messages, and Azure OpenAI) requests and responses, so that the proxy can
// reserve tokens before forwarding and reconcile the reservation with what
// the provider reports afterwards. It knows nothing about the handler,
// policies or the limiter: it works on bodies as bytes and on response
// streams as io.Readers; of HTTP it knows a provider's headers.
//
// The contract, piece by piece:
//
//   - A Provider is one provider API, in one file, registered by name:
//     its API (declared endpoints and their bounds; each endpoint's Kind
//     reads the request, the cap field, usage and stream events), the
//     headers a tenant's key is read from, how a request is fitted on its
//     way up (the operator's key, required headers and query), its error
//     body, its rate-limit header set, and whether a stream may be asked
//     for its usage. A route names its provider once (routes[].llm); the
//     config, the handler and the docs' error_format read the registry.
//   - An API (OpenAI, Anthropic) is a provider's endpoints as the gateway
//     knows them: each Endpoint says how a call's cost is bounded before
//     it is forwarded (BoundTokens: read by its Kind; BoundFixed: an
//     operator's cost per call; BoundFree), whether it is refused and why,
//     whether it reaches objects stored under the key that made them, and
//     its own body limit for uploads. Lookup finds a request's endpoint by
//     method and whole path; what no entry declares is unknown.
//   - Images (ParseRequest with ImageGenerations, ParseImageUpload), speech
//     (Speech) and transcriptions (ParseTranscription, a multipart form)
//     are bounded by their published prices and token tables; a call billed
//     per unit carries its price (Request.UnitMicroUSD).
//   - ParseRequest reads the model, streaming flags, the output cap and an
//     estimate of the prompt's tokens from a request body. Malformed JSON and
//     fields of the wrong type are errors wrapping ErrInvalidRequest (the
//     proxy answers 400). The body must already be bounded by the caller
//     (max_body_bytes): this package reads whatever it is given.
//   - Prompt tokens are counted with the o200k_base and cl100k_base
//     vocabularies embedded in github.com/tiktoken-go/tokenizer; nothing is
//     downloaded or read from disk at run time. The count is OpenAI's
//     documented approximation (see Request.PromptTokens), close to but not always
//     equal to what the provider bills: it is meant for the reservation, and
//     the provider's usage corrects it.
//   - Models (the built-in table, or the config's) groups models into
//     families, each with the bounds a call is reserved by: the cap given to
//     a call without one, the largest cap the provider accepts, an image at
//     low and high detail, audio by its bytes, a file, the context window.
//     ParseRequestFor adds each non-text part's bound to the prompt, refuses
//     numbers the provider refuses, and lists what the body cannot size.
//   - WithIncludeUsage adds stream_options.include_usage to a streaming chat
//     or completions request, and WithOutputCap the output cap to a request
//     without one, each changing no other byte of the body.
//   - ParseUsage reads the provider's usage from a JSON response.
//   - StreamWatcher passes an SSE response through unchanged and without
//     delay, records the usage the stream carries, optionally removes the
//     usage-only chunk the client did not ask for, and counts the text it
//     delivered so that a stream cut before its usage can still be charged.
//     With a Meter (enforce: stream) it passes whole events only, asks the
//     Meter before output past its grant passes, and ends a stream the
//     Meter refuses as its API ends one cut at its output limit.
//   - ParseAnthropicPrompt bounds an Anthropic prompt from its bytes
//     (Claude's tokenizer is not public).
//
// Token counts are int64, the limiter's unit of cost.
//
// # Adding a provider API
//
// A provider API is one file, <name>_api.go, with a type that implements
// Provider and an init function that registers it; the config's llm and
// error_format values, the handler's key headers, upstream auth, error
// bodies and rate-limit headers all follow from the registry. Azure
// OpenAI (azure_api.go) is the worked example:
//
//  1. Declare the endpoints: OpenAI's kinds under Azure's paths
//     ("/openai/deployments/{deployment}/chat/completions" is a
//     ChatCompletions call), the ones served without a deployment
//     ("/openai/responses"), and the ones refused with why.
//  2. KeyHeaders: "Api-Key", where the SDK sends a key, then
//     "Authorization" (an Entra token as Bearer).
//  3. Upstream: the operator's key as api-key; api-version when the
//     client sent none.
//  4. ErrorBody: Azure's {"error": {"code", "message"}}; Headers:
//     OpenAI's set, which Azure sends too.
//  5. AsksUsage: stream_options only under an API version that takes it.
//  6. Register it in init, write its mock and its docs.
//
// An endpoint path with a "{deployment}" segment makes the route take
// routes[].deployments, which maps each deployment to the model its calls
// are counted and priced as (ParseCall reads a call through that map as a
// Rename); the map is the config's, for every API that names deployments.
//
// Counted: before Provider, a provider was four route booleans and
// literals, and adding a third shape touched 19 Go files (in llm,
// policies, proxy and builtin) and 4 docs. Now it is one Go file, plus its
// mock, its tests and its docs: deleting azure_api.go, its mock and its
// three test files leaves a tree that builds, vets and passes the rest.
package llm
