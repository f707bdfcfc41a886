package proxy

import (
	"context"
	"net/http"

	"github.com/ratelimit-gateway/gateway/policies"
)

// errorFormat is the shape of the gateway's own answers on a route: its
// own JSON, or on an llm route the provider's, which its SDKs read (they
// raise their RateLimitError on a 429 and back off by themselves).
type errorFormat uint8

const (
	formatGateway errorFormat = iota
	formatOpenAI
	formatAnthropic
	// formatGRPC: a gRPC status, trailers-only (grpc.go); every gRPC
	// call's, whatever its route says.
	formatGRPC
)

// String is the format as the config names it (error_format).
func (f errorFormat) String() string {
	switch f {
	case formatOpenAI:
		return "openai"
	case formatAnthropic:
		return "anthropic"
	case formatGRPC:
		return "grpc"
	}
	return "gateway"
}

// routeErrorFormat is route's error format.
func routeErrorFormat(route *policies.Route) errorFormat {
	switch {
	case route.GRPCErrors:
		return formatGRPC
	case route.AnthropicErrors:
		return formatAnthropic
	case route.OpenAIErrors:
		return formatOpenAI
	}
	return formatGateway
}

// errorFormatKey carries a request's errorFormat in its context; none
// means formatGateway.
type errorFormatKey struct{}

func withErrorFormat(r *http.Request, f errorFormat) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), errorFormatKey{}, f))
}

func errorFormatOf(r *http.Request) errorFormat {
	f, _ := r.Context().Value(errorFormatKey{}).(errorFormat)
	return f
}

// openAIErrors reports whether r's answers take OpenAI's shape.
func openAIErrors(r *http.Request) bool { return errorFormatOf(r) == formatOpenAI }
