package llm

// Anthropic is Anthropic's API, as routes with llm: anthropic speak it.
var Anthropic = &API{Name: "anthropic", Endpoints: anthropicEndpoints}

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
