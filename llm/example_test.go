package llm_test

import (
	"fmt"
	"io"
	"strings"

	"github.com/ratelimit-gateway/gateway/llm"
)

// Example shows the order the proxy uses the package in: parse and reserve,
// ask for usage, watch the stream, reconcile.
func Example() {
	body := []byte(`{"model":"gpt-4o-mini","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"Say hi"}]}`)
	req, err := llm.ParseRequest(llm.ChatCompletions, body)
	if err != nil {
		fmt.Println("400:", err)
		return
	}
	fmt.Println("reserve", req.PromptTokens+req.MaxOutput)

	body, added, err := llm.WithIncludeUsage(body)
	if err != nil {
		fmt.Println("400:", err)
		return
	}
	fmt.Println(string(body))

	upstream := strings.NewReader("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi!\"}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n" +
		"data: [DONE]\n\n")
	w := llm.NewStreamWatcher(upstream, llm.StreamConfig{Kind: llm.ChatCompletions, Model: req.Model, DropUsageChunk: added})
	toClient, _ := io.ReadAll(w)
	fmt.Printf("%s", toClient)
	if u, ok := w.Usage(); ok {
		fmt.Println("charge", u.Total)
	} else {
		fmt.Println("charge", req.PromptTokens+w.Delivered())
	}
	// Output:
	// reserve 59
	// {"model":"gpt-4o-mini","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"Say hi"}],"stream_options":{"include_usage":true}}
	// data: {"choices":[{"index":0,"delta":{"content":"Hi!"}}],"usage":null}
	//
	// data: [DONE]
	//
	// charge 11
}
