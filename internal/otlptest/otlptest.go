// Package otlptest is a real OTLP/HTTP trace receiver for tests: an
// in-process collector endpoint on loopback that decodes what exporters send
// (protobuf, gzip or not) and keeps the spans.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, its ids in lowercase hex.
type Span struct {
	Name         string
	TraceID      string
	SpanID       string
	ParentSpanID string // "" for a root
	Kind         tracepb.Span_SpanKind
	Attrs        map[string]any // string, int64, float64, bool or []any
	Links        []Link
	StatusCode   tracepb.Status_StatusCode
	StatusMsg    string
	Resource     map[string]any
}

// Link is a span link.
type Link struct{ TraceID, SpanID string }

// Receiver is an OTLP/HTTP endpoint. It is safe for concurrent use.
type Receiver struct {
	// URL is the endpoint's base URL (http://127.0.0.1:port); exporters
	// post to URL + "/v1/traces".
	URL string

	mu       sync.Mutex
	spans    []Span
	requests int
	errs     []string
}

// NewReceiver starts a receiver that stops when the test ends.
func NewReceiver(t testing.TB) *Receiver {
	t.Helper()
	rc := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(srv.Close)
	rc.URL = srv.URL
	t.Cleanup(func() {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		for _, e := range rc.errs {
			t.Errorf("otlp receiver: %s", e)
		}
	})
	return rc
}

func (rc *Receiver) fail(w http.ResponseWriter, status int, msg string) {
	rc.mu.Lock()
	rc.errs = append(rc.errs, msg)
	rc.mu.Unlock()
	http.Error(w, msg, status)
}

func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		rc.fail(w, http.StatusNotFound, "unexpected "+r.Method+" "+r.URL.Path)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		rc.fail(w, http.StatusUnsupportedMediaType, "content type "+ct)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			rc.fail(w, http.StatusBadRequest, "gzip: "+err.Error())
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		rc.fail(w, http.StatusBadRequest, "reading: "+err.Error())
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		rc.fail(w, http.StatusBadRequest, "decoding: "+err.Error())
		return
	}
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Name:         s.GetName(),
					TraceID:      hex.EncodeToString(s.GetTraceId()),
					SpanID:       hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()),
					Kind:         s.GetKind(),
					Attrs:        attrMap(s.GetAttributes()),
					StatusCode:   s.GetStatus().GetCode(),
					StatusMsg:    s.GetStatus().GetMessage(),
					Resource:     res,
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
				}
				got = append(got, sp)
			}
		}
	}
	rc.mu.Lock()
	rc.spans = append(rc.spans, got...)
	rc.requests++
	rc.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// Spans returns every span received so far.
func (rc *Receiver) Spans() []Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]Span(nil), rc.spans...)
}

// Requests is how many export requests arrived.
func (rc *Receiver) Requests() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.requests
}

// Reset forgets the spans received so far.
func (rc *Receiver) Reset() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.spans = nil
}

func attrMap(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_ArrayValue:
		var out []any
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, value(e))
		}
		return out
	}
	return nil
}
