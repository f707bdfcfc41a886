package proxy

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TestMoveFieldsAsCopyHeader gives the client's header what ReverseProxy's
// copyHeader alone would have given it, when moveFields runs first.
func TestMoveFieldsAsCopyHeader(t *testing.T) {
	copyHeader := func(dst, src http.Header) { // httputil's, as it is
		for k, vv := range src {
			for _, v := range vv {
				dst.Add(k, v)
			}
		}
	}
	for _, c := range []struct {
		name     string
		dst, src http.Header
	}{
		{"nginx's answer", http.Header{}, http.Header{"Server": {"nginx"}, "Content-Type": {"text/plain"}, "Content-Length": {"3"}, "Connection": {"keep-alive"}}},
		{"the gateway's fields first", http.Header{"Ratelimit": {"r"}, "Set-Cookie": {"a=1"}}, http.Header{"Set-Cookie": {"b=2", "c=3"}, "Etag": {`"x"`}}},
		{"names not canonical", http.Header{"X-Foo": {"1"}}, http.Header{"x-foo": {"2"}, "X-BAR": {"3"}, "x-Baz": {"4"}}},
		{"names not tokens", http.Header{}, http.Header{"X Foo": {"1"}, "X-Föo": {"2"}, "": {"3"}}},
		{"empty values", http.Header{"A": {"1"}}, http.Header{"A": {}, "B": nil, "C": {""}}},
		{"an event stream", http.Header{}, http.Header{"Content-Type": {"text/event-stream"}, "Cache-Control": {"no-cache"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clone := func(h http.Header) http.Header {
				out := http.Header{}
				for k, vv := range h {
					out[k] = append([]string(nil), vv...)
					if vv == nil {
						out[k] = nil
					}
				}
				return out
			}
			got, src := clone(c.dst), clone(c.src)
			moveFields(got, src, &headerValues{})
			if ct, ok := c.src["Content-Type"]; ok && !reflect.DeepEqual(src["Content-Type"], ct) {
				t.Errorf("Content-Type left for ReverseProxy: got %q, want %q", src["Content-Type"], ct)
			}
			copyHeader(got, src)
			want := clone(c.dst)
			copyHeader(want, c.src)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// TestMoveFieldsDrops: Date and the gateway's own names leave the
// upstream's header and reach neither the client's nor ReverseProxy's copy;
// a name that only resembles one of them passes.
func TestMoveFieldsDrops(t *testing.T) {
	var hv headerValues
	buf := []byte("10")
	hv.end(buf[:1], hdrXLimit)
	hv.end(buf, hdrRateLimit)
	src := http.Header{
		"Date": {"Sun, 06 Dec 2026 19:00:00 GMT"}, "X-Ratelimit-Limit": {"99"}, "Ratelimit": {"upstream's"},
		"X-Ratelimit-Limit-Requests": {"5"}, "ratelimit": {"not canonical: passes"}, "Server": {"nginx"}, "Content-Type": {"text/plain"},
	}
	dst := http.Header{}
	moveFields(dst, src, &hv)
	want := http.Header{"X-Ratelimit-Limit-Requests": {"5"}, "Server": {"nginx"}}
	if !reflect.DeepEqual(dst, want) {
		t.Errorf("moved %v, want %v", dst, want)
	}
	left := http.Header{"ratelimit": {"not canonical: passes"}, "Content-Type": {"text/plain"}}
	if !reflect.DeepEqual(src, left) {
		t.Errorf("left %v, want %v", src, left)
	}
}

// TestInjectTraceAsTraceContext sets the trace fields with injectTrace and
// with propagation.TraceContext's Inject on the same requests and compares
// them: the span context carried by the context, or by the request's
// unrecorded span that the context does not carry.
func TestInjectTraceAsTraceContext(t *testing.T) {
	tid := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	sid := trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	ts, err := trace.ParseTraceState("vendor=a,other=b-c")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sc   trace.SpanContext
	}{
		{"unsampled", trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})},
		{"sampled", trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})},
		{"sampled and random, other flags dropped", trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: 0xff})},
		{"a trace state", trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})},
		{"no span", trace.SpanContext{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := trace.ContextWithSpanContext(context.Background(), c.sc)
			client := func() http.Header {
				return http.Header{"Accept": {"*/*"}, "Traceparent": {"00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01"}, "Tracestate": {"evil=1"}}
			}
			want := client()
			delete(want, "Traceparent")
			delete(want, "Tracestate")
			propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(want))
			fromCtx, fromSpan := client(), client()
			injectTrace(ctx, nil, fromCtx)
			injectTrace(context.Background(), trace.SpanFromContext(ctx), fromSpan)
			if !reflect.DeepEqual(fromCtx, want) {
				t.Errorf("from the context: got %v, want %v", fromCtx, want)
			}
			if !reflect.DeepEqual(fromSpan, want) {
				t.Errorf("from the unrecorded span: got %v, want %v", fromSpan, want)
			}
		})
	}
}

// TestInjectTracePrefersTheContext: a recorded request's context carries the
// span of its exchange with the upstream, whose child the upstream is; the
// request's own span is passed only when the context carries none.
func TestInjectTracePrefersTheContext(t *testing.T) {
	tid := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	exchange := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{0xe}, TraceFlags: trace.FlagsSampled})
	request := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{0x5}, TraceFlags: trace.FlagsSampled})
	h := http.Header{}
	injectTrace(trace.ContextWithSpanContext(context.Background(), exchange), trace.SpanFromContext(trace.ContextWithSpanContext(context.Background(), request)), h)
	if want := "00-0102030405060708090a0b0c0d0e0f10-0e00000000000000-01"; h.Get("Traceparent") != want {
		t.Fatalf("traceparent %q, want the exchange's %q", h.Get("Traceparent"), want)
	}
}
