package main

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"text/template"

	"github.com/ratelimit-gateway/gateway/bench/internal/llmload"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

var templates = template.Must(template.New("").Option("missingkey=error").
	Funcs(template.FuncMap{"until": func(n int) []struct{} { return make([]struct{}, n) }}).
	ParseFS(templateFS, "templates/*.tmpl"))

// render writes templates/name.tmpl with data to path.
func render(name, path string, data any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := templates.ExecuteTemplate(f, name+".tmpl", data); err != nil {
		f.Close()
		return fmt.Errorf("rendering %s: %w", name, err)
	}
	return f.Close()
}

// gatewayConfig is the data of gateway.yaml.tmpl: one route, at most one
// policy.
type gatewayConfig struct {
	Name, About  string
	Listen       string
	Admin        string  // "" turns the admin listener off
	Redis        string  // "" for none
	Upstream     string  // http://host:port
	LLM          bool    // POST /v1/ with llm: openai (the upstream answers llmCompletion)
	Policy       string  // a policy in YAML flow style, "" for none
	Policies     int     // how many copies of Policy the route has
	Routes       int     // routes before the measured one that never match
	Headers      string  // the route's rate_limit_headers, "" for the default
	Transport    string  // server.upstream_transport, "" for the default
	ClientServer string  // server.client_server, "" for the default
	Tracing      string  // the OTLP/HTTP endpoint of tracing, "" for none
	SampleRatio  float64 // tracing's sample_ratio
	Tenants      string  // the tenants section, "" for none
	Cert, Key    string  // server.tls's one pair of files, "" for plain HTTP
	Pool         int     // members of the route's pool, each the upstream; 0: one upstream
	Protocols    string  // server.protocols, "" for the default
	GRPC         string  // http://host:port of a gRPC health server routed to with h2c, "" for none
}

// llmBody is what the LLM target posts: the small call of llmload.
const llmBody = llmload.SmallBody

// llmCompletion is the upstream's answer to it, at once: what a provider
// returns for llmBody, usage included, which the gateway settles to.
const llmCompletion = `{"id":"chatcmpl-bench","object":"chat.completion","created":1764720000,"model":"gpt-4o-mini",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et"},"finish_reason":"length"}],` +
	`"usage":{"prompt_tokens":11,"completion_tokens":16,"total_tokens":27}}`
