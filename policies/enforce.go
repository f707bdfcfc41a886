package policies

// maxStreamWindow bounds stream_window: a window is reserved at once, and
// one larger than any output cap would make the mode pointless.
const maxStreamWindow = 1 << 20

// validateEnforce checks a route's enforce and stream_window.
func validateEnforce(p *problems, place string, rt *RouteConfig) {
	if rt.LLM == "" && rt.Enforce != "" {
		p.add(place+".enforce", "applies to llm routes only (set llm: openai or llm: anthropic)")
	}
	switch {
	case rt.StreamWindow != 0 && rt.Enforce != EnforceStream:
		p.add(place+".stream_window", "applies with enforce: stream only")
	case rt.StreamWindow < 0 || rt.StreamWindow > maxStreamWindow:
		p.addf(place+".stream_window", "must be between 1 and %d, got %d", maxStreamWindow, rt.StreamWindow)
	}
}
