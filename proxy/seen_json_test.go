package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// A JSON answer whose usage says less output than it shows is charged what
// it shows.
func TestJSONAnswerChargedWhatItShows(t *testing.T) {
	text := strings.TrimSpace(strings.Repeat(" tenant", 200))
	g := llmGatewayOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"`+text+`"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	}), 100_000)
	resp := postWith(t, g.url, strings.Replace(strings.Replace(chatBody, `"max_tokens":100`, `"max_tokens":500`, 1), "%s", "", 1), "")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	g.waitSettled(t)
	if got := g.used(t); got < 5+200 {
		t.Fatalf("charged %d, want the prompt 5 and the 200 tokens shown", got)
	}
}
