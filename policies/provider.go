package policies

import (
	"fmt"
	"strings"

	"github.com/ratelimit-gateway/gateway/llm"
)

// LLMAPI is routes[].llm: the name of a provider API in llm's registry,
// or "" for a route that is not an llm route. A name the registry lacks
// is refused as the file is read, with the file and the place.
type LLMAPI string

// UnmarshalText sets a to the provider API named by text; empty text
// leaves "", not an llm route.
func (a *LLMAPI) UnmarshalText(text []byte) error {
	if len(text) > 0 && llm.ProviderNamed(string(text)) == nil {
		return fmt.Errorf("must be %s, got %q", llm.ProviderNames(), text)
	}
	*a = LLMAPI(text)
	return nil
}

// MarshalText returns the provider API's name.
func (a LLMAPI) MarshalText() ([]byte, error) { return []byte(a), nil }

// Provider is the provider API a names, nil for "".
func (a LLMAPI) Provider() llm.Provider { return llm.ProviderNamed(string(a)) }

// ErrorFormat is routes[].error_format: the gateway's own shape, gRPC's,
// or the error body of a provider API in llm's registry.
type ErrorFormat string

// The formats that are not a provider API's.
const (
	// ErrorFormatGateway is the gateway's own {"code", "message", ...}.
	ErrorFormatGateway ErrorFormat = "gateway"
	// ErrorFormatGRPC is the gRPC shape of the gateway's own answers:
	// HTTP 200 and a grpc-status in a trailers-only response.
	ErrorFormatGRPC ErrorFormat = "grpc"
)

// UnmarshalText sets f to the format named by text: gateway, grpc or a
// registered provider API's name; empty text leaves "", which defaults to
// the route's llm API, else gateway.
func (f *ErrorFormat) UnmarshalText(text []byte) error {
	switch s := ErrorFormat(text); {
	case s == "", s == ErrorFormatGateway, s == ErrorFormatGRPC, llm.ProviderNamed(string(s)) != nil:
		*f = s
		return nil
	}
	return fmt.Errorf("must be gateway, %s or grpc, got %q", strings.ReplaceAll(llm.ProviderNames(), " or ", ", "), text)
}

// MarshalText returns the format's name.
func (f ErrorFormat) MarshalText() ([]byte, error) { return []byte(f), nil }

// Provider is the provider API whose error body f names, nil for gateway
// and grpc.
func (f ErrorFormat) Provider() llm.Provider { return llm.ProviderNamed(string(f)) }
