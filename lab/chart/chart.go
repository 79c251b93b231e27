// Package chart writes the lab's SVG charts: panels of lines and points over
// numeric axes, with titles, ticks and legends. It is the project's one chart
// writer: simulate's timeline, the scoreboard's frontier and the e2e demo's
// timeline (test/e2e/cmd/demo) all draw with it. The output depends only on
// the calls made (no clock, no randomness), so a chart can be compared byte
// for byte.
package chart

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Palette is the colour of the n-th series (cycling).
var Palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// Color returns the n-th colour of the palette.
func Color(n int) string { return Palette[n%len(Palette)] }

// Canvas is one SVG document being written. Errors are sticky: Close returns
// the first.
type Canvas struct {
	b             *bufio.Writer
	width, height float64
}

// New starts an SVG of width × height pixels on w with a bold title at the top.
func New(w io.Writer, width, height float64, title string) *Canvas {
	c := &Canvas{b: bufio.NewWriter(w), width: width, height: height}
	fmt.Fprintf(c.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(c.b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(c.b, `<text x="60" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", Escape(title))
	return c
}

// Text writes text at (x, y); anchor is start, middle or end.
func (c *Canvas) Text(x, y float64, anchor, text string) {
	fmt.Fprintf(c.b, `<text x="%.1f" y="%.1f" text-anchor="%s">%s</text>`+"\n", x, y, anchor, Escape(text))
}

// ColorText writes text in color at (x, y); anchor is start, middle or end.
func (c *Canvas) ColorText(x, y float64, anchor, text, color string) {
	fmt.Fprintf(c.b, `<text x="%.1f" y="%.1f" text-anchor="%s" fill="%s">%s</text>`+"\n", x, y, anchor, color, Escape(text))
}

// Rect fills the rectangle at (x, y) of w × h pixels with fill (a shaded
// span behind the panels drawn after it, say).
func (c *Canvas) Rect(x, y, w, h float64, fill string) {
	fmt.Fprintf(c.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y, w, h, fill)
}

// Group starts an SVG group of class class (and data-name name, when not
// empty) around what is drawn until EndGroup: a handle for stylesheets and for
// tests that look for a chart's parts.
func (c *Canvas) Group(class, name string) {
	fmt.Fprintf(c.b, `<g class="%s"`, Escape(class))
	if name != "" {
		fmt.Fprintf(c.b, ` data-name="%s"`, Escape(name))
	}
	_, _ = c.b.WriteString(">\n")
}

// EndGroup ends the group Group started.
func (c *Canvas) EndGroup() { _, _ = c.b.WriteString("</g>\n") }

// Close ends the document and flushes it, returning the first write error.
func (c *Canvas) Close() error {
	_, _ = c.b.WriteString("</svg>\n")
	return c.b.Flush()
}

// Axis is a linear axis over [Min, Max].
type Axis struct {
	Min, Max float64
	// Label names the axis; Ticks is the number of tick intervals (4 when 0).
	Label string
	Ticks int
	// Format renders a tick value (Trim when nil).
	Format func(float64) string
	// Color colours a right axis's labels.
	Color string
}

func (a Axis) ticks() int {
	if a.Ticks > 0 {
		return a.Ticks
	}
	return 4
}

func (a Axis) format(v float64) string {
	if a.Format != nil {
		return a.Format(v)
	}
	return Trim(v)
}

// Panel is a framed plot area of the canvas with an x axis, a left y axis and
// an optional right y axis.
type Panel struct {
	c          *Canvas
	x0, y0     float64
	w, h       float64
	X, Y, YR   Axis
	hasRight   bool
	legendNext int
}

// Panel frames a plot area at (x0, y0) of w × h pixels titled title, with
// grid lines and tick labels of the y axis (and of right, when not nil).
func (c *Canvas) Panel(x0, y0, w, h float64, title string, x, y Axis, right *Axis) *Panel {
	p := &Panel{c: c, x0: x0, y0: y0, w: w, h: h, X: x, Y: y}
	if right != nil {
		p.YR, p.hasRight = *right, true
	}
	b := c.b
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", x0, y0-7, Escape(title))
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0, y0, w, h)
	n := y.ticks()
	for k := 0; k <= n; k++ {
		yy := y0 + h - h*float64(k)/float64(n)
		fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/>`, x0, x0+w, yy, yy)
		fmt.Fprintf(b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`, x0-4, yy+4, Escape(y.format(y.Min+(y.Max-y.Min)*float64(k)/float64(n))))
		if right != nil {
			fmt.Fprintf(b, `<text x="%.0f" y="%.1f" fill="%s">%s</text>`, x0+w+4, yy+4, right.Color, Escape(right.format(right.Min+(right.Max-right.Min)*float64(k)/float64(n))))
		}
		_, _ = b.WriteString("\n")
	}
	if y.Label != "" {
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle" transform="rotate(-90 %.0f %.0f)">%s</text>`+"\n", x0-42, y0+h/2, x0-42, y0+h/2, Escape(y.Label))
	}
	return p
}

// XTicks writes the x axis's tick labels under the panel, and its label.
func (p *Panel) XTicks() {
	n := p.X.ticks()
	for k := 0; k <= n; k++ {
		v := p.X.Min + (p.X.Max-p.X.Min)*float64(k)/float64(n)
		xx := p.x(v)
		fmt.Fprintf(p.c.b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#eee"/>`, xx, xx, p.y0, p.y0+p.h)
		fmt.Fprintf(p.c.b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", xx, p.y0+p.h+14, Escape(p.X.format(v)))
	}
	if p.X.Label != "" {
		fmt.Fprintf(p.c.b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", p.x0+p.w/2, p.y0+p.h+30, Escape(p.X.Label))
	}
}

func (p *Panel) x(v float64) float64 { return p.x0 + p.w*p.X.Frac(v) }

func (p *Panel) y(v float64, a Axis) float64 { return p.y0 + p.h - p.h*a.Frac(v) }

// Frac returns where v falls on the axis, from 0 at Min to 1 at Max, clamped
// to [0, 1] (0 when Min = Max): a panel of width w at x0 draws v at
// x0 + w × Frac(v).
func (a Axis) Frac(v float64) float64 {
	if a.Max == a.Min {
		return 0
	}
	return math.Max(0, math.Min(1, (v-a.Min)/(a.Max-a.Min)))
}

// Style says how a series is drawn.
type Style struct {
	Color  string
	Dashed bool
	// Step draws a staircase (the value holds until the next sample).
	Step bool
	// Right plots against the right y axis.
	Right bool
	// Markers draws a dot at every point; Width is the line's width (1.5
	// when 0; a negative width draws no line).
	Markers bool
	Width   float64
}

// Line draws the series (xs[i], ys[i]).
func (p *Panel) Line(xs, ys []float64, s Style) {
	axis := p.Y
	if s.Right {
		axis = p.YR
	}
	width := s.Width
	if width == 0 {
		width = 1.5
	}
	if width > 0 && len(xs) > 1 {
		var sb strings.Builder
		for i := range xs {
			if s.Step && i > 0 {
				fmt.Fprintf(&sb, "%.1f,%.1f ", p.x(xs[i]), p.y(ys[i-1], axis))
			}
			fmt.Fprintf(&sb, "%.1f,%.1f ", p.x(xs[i]), p.y(ys[i], axis))
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(p.c.b, `<polyline fill="none" stroke="%s" stroke-width="%g"%s points="%s"/>`+"\n", s.Color, width, dash, strings.TrimSpace(sb.String()))
	}
	if s.Markers {
		for i := range xs {
			fmt.Fprintf(p.c.b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, p.x(xs[i]), p.y(ys[i], axis), s.Color)
		}
		_, _ = p.c.b.WriteString("\n")
	}
}

// Range draws a thin bar from (x, lo) to (x, hi) and from (xlo, y) to (xhi, y):
// the spread of a point.
func (p *Panel) Range(x, y, xlo, xhi, ylo, yhi float64, color string) {
	fmt.Fprintf(p.c.b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-opacity="0.5"/>`, p.x(x), p.x(x), p.y(ylo, p.Y), p.y(yhi, p.Y), color)
	fmt.Fprintf(p.c.b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-opacity="0.5"/>`+"\n", p.x(xlo), p.x(xhi), p.y(y, p.Y), p.y(y, p.Y), color)
}

// Label writes text beside the point (x, y).
func (p *Panel) Label(x, y float64, text, color string) {
	fmt.Fprintf(p.c.b, `<text x="%.1f" y="%.1f" fill="%s" font-size="9">%s</text>`+"\n", p.x(x)+4, p.y(y, p.Y)-4, color, Escape(text))
}

// HLine draws a dashed horizontal reference line at y with a label.
func (p *Panel) HLine(y float64, label, color string) {
	yy := p.y(y, p.Y)
	fmt.Fprintf(p.c.b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="3 3"/>`, p.x0, p.x0+p.w, yy, yy, color)
	fmt.Fprintf(p.c.b, `<text x="%.0f" y="%.1f" fill="%s" text-anchor="end" font-size="9">%s</text>`+"\n", p.x0+p.w-2, yy-3, color, Escape(label))
}

// VLine draws a dashed vertical reference line at x with a label.
func (p *Panel) VLine(x float64, label, color string) {
	xx := p.x(x)
	fmt.Fprintf(p.c.b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="%s" stroke-dasharray="3 3"/>`, xx, xx, p.y0, p.y0+p.h, color)
	fmt.Fprintf(p.c.b, `<text x="%.1f" y="%.0f" fill="%s" font-size="9">%s</text>`+"\n", xx+3, p.y0+10, color, Escape(label))
}

// Legend adds one legend entry above the panel's top right, left to right.
func (p *Panel) Legend(name, color string) {
	xx := p.x0 + p.w - 360 + float64(p.legendNext)*120
	p.legendNext++
	fmt.Fprintf(p.c.b, `<rect x="%.0f" y="%.0f" width="12" height="3" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n", xx, p.y0-11, color, xx+16, p.y0-7, Escape(name))
}

// LegendAt adds a legend entry at (x, y) of the canvas.
func (c *Canvas) LegendAt(x, y float64, name, color string) {
	fmt.Fprintf(c.b, `<rect x="%.0f" y="%.0f" width="12" height="4" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n", x, y-4, color, x+16, y, Escape(name))
}

// NiceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten (1 for v <= 0).
func NiceCeil(v float64) float64 {
	if !(v > 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// Trim renders v with at most two decimals.
func Trim(v float64) string { return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) }

// Escape escapes text for SVG.
func Escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
