package builtin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/llm"
)

// The shipped OpenAI mock bills a prompt as the model's vocabulary counts
// it, not at four characters a token: 100 × "hello " is 100 tokens in
// o200k and 150 by the estimate.
func TestShippedOpenAIMockCountsRealTokens(t *testing.T) {
	text := strings.Repeat("hello ", 100)
	body := `{"model":"gpt-4o-mini","max_tokens":1,"messages":[{"role":"user","content":"` + text + `"}]}`
	rec := httptest.NewRecorder()
	Upstreams()["openai-mock"].ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
	var resp struct {
		Usage struct {
			PromptTokens int64 `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("got %d %s: %v", rec.Code, rec.Body, err)
	}
	want := llm.CountTokens("gpt-4o-mini", text)
	if got := resp.Usage.PromptTokens; got < want || got > want+10 {
		t.Fatalf("prompt_tokens %d, want the vocabulary's %d plus the message overhead (estimate: %d)", got, want, estimateTokens(text))
	}
}
