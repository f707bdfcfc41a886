package policies

// How an llm route holds a stream to the tenant's tokens (routes[].enforce).
const (
	// EnforceReserve reserves a call's whole output cap before it is
	// forwarded: the tokens a tenant has bound what it can be billed.
	EnforceReserve = "reserve"
	// EnforceStream reserves a stream's output a window at a time as it
	// flows and ends the stream when the tenant has no window left.
	EnforceStream = "stream"
)

// maxStreamWindow bounds stream_window: a window is reserved at once, and
// one larger than any output cap would make the mode pointless.
const maxStreamWindow = 1 << 20

// validateEnforce checks a route's enforce and stream_window.
func validateEnforce(p *problems, place string, rt *RouteConfig) {
	switch {
	case rt.LLM == "" && rt.Enforce != "":
		p.add(place+".enforce", "applies to llm routes only (set llm: openai or llm: anthropic)")
	case rt.LLM == "":
	case rt.Enforce != EnforceReserve && rt.Enforce != EnforceStream:
		p.addf(place+".enforce", "must be reserve or stream, got %q", rt.Enforce)
	}
	switch {
	case rt.StreamWindow != 0 && rt.Enforce != EnforceStream:
		p.add(place+".stream_window", "applies with enforce: stream only")
	case rt.StreamWindow < 0 || rt.StreamWindow > maxStreamWindow:
		p.addf(place+".stream_window", "must be between 1 and %d, got %d", maxStreamWindow, rt.StreamWindow)
	}
}
