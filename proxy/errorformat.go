package proxy

import (
	"context"
	"net/http"

	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// errorFormat is the shape of the gateway's own answers on a route: its
// own JSON, a gRPC status, or a provider's error body, which its SDKs read
// (they raise their RateLimitError on a 429 and back off by themselves).
// A provider's is formatProvider plus its place in llm's registry: one
// byte, which a context holds without an allocation.
type errorFormat uint8

const (
	formatGateway errorFormat = iota
	// formatGRPC: a gRPC status, trailers-only (grpc.go); every gRPC
	// call's, whatever its route says.
	formatGRPC
	formatProvider
)

// providerFormat is the error format of provider p.
func providerFormat(p llm.Provider) errorFormat {
	if i := llm.ProviderIndex(p); i >= 0 {
		return formatProvider + errorFormat(i)
	}
	return formatGateway
}

// provider is the provider whose error body f is, nil for none.
func (f errorFormat) provider() llm.Provider {
	if f < formatProvider {
		return nil
	}
	if ps := llm.Providers(); int(f-formatProvider) < len(ps) {
		return ps[f-formatProvider]
	}
	return nil
}

// String is the format as the config names it (error_format).
func (f errorFormat) String() string {
	switch {
	case f == formatGRPC:
		return "grpc"
	case f.provider() != nil:
		return f.provider().Name()
	}
	return "gateway"
}

// routeErrorFormat is route's error format.
func routeErrorFormat(route *policies.Route) errorFormat {
	switch {
	case route.GRPCErrors:
		return formatGRPC
	case route.ErrorShape != nil:
		return providerFormat(route.ErrorShape)
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

// openAIErrors reports whether r's answers take the shape of an API whose
// SDKs are OpenAI's (OpenAI's, Azure OpenAI's).
func openAIErrors(r *http.Request) bool {
	p := errorFormatOf(r).provider()
	return p != nil && p.Headers() == llm.HeadersOpenAI
}
