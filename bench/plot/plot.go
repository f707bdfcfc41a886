// Package plot writes the benchmarks' charts as self-contained SVG: line
// charts of named series over a shared x axis, and horizontal bar charts
// of named series over labelled rows. Several charts written together sit
// side by side in one document. It has no dependency beyond the standard
// library and draws nothing it is not given: no smoothing, no fitted line.
//
//	plot.SaveSVG("results.svg",
//		plot.Bars{Title: "throughput", XLabel: "requests/s", Labels: names,
//			Series: []plot.BarSeries{{Name: "rps", Values: rps}}},
//		plot.Line{Title: "latency", XLabel: "rate", YLabel: "ms",
//			Series: []plot.Series{{Name: "gateway", X: rates, Y: p99}}})
package plot

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// Series is one named line of a Line chart: the point (X[i], Y[i]) for
// each i. A point whose X or Y is NaN or infinite is left out and breaks
// the line there.
type Series struct {
	Name string
	X, Y []float64
}

// Line is a line chart: every series drawn over one x and one y axis, with
// a marker at each point and a legend of the series' names.
type Line struct {
	Title, XLabel, YLabel string
	Series                []Series
	// LogX puts x on a base-10 logarithmic scale (points with x <= 0 are
	// left out).
	LogX bool
}

// BarSeries is one named set of bars: Values[i] is its bar in row i.
type BarSeries struct {
	Name   string
	Values []float64
}

// Bars is a horizontal bar chart: one row per label, one bar per series in
// each row, the value written at the end of its bar. Bars start at zero; a
// NaN or infinite value draws no bar.
type Bars struct {
	Title, XLabel string
	Labels        []string
	Series        []BarSeries
}

// Chart is a Line or a Bars.
type Chart interface {
	check() error
	size() (w, h float64)
	draw(b *canvas, x0, y0 float64)
}

// SaveSVG writes the charts side by side to a new or truncated file at path.
func SaveSVG(path string, charts ...Chart) error {
	var buf bytes.Buffer
	if err := WriteSVG(&buf, charts...); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// WriteSVG writes the charts side by side, top-aligned, as one SVG
// document.
func WriteSVG(w io.Writer, charts ...Chart) error {
	if len(charts) == 0 {
		return fmt.Errorf("no chart to write")
	}
	var width, height float64
	for _, c := range charts {
		if err := c.check(); err != nil {
			return err
		}
		cw, ch := c.size()
		width += cw
		height = math.Max(height, ch)
	}
	b := &canvas{}
	fmt.Fprintf(&b.buf, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif" font-size="12">`+"\n",
		num(width), num(height), num(width), num(height))
	b.rect(0, 0, width, height, "#ffffff", "")
	x := 0.0
	for _, c := range charts {
		cw, _ := c.size()
		c.draw(b, x, 0)
		x += cw
	}
	b.buf.WriteString("</svg>\n")
	_, err := w.Write(b.buf.Bytes())
	return err
}

// Layout, in SVG user units (pixels).
const (
	lineWidth, lineHeight = 560.0, 400.0
	marginLeft            = 70.0
	marginRight           = 20.0
	marginTop             = 40.0
	marginBottom          = 50.0
	legendRow             = 16.0
	barRow                = 9.0 // height of one bar
	barGap                = 8.0 // between rows
	barLabelWidth         = 190.0
	barWidth              = 560.0
)

// palette is the series' colours, in order (repeated past ten series).
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

func colour(i int) string { return palette[i%len(palette)] }

func (l Line) check() error {
	for _, s := range l.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("line %q: series %q has %d x and %d y", l.Title, s.Name, len(s.X), len(s.Y))
		}
	}
	return nil
}

func (l Line) size() (float64, float64) {
	return lineWidth, lineHeight + legendRow*float64(len(l.Series))
}

// usable reports whether (x, y) can be drawn on l's scales.
func (l Line) usable(x, y float64) bool {
	return finite(x) && finite(y) && (!l.LogX || x > 0)
}

func (l Line) draw(b *canvas, x0, y0 float64) {
	pw, ph := lineWidth-marginLeft-marginRight, lineHeight-marginTop-marginBottom
	px, py := x0+marginLeft, y0+marginTop
	b.text(x0+lineWidth/2, y0+22, l.Title, "middle", "bold", 14)

	xs, ys := []float64{}, []float64{0}
	for _, s := range l.Series {
		for i := range s.X {
			if l.usable(s.X[i], s.Y[i]) {
				xs = append(xs, s.X[i])
				ys = append(ys, s.Y[i])
			}
		}
	}
	var xa axis
	if l.LogX {
		xa = logAxis(xs)
	} else {
		xa = linearAxis(xs)
	}
	ya := linearAxis(ys)
	sx := func(v float64) float64 { return px + pw*xa.frac(v) }
	sy := func(v float64) float64 { return py + ph*(1-ya.frac(v)) }

	b.rect(px, py, pw, ph, "none", "#cccccc")
	for _, t := range ya.ticks {
		y := sy(t)
		b.line(px, y, px+pw, y, "#eeeeee")
		b.text(px-6, y+4, ya.label(t), "end", "", 11)
	}
	for _, t := range xa.ticks {
		x := sx(t)
		b.line(x, py, x, py+ph, "#eeeeee")
		b.text(x, py+ph+16, xa.label(t), "middle", "", 11)
	}
	b.text(px+pw/2, py+ph+36, l.XLabel, "middle", "", 12)
	fmt.Fprintf(&b.buf, `<text x="%s" y="%s" text-anchor="middle" transform="rotate(-90 %s %s)">%s</text>`+"\n",
		num(x0+16), num(py+ph/2), num(x0+16), num(py+ph/2), escape(l.YLabel))
	if len(xs) == 0 {
		b.text(px+pw/2, py+ph/2, "no data", "middle", "", 12)
	}

	for i, s := range l.Series {
		c := colour(i)
		var seg []string
		flush := func() {
			if len(seg) > 1 {
				fmt.Fprintf(&b.buf, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(seg, " "))
			}
			seg = seg[:0]
		}
		for j := range s.X {
			if !l.usable(s.X[j], s.Y[j]) {
				flush()
				continue
			}
			x, y := sx(s.X[j]), sy(s.Y[j])
			seg = append(seg, num(x)+","+num(y))
			fmt.Fprintf(&b.buf, `<circle cx="%s" cy="%s" r="3" fill="%s"><title>%s: %s, %s</title></circle>`+"\n",
				num(x), num(y), c, escape(s.Name), escape(xa.label(s.X[j])), escape(fmtValue(s.Y[j])))
		}
		flush()
		ly := y0 + lineHeight + legendRow*float64(i) + 4
		b.rect(px, ly-1.5, 24, 3, c, "")
		b.text(px+30, ly+4, s.Name, "start", "", 12)
	}
}

func (c Bars) check() error {
	for _, s := range c.Series {
		if len(s.Values) != len(c.Labels) {
			return fmt.Errorf("bars %q: series %q has %d values for %d labels", c.Title, s.Name, len(s.Values), len(c.Labels))
		}
	}
	return nil
}

// rowHeight is one label's row: a bar per series and a gap.
func (c Bars) rowHeight() float64 { return barRow*float64(max(1, len(c.Series))) + barGap }

func (c Bars) size() (float64, float64) {
	return barLabelWidth + barWidth, marginTop + c.rowHeight()*float64(len(c.Labels)) + marginBottom + legendRow*float64(len(c.Series))
}

func (c Bars) draw(b *canvas, x0, y0 float64) {
	w, _ := c.size()
	pw := barWidth - marginRight - 60 // room for the value past the longest bar
	px, py := x0+barLabelWidth, y0+marginTop
	ph := c.rowHeight() * float64(len(c.Labels))
	b.text(x0+w/2, y0+22, c.Title, "middle", "bold", 14)

	vals := []float64{0}
	for _, s := range c.Series {
		for _, v := range s.Values {
			if finite(v) {
				vals = append(vals, v)
			}
		}
	}
	xa := linearAxis(vals)
	sx := func(v float64) float64 { return px + pw*xa.frac(v) }
	for _, t := range xa.ticks {
		x := sx(t)
		b.line(x, py, x, py+ph, "#eeeeee")
		b.text(x, py+ph+16, xa.label(t), "middle", "", 11)
	}
	b.line(sx(0), py, sx(0), py+ph, "#999999")
	b.text(px+pw/2, py+ph+36, c.XLabel, "middle", "", 12)

	for r, label := range c.Labels {
		ry := py + c.rowHeight()*float64(r)
		b.text(px-8, ry+c.rowHeight()/2+2, label, "end", "", 12)
		for i, s := range c.Series {
			v := s.Values[r]
			if !finite(v) {
				continue
			}
			y := ry + barRow*float64(i)
			left, right := math.Min(sx(0), sx(v)), math.Max(sx(0), sx(v))
			fmt.Fprintf(&b.buf, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
				num(left), num(y), num(right-left), num(barRow-1), colour(i), escape(label), escape(s.Name), escape(fmtValue(v)))
			b.text(right+4, y+barRow-1, fmtValue(v), "start", "", 9)
		}
	}
	for i, s := range c.Series {
		ly := py + ph + marginBottom + legendRow*float64(i) - 6
		b.rect(px, ly-5, 24, 9, colour(i), "")
		b.text(px+30, ly+4, s.Name, "start", "", 12)
	}
}

// axis maps values in [lo, hi] to [0, 1] and names its ticks.
type axis struct {
	lo, hi float64
	log    bool
	ticks  []float64
}

func (a axis) frac(v float64) float64 {
	if a.log {
		return (math.Log10(v) - math.Log10(a.lo)) / (math.Log10(a.hi) - math.Log10(a.lo))
	}
	return (v - a.lo) / (a.hi - a.lo)
}

func (a axis) label(v float64) string { return fmtValue(v) }

// linearAxis spans vs with about five ticks at 1, 2 or 5 times a power of
// ten.
func linearAxis(vs []float64) axis {
	lo, hi := span(vs, 0, 1)
	if hi == lo {
		hi = lo + math.Max(1, math.Abs(lo))
	}
	raw := (hi - lo) / 5
	step := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*step >= raw {
			step *= m
			break
		}
	}
	a := axis{lo: math.Floor(lo/step) * step, hi: math.Ceil(hi/step) * step}
	for t := a.lo; t <= a.hi+step/2; t += step {
		a.ticks = append(a.ticks, math.Round(t/step)*step)
	}
	return a
}

// logAxis spans vs (all > 0) from decade to decade, a tick at each.
func logAxis(vs []float64) axis {
	lo, hi := span(vs, 1, 10)
	a := axis{log: true, lo: math.Pow(10, math.Floor(math.Log10(lo))), hi: math.Pow(10, math.Ceil(math.Log10(hi)))}
	if a.hi == a.lo {
		a.hi *= 10
	}
	for t := a.lo; t <= a.hi*1.01; t *= 10 {
		a.ticks = append(a.ticks, t)
	}
	return a
}

// span is the smallest and the largest of vs, or lo and hi for none.
func span(vs []float64, lo, hi float64) (float64, float64) {
	if len(vs) == 0 {
		return lo, hi
	}
	lo, hi = vs[0], vs[0]
	for _, v := range vs {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	return lo, hi
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// fmtValue writes a value short: 1.2M, 35k, 0.85, 12.
func fmtValue(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return trim(fmt.Sprintf("%.2f", v/1e6)) + "M"
	case a >= 1e4:
		return trim(fmt.Sprintf("%.1f", v/1e3)) + "k"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 1 || a == 0:
		return trim(fmt.Sprintf("%.2f", v))
	default:
		return trim(fmt.Sprintf("%.3g", v))
	}
}

func trim(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// canvas collects the SVG elements.
type canvas struct{ buf bytes.Buffer }

func (b *canvas) rect(x, y, w, h float64, fill, stroke string) {
	if stroke == "" {
		stroke = "none"
	}
	fmt.Fprintf(&b.buf, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s" stroke="%s"/>`+"\n", num(x), num(y), num(w), num(h), fill, stroke)
}

func (b *canvas) line(x1, y1, x2, y2 float64, stroke string) {
	fmt.Fprintf(&b.buf, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1"/>`+"\n", num(x1), num(y1), num(x2), num(y2), stroke)
}

func (b *canvas) text(x, y float64, s, anchor, weight string, size float64) {
	if s == "" {
		return
	}
	attrs := ""
	if weight != "" {
		attrs = ` font-weight="` + weight + `"`
	}
	fmt.Fprintf(&b.buf, `<text x="%s" y="%s" text-anchor="%s" font-size="%s"%s>%s</text>`+"\n", num(x), num(y), anchor, num(size), attrs, escape(s))
}

// num writes a coordinate with at most one decimal.
func num(v float64) string { return trim(fmt.Sprintf("%.1f", v)) }

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")

func escape(s string) string { return escaper.Replace(s) }
