package llm

import (
	"net/http"
	"strings"
)

// Provider is a provider's HTTP API as the gateway speaks it: what a route
// naming it in routes[].llm reads, bounds, forwards and answers. Adding a
// provider API is one file that implements Provider and registers it (see
// the package doc). A Provider is a value, never changed once registered,
// and is safe for concurrent use.
type Provider interface {
	// Name is the name routes[].llm (and error_format) gives it.
	Name() string
	// API is its declared endpoints and their bounds. An endpoint's Kind
	// says how its request is read (the model, the cap field, the
	// prompt), and how its usage and stream events are.
	API() *API
	// KeyHeaders are the headers, canonical, a tenant's key is read from,
	// in order, before tenants.header.
	KeyHeaders() []string
	// Upstream fits a request on its way up to the API: key, when not "",
	// is the operator's key put where the provider reads it, in place of
	// the tenant's; the headers and query the API requires are added when
	// the client left them out.
	Upstream(out *http.Request, key string)
	// ErrorBody renders one of the gateway's own answers as the provider's
	// error body, which its SDKs read.
	ErrorBody(status int, e Refusal) []byte
	// Headers is the provider's own rate-limit header set.
	Headers() HeaderSet
	// AsksUsage reports whether a stream request r may be given the
	// provider's ask for a usage chunk (stream_options.include_usage).
	AsksUsage(r *http.Request) bool
}

// Refusal is what a gateway's own answer says, for ErrorBody.
type Refusal struct {
	Message string
	// Final marks a 429 no wait fixes (a spent budget): the SDKs are
	// told not to retry.
	Final bool
}

// HeaderSet is a provider's own rate-limit headers.
type HeaderSet uint8

const (
	// HeadersOpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens,usd}.
	HeadersOpenAI HeaderSet = iota
	// HeadersAnthropic: anthropic-ratelimit-{requests,tokens,input-tokens,
	// output-tokens}-{limit,remaining,reset}, resets as RFC 3339 instants.
	HeadersAnthropic
)

// providers is the registry: every provider API a route may name, in the
// order their files register them (by file name).
var providers []Provider

// Register adds p to the registry, from an init function of the file that
// defines p. Two providers of one name are a programming error: Register
// panics, at start-up, before any config is read.
func Register(p Provider) {
	if ProviderNamed(p.Name()) != nil {
		panic("llm: provider " + p.Name() + " registered twice")
	}
	providers = append(providers, p)
}

// ProviderNamed is the registered provider of name, nil for none.
func ProviderNamed(name string) Provider {
	for _, p := range providers {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

// ProviderIndex is p's place in the registry, from 0; -1 when p is not
// registered.
func ProviderIndex(p Provider) int {
	for i, q := range providers {
		if q == p {
			return i
		}
	}
	return -1
}

// Providers are the registered providers, in order.
func Providers() []Provider { return providers }

// ProviderNames lists the registered names for a message: "a, b or c".
func ProviderNames() string {
	names := make([]string, len(providers))
	for i, p := range providers {
		names[i] = p.Name()
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
