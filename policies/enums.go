package policies

import "github.com/ratelimit-gateway/gateway/limiter"

// The config's closed lists of names are typed values: checkStrict reads
// each through its UnmarshalText, so a name outside the list is an error
// with the file and the place, and the decoder through the same method.

// Costs lists every cost.
var Costs = []Cost{CostRequests, CostTokens, CostInputTokens, CostOutputTokens, CostUSD}

// MissingKeys lists every missing-key behaviour.
var MissingKeys = []MissingKey{MissingSkip, MissingShared, MissingReject}

// RateLimitHeaderSets lists every set of rate-limit headers.
var RateLimitHeaderSets = []RateLimitHeaders{RateLimitHeadersAll, RateLimitHeadersIETF, RateLimitHeadersLegacy, RateLimitHeadersNone}

// UnmarshalText sets s to the set named by text, one of
// RateLimitHeaderSets; empty text leaves the zero value, all of them.
func (s *RateLimitHeaders) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(s, RateLimitHeaderSets, text)
}

// MarshalText returns the set's name.
func (s RateLimitHeaders) MarshalText() ([]byte, error) { return []byte(s), nil }

// UnmarshalText sets c to the cost named by text, one of Costs; empty text
// leaves the zero value, which defaults to CostRequests.
func (c *Cost) UnmarshalText(text []byte) error { return limiter.UnmarshalName(c, Costs, text) }

// MarshalText returns the cost's name.
func (c Cost) MarshalText() ([]byte, error) { return []byte(c), nil }

// UnmarshalText sets m to the behaviour named by text, one of MissingKeys;
// empty text leaves the zero value, which defaults to MissingShared.
func (m *MissingKey) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(m, MissingKeys, text)
}

// MarshalText returns the behaviour's name.
func (m MissingKey) MarshalText() ([]byte, error) { return []byte(m), nil }

// Mode is how a policy, or the whole file, applies: enforce or shadow.
type Mode string

// The modes.
const (
	ModeEnforce Mode = "enforce" // a denial is answered
	ModeShadow  Mode = "shadow"  // evaluated and counted, nothing blocked
)

// Modes lists every mode.
var Modes = []Mode{ModeEnforce, ModeShadow}

// UnmarshalText sets m to the mode named by text, one of Modes; empty text
// leaves the zero value, which defaults to ModeEnforce.
func (m *Mode) UnmarshalText(text []byte) error { return limiter.UnmarshalName(m, Modes, text) }

// MarshalText returns the mode's name.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m), nil }

// OnLimit is what a policy does with a request over its limit.
type OnLimit string

// The answers to a request over the limit.
const (
	OnLimitReject OnLimit = "reject" // 429 at once
	OnLimitDelay  OnLimit = "delay"  // wait for its turn, up to max_delay
)

// OnLimits lists every answer to a request over the limit.
var OnLimits = []OnLimit{OnLimitReject, OnLimitDelay}

// UnmarshalText sets o to the answer named by text, one of OnLimits; empty
// text leaves the zero value, which defaults to OnLimitReject.
func (o *OnLimit) UnmarshalText(text []byte) error { return limiter.UnmarshalName(o, OnLimits, text) }

// MarshalText returns the answer's name.
func (o OnLimit) MarshalText() ([]byte, error) { return []byte(o), nil }

// Charge is what an llm call that ended without the provider's usage is
// charged (charge_without_usage).
type Charge string

// The charges of a call without usage.
const (
	ChargeReserved  Charge = "reserved"  // its reservation: an upper bound of what it was billed
	ChargeDelivered Charge = "delivered" // its prompt and the text that reached the client
)

// Charges lists every charge of a call without usage.
var Charges = []Charge{ChargeReserved, ChargeDelivered}

// UnmarshalText sets c to the charge named by text, one of Charges; empty
// text leaves the zero value, which a policy counting tokens defaults to
// ChargeReserved.
func (c *Charge) UnmarshalText(text []byte) error { return limiter.UnmarshalName(c, Charges, text) }

// MarshalText returns the charge's name.
func (c Charge) MarshalText() ([]byte, error) { return []byte(c), nil }

// Window is a fixed window's calendar period (window), in UTC.
type Window string

// The calendar windows.
const (
	WindowDay   Window = "day"
	WindowMonth Window = "month"
)

// Windows lists every calendar window.
var Windows = []Window{WindowDay, WindowMonth}

// UnmarshalText sets w to the window named by text, one of Windows; empty
// text leaves the zero value: no calendar window, per applies.
func (w *Window) UnmarshalText(text []byte) error { return limiter.UnmarshalName(w, Windows, text) }

// MarshalText returns the window's name.
func (w Window) MarshalText() ([]byte, error) { return []byte(w), nil }

// OnConflict is what an idempotent request does while another with its key
// runs.
type OnConflict string

// The answers to a conflict.
const (
	OnConflictReject OnConflict = "reject" // 409 at once
	OnConflictWait   OnConflict = "wait"   // wait for the first one's response, up to max_wait
)

// OnConflicts lists every answer to a conflict.
var OnConflicts = []OnConflict{OnConflictReject, OnConflictWait}

// UnmarshalText sets o to the answer named by text, one of OnConflicts;
// empty text leaves the zero value, which defaults to OnConflictReject.
func (o *OnConflict) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(o, OnConflicts, text)
}

// MarshalText returns the answer's name.
func (o OnConflict) MarshalText() ([]byte, error) { return []byte(o), nil }

// LogFormat is the process log's shape: log.format.
type LogFormat string

// The log formats.
const (
	LogText LogFormat = "text" // slog's text handler
	LogJSON LogFormat = "json" // one JSON object a line
)

// LogFormats lists every log format.
var LogFormats = []LogFormat{LogText, LogJSON}

// UnmarshalText sets f to the format named by text, one of LogFormats;
// empty text leaves the zero value, which defaults to LogText.
func (f *LogFormat) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(f, LogFormats, text)
}

// MarshalText returns the format's name.
func (f LogFormat) MarshalText() ([]byte, error) { return []byte(f), nil }

// ForwardedHeader is the header a trusted proxy's client chain is read
// from: server.forwarded_header.
type ForwardedHeader string

// The forwarding headers.
const (
	ForwardedXFF      ForwardedHeader = "x-forwarded-for" // X-Forwarded-For
	ForwardedStandard ForwardedHeader = "forwarded"       // RFC 7239 Forwarded
)

// ForwardedHeaders lists every forwarding header.
var ForwardedHeaders = []ForwardedHeader{ForwardedXFF, ForwardedStandard}

// UnmarshalText sets f to the header named by text, one of
// ForwardedHeaders; empty text leaves the zero value, which defaults to
// ForwardedXFF.
func (f *ForwardedHeader) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(f, ForwardedHeaders, text)
}

// MarshalText returns the header's name.
func (f ForwardedHeader) MarshalText() ([]byte, error) { return []byte(f), nil }

// PathParameters is what a path segment's parameters (";" and what follows
// it) get: server.path_parameters.
type PathParameters string

// The answers to path parameters.
const (
	PathParametersReject PathParameters = "reject" // 400
	PathParametersStrip  PathParameters = "strip"  // matched and forwarded without them
)

// PathParameterModes lists every answer to path parameters.
var PathParameterModes = []PathParameters{PathParametersReject, PathParametersStrip}

// UnmarshalText sets m to the answer named by text, one of
// PathParameterModes; empty text leaves the zero value, which defaults to
// PathParametersReject.
func (m *PathParameters) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(m, PathParameterModes, text)
}

// MarshalText returns the answer's name.
func (m PathParameters) MarshalText() ([]byte, error) { return []byte(m), nil }

// IdempotencyRedisMode is what a route's idempotency does when Redis
// fails: idempotency.on_redis_error.
type IdempotencyRedisMode string

// The idempotency failure modes.
const (
	IdempotencyDeny  IdempotencyRedisMode = "deny"  // 503
	IdempotencyAllow IdempotencyRedisMode = "allow" // forwarded without the key's protection
)

// IdempotencyRedisModes lists every idempotency failure mode.
var IdempotencyRedisModes = []IdempotencyRedisMode{IdempotencyDeny, IdempotencyAllow}

// UnmarshalText sets m to the mode named by text, one of
// IdempotencyRedisModes; empty text leaves the zero value, which defaults
// to IdempotencyDeny.
func (m *IdempotencyRedisMode) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(m, IdempotencyRedisModes, text)
}

// MarshalText returns the mode's name.
func (m IdempotencyRedisMode) MarshalText() ([]byte, error) { return []byte(m), nil }

// UpstreamTransport is the process's upstream transport:
// server.upstream_transport.
type UpstreamTransport string

// The values of server.upstream_transport.
const (
	UpstreamTransportLean     UpstreamTransport = "lean"     // proxy/h1 for http:// upstreams, net/http's for the rest
	UpstreamTransportStandard UpstreamTransport = "standard" // net/http's for all
)

// UpstreamTransports lists every upstream transport.
var UpstreamTransports = []UpstreamTransport{UpstreamTransportLean, UpstreamTransportStandard}

// UnmarshalText sets t to the transport named by text, one of
// UpstreamTransports; empty text leaves the zero value, which defaults to
// UpstreamTransportLean.
func (t *UpstreamTransport) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(t, UpstreamTransports, text)
}

// MarshalText returns the transport's name.
func (t UpstreamTransport) MarshalText() ([]byte, error) { return []byte(t), nil }

// ClientServer is the process's server of client connections:
// server.client_server.
type ClientServer string

// The values of server.client_server.
const (
	ClientServerLean     ClientServer = "lean"     // proxy/h1's for plain HTTP/1.1, net/http's for the rest
	ClientServerStandard ClientServer = "standard" // net/http's for all
)

// ClientServers lists every client server.
var ClientServers = []ClientServer{ClientServerLean, ClientServerStandard}

// UnmarshalText sets s to the server named by text, one of ClientServers;
// empty text leaves the zero value, which defaults to ClientServerLean.
func (s *ClientServer) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(s, ClientServers, text)
}

// MarshalText returns the server's name.
func (s ClientServer) MarshalText() ([]byte, error) { return []byte(s), nil }

// Enforce is how an llm route holds a stream to the tenant's tokens:
// routes[].enforce.
type Enforce string

// The values of routes[].enforce.
const (
	// EnforceReserve reserves a call's whole output cap before it is
	// forwarded: the tokens a tenant has bound what it can be billed.
	EnforceReserve Enforce = "reserve"
	// EnforceStream reserves a stream's output a window at a time as it
	// flows and ends the stream when the tenant has no window left.
	EnforceStream Enforce = "stream"
)

// Enforces lists every way of holding a stream.
var Enforces = []Enforce{EnforceReserve, EnforceStream}

// UnmarshalText sets e to the way named by text, one of Enforces; empty
// text leaves the zero value, which defaults to EnforceReserve on an llm
// route.
func (e *Enforce) UnmarshalText(text []byte) error { return limiter.UnmarshalName(e, Enforces, text) }

// MarshalText returns the way's name.
func (e Enforce) MarshalText() ([]byte, error) { return []byte(e), nil }

// UnsizedInput is what an llm call whose billed input the gateway cannot
// see gets on a route with a token or usd policy: routes[].unsized_input.
type UnsizedInput string

// The values of routes[].unsized_input.
const (
	UnsizedInputRefuse        UnsizedInput = "refuse"         // 400
	UnsizedInputContextWindow UnsizedInput = "context_window" // the model's context window is reserved
)

// UnsizedInputs lists every answer to an unsized input.
var UnsizedInputs = []UnsizedInput{UnsizedInputRefuse, UnsizedInputContextWindow}

// UnmarshalText sets u to the answer named by text, one of UnsizedInputs;
// empty text leaves the zero value, which defaults to UnsizedInputRefuse
// on an llm route.
func (u *UnsizedInput) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(u, UnsizedInputs, text)
}

// MarshalText returns the answer's name.
func (u UnsizedInput) MarshalText() ([]byte, error) { return []byte(u), nil }
