package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/llm"
)

// streamOf writes a chat stream of n words and then the given end.
func streamOf(n int, end string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for range n {
			fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" tenant"},"finish_reason":null}]}`+"\n\n")
		}
		fmt.Fprint(w, end)
	})
}

// A call is charged at least what it was seen to deliver: a usage lower
// than the output streamed is not believed, and a stream that ends in an
// error event after its content is charged its prompt and that content.
func TestWhatWasSeenCounts(t *testing.T) {
	body := strings.Replace(chatBody, `"max_tokens":100`, `"max_tokens":500`, 1)
	body = strings.Replace(body, "%s", `,"stream":true,"stream_options":{"include_usage":true}`, 1)
	req, err := llm.ParseRequest(llm.ChatCompletions, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		end  string
		want int64
	}{
		{"usage lower than the stream", `data: {"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}` + "\n\ndata: [DONE]\n\n",
			5 + 200},
		{"an error event after content", `data: {"error":{"message":"overloaded","type":"server_error"}}` + "\n\n",
			req.PromptTokens + 200},
		{"an error event after content, with a usage of nothing", `data: {"error":{"message":"x"}}` + "\n\n" +
			`data: {"id":"c","choices":[],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}` + "\n\n",
			req.PromptTokens + 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := llmGatewayOn(t, streamOf(200, tt.end), 100_000)
			resp := postWith(t, g.url, body, "")
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			g.waitSettled(t)
			if got := g.used(t); got < tt.want {
				t.Fatalf("charged %d, want at least %d", got, tt.want)
			}
		})
	}
}
