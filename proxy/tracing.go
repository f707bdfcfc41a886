package proxy

import (
	"context"
	"encoding/hex"
	"net/http"

	"github.com/ratelimit-gateway/gateway/policies"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the proxy's spans' instrumentation scope.
const tracerName = "github.com/ratelimit-gateway/gateway/proxy"

// traceContext reads and writes W3C traceparent and tracestate.
var traceContext propagation.TraceContext

// Span options built once: an option is an interface value, which built
// per request would be an allocation on every request, recorded or not.
var (
	serverSpan = trace.WithSpanKind(trace.SpanKindServer)
	clientSpan = trace.WithSpanKind(trace.SpanKindClient)
)

// What a span says about a request comes from these, and from nothing else:
// names from the config (route, policy, tenant, model), the method, the
// canonical path (never the query: the access log's rule), numbers, and the
// gateway's own messages. Never a header, a key or a client address.
const (
	attrRoute     = attribute.Key("gateway.route")
	attrOutcome   = attribute.Key("gateway.outcome")
	attrPolicy    = attribute.Key("gateway.policy")
	attrTenant    = attribute.Key("gateway.tenant")
	attrRefusal   = attribute.Key("gateway.refusal")
	attrReason    = attribute.Key("gateway.reason")
	attrRetry     = attribute.Key("gateway.retry_after_ms")
	attrRemaining = attribute.Key("gateway.remaining")
	attrShadow    = attribute.Key("gateway.shadow_limited")
	attrDelayed   = attribute.Key("gateway.delayed_ms")
	attrBackend   = attribute.Key("gateway.backend")
	attrAllowed   = attribute.Key("gateway.allowed")
	attrModel     = attribute.Key("gen_ai.request.model")
	attrInTokens  = attribute.Key("gen_ai.usage.input_tokens")
	attrOutTokens = attribute.Key("gen_ai.usage.output_tokens")
)

// startSpan begins the request's server span, kept in rep, and returns r
// carrying it when it is recorded. An unrecorded span (most are, at a
// sample_ratio below 1) has nothing to add to and nothing below it: its
// trace is only passed on upstream (injectTrace) and named in the access
// log, from rep, so r is not copied into a new context for it. A
// traceparent is continued only from a peer in server.trusted_proxies, the
// rule that decides whose forwarding headers are believed: anyone else
// could choose the trace, and with its sampled flag make every request
// recorded. From others the trace starts here.
func (h *Handler) startSpan(r *http.Request, snap *policies.Snapshot, rep *report) *http.Request {
	ctx := r.Context()
	if snap != nil && len(snap.Identity.TrustedProxies) > 0 && peerIsTrusted(r, snap.Identity) {
		ctx = traceContext.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	ctx, rep.span = h.tracer.Start(ctx, r.Method, serverSpan)
	if !rep.span.IsRecording() {
		return r
	}
	return r.WithContext(ctx)
}

// peerIsTrusted reports whether the socket peer of r is a trusted proxy.
func peerIsTrusted(r *http.Request, id policies.Identity) bool {
	peer, ok := parseHop(r.RemoteAddr)
	return ok && isTrusted(peer, id.TrustedProxies)
}

// endSpan describes the answered request on its server span and ends it.
func (h *Handler) endSpan(r *http.Request, rep *report, route, outcome string, status int) {
	span := rep.span
	if span == nil { // never started: nothing to describe or end
		return
	}
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetName(r.Method + " " + route)
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", loggedPath(r)),
		attribute.Int("http.response.status_code", status),
		attrRoute.String(route),
		attrOutcome.String(outcome),
	}
	if rep.tenant != "" {
		attrs = append(attrs, attrTenant.String(rep.tenant))
	}
	if d, ok := rep.dec.verdict.Deciding(); ok && rep.decided {
		attrs = append(attrs, attrPolicy.String(d.Policy), attrRemaining.Int64(d.Remaining))
		if !rep.dec.verdict.Allowed {
			attrs = append(attrs, attrReason.String(d.Reason.String()), attrRetry.Int64(d.RetryAfter.Milliseconds()))
		}
	}
	if len(rep.dec.shadowed) > 0 {
		names := make([]string, len(rep.dec.shadowed))
		for i, d := range rep.dec.shadowed {
			names[i] = d.Policy
		}
		attrs = append(attrs, attrShadow.StringSlice(names))
	}
	if rep.dec.delayed > 0 {
		attrs = append(attrs, attrDelayed.Float64(msec(rep.dec.delayed)))
	}
	if c := rep.llm; c != nil {
		attrs = append(attrs, attrModel.String(c.req.Model))
		if c.charged {
			u := c.chargedUsage
			attrs = append(attrs, attrInTokens.Int64(u.input), attrOutTokens.Int64(u.output))
		}
	}
	span.SetAttributes(attrs...)
	if status >= 500 {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// noteAnswer puts on the request's span why the gateway answered it
// itself: the message its JSON body carries.
func noteAnswer(ctx context.Context, status int, msg string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrRefusal.String(msg))
	if status >= 500 {
		span.SetStatus(codes.Error, msg)
	}
}

// startUpstream begins the span of the exchange with the upstream, as the
// context st carries upstream, and returns what ends it. An unrecorded
// request gets none: its server span is what the upstream hears of.
func (h *Handler) startUpstream(st *requestState) (end func()) {
	if !trace.SpanFromContext(st.Context).IsRecording() {
		return func() {}
	}
	route := st.route()
	u := route.Upstream
	var span trace.Span
	st.Context, span = h.tracer.Start(st.Context, "upstream "+route.Name, clientSpan,
		trace.WithAttributes(attrRoute.String(route.Name), attribute.String("server.address", u.Hostname()),
			attribute.String("url.full", u.Redacted())))
	return func() {
		if st.pool != nil {
			// Which member answered, and after how many retries.
			span.SetAttributes(attribute.String("gateway.upstream.member", st.upstreamName()), attribute.Int("gateway.upstream.retries", st.retries))
		}
		if status := st.rep.upstream.status; status != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", status))
			if status >= 500 {
				span.SetStatus(codes.Error, "")
			}
		} else {
			span.SetStatus(codes.Error, "no response")
		}
		span.End()
	}
}

// injectTrace replaces whatever traceparent and tracestate the client sent
// with the request's own: the upstream continues the gateway's trace, from
// the span in ctx (the upstream exchange's, when recorded), else from
// unrecorded, the request's span that ctx does not carry (see startSpan). The
// fields are what propagation.TraceContext's Inject writes (a test holds
// them to it), set by their canonical names in one allocation, where
// Inject's builder and Header.Set's canonicalizing of "traceparent" cost
// every request about as much as the rest of an unrecorded trace.
func injectTrace(ctx context.Context, unrecorded trace.Span, h http.Header) {
	delete(h, "Traceparent")
	delete(h, "Tracestate")
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() && unrecorded != nil {
		sc = unrecorded.SpanContext()
	}
	if !sc.IsValid() {
		return
	}
	if ts := sc.TraceState().String(); ts != "" {
		h["Tracestate"] = []string{ts}
	}
	const size = len("00-") + 32 + 1 + 16 + 1 + 2
	b := make([]byte, 0, size)
	b = append(b, "00-"...)
	tid, sid := sc.TraceID(), sc.SpanID()
	b = hex.AppendEncode(b, tid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, sid[:])
	b = append(b, '-')
	// Only the flags the spec defines: sampled and random.
	b = hex.AppendEncode(b, []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
	h["Traceparent"] = []string{string(b)}
}

// traceID is the access log's attribute naming the request's trace, when
// tracing is on.
func (h *Handler) traceID(rep *report) (string, bool) {
	if h.tracer == nil || rep.span == nil {
		return "", false
	}
	sc := rep.span.SpanContext()
	return sc.TraceID().String(), sc.IsValid()
}
