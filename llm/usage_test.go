package llm

import "testing"

func TestParseUsage(t *testing.T) {
	tests := []struct {
		name string
		kind Kind
		body string
		want Usage
		ok   bool
	}{
		{"chat", ChatCompletions,
			`{"id":"c","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":300,"total_tokens":1500,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":200}}}`,
			Usage{Input: 1200, CachedInput: 1024, Output: 300, Reasoning: 200, Total: 1500}, true},
		{"chat without details or total", ChatCompletions,
			`{"usage":{"prompt_tokens":10,"completion_tokens":5}}`,
			Usage{Input: 10, Output: 5, Total: 15}, true},
		{"chat null details", ChatCompletions,
			`{"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":null,"completion_tokens_details":null}}`,
			Usage{Input: 10, Output: 5, Total: 15}, true},
		{"completions", Completions, `{"usage":{"prompt_tokens":4,"completion_tokens":16,"total_tokens":20}}`,
			Usage{Input: 4, Output: 16, Total: 20}, true},
		{"embeddings", Embeddings, `{"data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}`,
			Usage{Input: 8, Total: 8}, true},
		{"responses", Responses,
			`{"id":"resp","output":[],"usage":{"input_tokens":500,"input_tokens_details":{"cached_tokens":128},"output_tokens":90,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":590}}`,
			Usage{Input: 500, CachedInput: 128, Output: 90, Reasoning: 64, Total: 590}, true},
		{"anthropic", AnthropicMessages,
			`{"type":"message","usage":{"input_tokens":20,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":50}}`,
			Usage{Input: 1120, CachedInput: 1000, Output: 50, Total: 1170, CacheWrite: 100}, true},
		{"anthropic cache writes by ttl, served tier", AnthropicMessages,
			`{"usage":{"input_tokens":20,"cache_creation_input_tokens":300,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":200},"cache_read_input_tokens":0,"output_tokens":50,"service_tier":"priority"}}`,
			Usage{Input: 320, Output: 50, Total: 370, CacheWrite: 300, CacheWrite5m: 100, CacheWrite1h: 200, ServiceTier: "priority"}, true},
		{"chat audio and tier", ChatCompletions,
			`{"service_tier":"default","usage":{"prompt_tokens":100,"completion_tokens":300,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":60},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":250}}}`,
			Usage{Input: 100, Output: 300, Total: 400, AudioInput: 60, AudioOutput: 250, ServiceTier: "default"}, true},
		{"responses tier after usage", Responses,
			`{"usage":{"input_tokens":5,"output_tokens":7},"service_tier":"flex"}`,
			Usage{Input: 5, Output: 7, Total: 12, ServiceTier: "flex"}, true},
		{"tier with an escape", ChatCompletions,
			`{"service_tier":"pri\u006frity","usage":{"prompt_tokens":1,"completion_tokens":1}}`,
			Usage{Input: 1, Output: 1, Total: 2, ServiceTier: "priority"}, true},
		{"no usage", ChatCompletions, `{"choices":[]}`, Usage{}, false},
		{"null usage", ChatCompletions, `{"usage":null}`, Usage{}, false},
		{"not json", ChatCompletions, `<html>`, Usage{}, false},
		{"wrong type", ChatCompletions, `{"usage":{"prompt_tokens":"10"}}`, Usage{}, false},
		{"empty", Responses, ``, Usage{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseUsage(tt.kind, []byte(tt.body))
			if got != tt.want || ok != tt.ok {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
