package plot

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// elements parses doc as XML and counts its elements by name; it fails the
// test if doc is not well-formed or its root is not an svg element.
func elements(t *testing.T, doc []byte) (map[string]int, []string) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	counts := map[string]int{}
	var texts []string
	var root string
	depth := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				root = tok.Name.Local
				if tok.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root namespace %q", tok.Name.Space)
				}
			}
			depth++
			counts[tok.Name.Local]++
		case xml.EndElement:
			depth--
		case xml.CharData:
			if s := strings.TrimSpace(string(tok)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	if root != "svg" || depth != 0 {
		t.Fatalf("root %q, depth at end %d", root, depth)
	}
	return counts, texts
}

func TestLineAndBarsSideBySide(t *testing.T) {
	line := Line{
		Title: "p99 added <open loop>", XLabel: "rate (requests/s)", YLabel: "ms",
		Series: []Series{
			{Name: "gateway-local", X: []float64{900, 1800, 2700}, Y: []float64{0.2, 0.3, 0.9}},
			// The NaN breaks the line in two single points: no polyline.
			{Name: `nginx "limit_req" & co`, X: []float64{900, 1800, 2700}, Y: []float64{0.1, math.NaN(), 0.4}},
		},
	}
	bars := Bars{
		Title: "throughput", XLabel: "requests/s",
		Labels: []string{"upstream", "gateway-local", "caddy"},
		Series: []BarSeries{{Name: "rps", Values: []float64{190000, 22000, math.Inf(1)}}},
	}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, line, bars); err != nil {
		t.Fatal(err)
	}
	counts, texts := elements(t, buf.Bytes())
	if counts["polyline"] != 1 {
		t.Errorf("%d polylines, want 1 (the second series is broken by its NaN)", counts["polyline"])
	}
	if counts["circle"] != 5 {
		t.Errorf("%d markers, want 5 (six points, one NaN)", counts["circle"])
	}
	// The background, the plot frame of the line chart, its two legend
	// swatches, two bars (the infinite value draws none) and the bar
	// legend's swatch.
	if counts["rect"] != 7 {
		t.Errorf("%d rects, want 7", counts["rect"])
	}
	joined := strings.Join(texts, "\n")
	for _, want := range []string{"p99 added <open loop>", `nginx "limit_req" & co`, "gateway-local", "190k", "22k", "throughput"} {
		if !strings.Contains(joined, want) {
			t.Errorf("text %q missing from the chart", want)
		}
	}
	w, h := line.size()
	bw, bh := bars.size()
	if !strings.Contains(buf.String(), `width="`+num(w+bw)+`"`) || !strings.Contains(buf.String(), `height="`+num(math.Max(h, bh))+`"`) {
		t.Errorf("document size is not the charts side by side:\n%.200s", buf.String())
	}
}

func TestLogXLeavesOutNonPositive(t *testing.T) {
	l := Line{Title: "keys", LogX: true, Series: []Series{{Name: "rps", X: []float64{0, 1, 1000, 1e6}, Y: []float64{1, 1, 0.9, 0.5}}}}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, l); err != nil {
		t.Fatal(err)
	}
	counts, texts := elements(t, buf.Bytes())
	if counts["circle"] != 3 {
		t.Errorf("%d markers, want 3 (x=0 has no place on a log scale)", counts["circle"])
	}
	joined := strings.Join(texts, " ")
	for _, tick := range []string{"1", "1000", "1M"} {
		if !strings.Contains(" "+joined+" ", " "+tick+" ") {
			t.Errorf("decade tick %q missing: %s", tick, joined)
		}
	}
}

func TestEmptyChartsAreStillDocuments(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSVG(&buf, Line{Title: "nothing"}, Bars{Title: "none"}); err != nil {
		t.Fatal(err)
	}
	_, texts := elements(t, buf.Bytes())
	if !strings.Contains(strings.Join(texts, " "), "no data") {
		t.Error("an empty line chart does not say so")
	}
}

func TestMismatchedSeriesAreRefused(t *testing.T) {
	for _, c := range []Chart{
		Line{Title: "l", Series: []Series{{Name: "s", X: []float64{1, 2}, Y: []float64{1}}}},
		Bars{Title: "b", Labels: []string{"a", "b"}, Series: []BarSeries{{Name: "s", Values: []float64{1}}}},
	} {
		var buf bytes.Buffer
		if err := WriteSVG(&buf, c); err == nil {
			t.Errorf("%T with mismatched lengths written without an error", c)
		}
		if buf.Len() != 0 {
			t.Errorf("%T: %d bytes written before the error", c, buf.Len())
		}
	}
	if err := WriteSVG(io.Discard); err == nil {
		t.Error("no chart: no error")
	}
}

func TestSaveSVG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.svg")
	if err := SaveSVG(path, Bars{Title: "t", Labels: []string{"x"}, Series: []BarSeries{{Name: "v", Values: []float64{-2}}}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	elements(t, b)
	if err := SaveSVG(filepath.Join(t.TempDir(), "no", "such", "dir.svg"), Line{}); err == nil {
		t.Error("writing into a missing directory: no error")
	}
}

func TestLinearAxisTicks(t *testing.T) {
	a := linearAxis([]float64{0, 23.4})
	if a.lo != 0 || a.hi != 25 || len(a.ticks) != 6 || a.ticks[1] != 5 {
		t.Errorf("axis over 0–23.4: lo %v hi %v ticks %v, want 0–25 by 5", a.lo, a.hi, a.ticks)
	}
	a = linearAxis([]float64{-0.3, 0.7})
	if a.lo > -0.3 || a.hi < 0.7 || a.frac(a.lo) != 0 || a.frac(a.hi) != 1 {
		t.Errorf("axis over -0.3–0.7: %+v", a)
	}
	a = linearAxis([]float64{4, 4})
	if !(a.hi > a.lo) {
		t.Errorf("a single value gives an empty axis: %+v", a)
	}
}
