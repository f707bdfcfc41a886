package metrics

import (
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// exposition is one scrape, parsed: metric families by name.
type exposition map[string]*dto.MetricFamily

// scrape serves m.Handler() on a real HTTP server, GETs /metrics in the
// text format and parses it.
func scrape(t testing.TB, m *Metrics) exposition {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/metrics", nil)
	if err != nil {
		t.Fatalf("building the scrape: %v", err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("scraping: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: got status %d, want 200", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("scrape: got Content-Type %q, want text/plain", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing the exposition: %v", err)
	}
	return fams
}

// labels is a label set as a test writes it: "route=api,outcome=allowed".
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	if s == "" {
		return out
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

// find returns the series of name whose labels are exactly labels.
func (e exposition) find(t testing.TB, name, labels string) (*dto.Metric, bool) {
	t.Helper()
	f, ok := e[name]
	if !ok {
		return nil, false
	}
	want := parseLabels(labels)
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if len(got) != len(want) {
			continue
		}
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
				break
			}
		}
		if match {
			return m, true
		}
	}
	return nil, false
}

// value returns the value of a counter, gauge or untyped series; it fails
// the test when the series is missing.
func (e exposition) value(t testing.TB, name, labels string) float64 {
	t.Helper()
	m, ok := e.find(t, name, labels)
	if !ok {
		t.Fatalf("no series %s{%s}; have:\n%s", name, labels, e.series(name))
	}
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	t.Fatalf("%s{%s} is not a counter or gauge", name, labels)
	return 0
}

// histogram returns a histogram series; it fails the test when missing.
func (e exposition) histogram(t testing.TB, name, labels string) *dto.Histogram {
	t.Helper()
	m, ok := e.find(t, name, labels)
	if !ok || m.Histogram == nil {
		t.Fatalf("no histogram %s{%s}; have:\n%s", name, labels, e.series(name))
	}
	return m.GetHistogram()
}

// bucket returns the cumulative count of h at upper bound le.
func bucket(t testing.TB, h *dto.Histogram, le float64) uint64 {
	t.Helper()
	for _, b := range h.GetBucket() {
		if math.Abs(b.GetUpperBound()-le) < 1e-12 {
			return b.GetCumulativeCount()
		}
	}
	t.Fatalf("no bucket le=%g", le)
	return 0
}

// wantValues checks the values of series without labels.
func (e exposition) wantValues(t testing.TB, want map[string]float64) {
	t.Helper()
	for name, v := range want {
		if got := e.value(t, name, ""); got != v {
			t.Errorf("%s: got %v, want %v", name, got, v)
		}
	}
}

// series lists name's label sets, for failure messages.
func (e exposition) series(name string) string {
	f, ok := e[name]
	if !ok {
		return "  (no such metric)"
	}
	var lines []string
	for _, m := range f.GetMetric() {
		var ls []string
		for _, lp := range m.GetLabel() {
			ls = append(ls, lp.GetName()+"="+lp.GetValue())
		}
		lines = append(lines, "  {"+strings.Join(ls, ",")+"}")
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func near(got, want float64) bool { return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want)) }
