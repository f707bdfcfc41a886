package llm

import "testing"

func TestMatchPath(t *testing.T) {
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"/v1/messages", "/v1/messages", true},
		{"/v1/messages", "/v1/threads/t1/messages", false},
		{"/v1/messages", "/v1/messages/", false},
		{"/v1/messages", "/v1/messagesx", false},
		{"/v1/files/{id}", "/v1/files/f1", true},
		{"/v1/files/{id}", "/v1/files/", false},
		{"/v1/files/{id}", "/v1/files/f1/content", false},
		{"/v1/batches/{rest...}", "/v1/batches/b1/cancel", true},
		{"/v1/batches/{rest...}", "/v1/batches", false},
		{"/v1/batches/{rest...}", "/v1/batches/", false},
		{"/v1/models", "", false},
	} {
		if got := MatchPath(tc.pattern, tc.path); got != tc.want {
			t.Errorf("MatchPath(%q, %q) = %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
}

// Each provider finds its own endpoints, by method and whole path: a
// thread's messages are no Anthropic call, and a GET of chat completions
// is a read of stored ones, not a call.
func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		api          *API
		method, path string
		kind         Kind
		refused      bool
		stored       bool
		found        bool
	}{
		{OpenAI, "POST", "/v1/chat/completions", ChatCompletions, false, false, true},
		{OpenAI, "GET", "/v1/chat/completions", 0, false, true, true},
		{OpenAI, "POST", "/v1/threads/t1/messages", 0, true, false, true},
		{OpenAI, "POST", "/v1/messages", 0, false, false, false},
		{OpenAI, "POST", "/v1/responses/compact", 0, true, false, true},
		{OpenAI, "GET", "/v1/batches", 0, false, true, true},
		{OpenAI, "POST", "/v1/batches", 0, true, false, true},
		{Anthropic, "POST", "/v1/messages", AnthropicMessages, false, false, true},
		{Anthropic, "POST", "/v1/messages/batches", 0, true, false, true},
		{Anthropic, "POST", "/v1/chat/completions", 0, false, false, false},
	} {
		ep := tc.api.Lookup(tc.method, tc.path)
		if (ep != nil) != tc.found {
			t.Errorf("%s %s %s: found %v, want %v", tc.api.Name, tc.method, tc.path, ep != nil, tc.found)
			continue
		}
		if ep != nil && (ep.Kind != tc.kind || (ep.Refused != "") != tc.refused || ep.Stored != tc.stored) {
			t.Errorf("%s %s %s: got %+v, want kind %v refused %v stored %v", tc.api.Name, tc.method, tc.path, ep, tc.kind, tc.refused, tc.stored)
		}
	}
}

func TestLookupAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { OpenAI.Lookup("POST", "/v1/audio/transcriptions") }); n != 0 {
		t.Fatalf("got %v allocations, want 0", n)
	}
}
