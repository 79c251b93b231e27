package main

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"
)

// chartSpec says what the timeline chart shows beyond the fixed panels.
type chartSpec struct {
	title string
	// metric is the HPA's metric, drawn with a dashed line at target when target > 0.
	metric string
	target float64
	// clip caps the metric's axis at clipAt (times the target) so that the region
	// around the target stays readable; the peak is written beside the panel.
	clip bool
	// phases are shaded and named across every panel.
	phases []phase
}

// clipAt is where a clipped metric axis ends, in multiples of the target.
const clipAt = 3.0

// phase is a named span of the replay, offsets from its start.
type phase struct {
	name     string
	from, to time.Duration
	shade    bool
}

type series struct {
	name, color string
	v           func(point) float64
	step        bool
}

type panel struct {
	title  string
	series []series
	ref    float64 // a dashed reference line, NaN for none
	refTxt string
	ymax   float64 // fixed axis top, 0 for automatic
	clip   bool
}

// panels are the chart's panels, top to bottom.
func panels(spec chartSpec) []panel {
	metricPanel := panel{title: spec.metric, ref: math.NaN(), clip: spec.clip}
	if spec.target > 0 {
		metricPanel.title = fmt.Sprintf("%s (the HPA's metric; dashed: target %g)", spec.metric, spec.target)
		metricPanel.ref, metricPanel.refTxt = spec.target, "target"
		if spec.clip {
			metricPanel.ymax = clipAt * spec.target
		}
	}
	metricPanel.series = []series{{spec.metric, "#2ca02c", func(p point) float64 {
		if spec.metric == "llm_saturation" {
			return p.Saturation
		}
		return p.Demand
	}, false}}
	return []panel{
		{title: "offered load (requests/s, Azure conversation trace)", ref: math.NaN(), series: []series{
			{"req/s", "#7f7f7f", func(p point) float64 { return p.OfferedRPS }, false},
		}},
		{title: "replicas", ref: math.NaN(), series: []series{
			{"desired (HPA)", "#d62728", func(p point) float64 {
				if p.Desired == 0 && p.Spec > 0 { // the HPA has not synced yet
					return math.NaN()
				}
				return float64(p.Desired)
			}, true},
			{"ready", "#1f77b4", func(p point) float64 { return float64(p.Ready) }, true},
		}},
		metricPanel,
		{title: "KV-cache usage (mean of the pods, %; dashed: set point 80 %)", ref: 80, refTxt: "set point", ymax: 100, series: []series{
			{"KV-cache usage", "#ff7f0e", func(p point) float64 { return 100 * p.KV }, false},
		}},
		{title: "queue depth (requests waiting)", ref: math.NaN(), series: []series{
			{"engines (sum)", "#9467bd", func(p point) float64 { return p.Queue }, false},
			{"gateway", "#8c564b", func(p point) float64 { return p.GatewayQueue }, false},
		}},
		{title: "TTFT p95 (s, first tokens in the last 30 s)", ref: math.NaN(), series: []series{
			{"TTFT p95", "#17becf", func(p point) float64 { return p.TTFTp95 }, false},
		}},
	}
}

// writeChart writes an SVG timeline of points: offered load, replicas (desired and
// ready), the HPA's metric against its target, KV-cache usage, queue depth and TTFT p95,
// one panel each, sharing the time axis, with the replay's phases shaded.
func writeChart(path string, spec chartSpec, start time.Time, points []point) error {
	svg, err := renderChart(spec, start, points)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(svg), 0o644)
}

// chart geometry, in SVG pixels.
const chartW, chartLeft, chartRight, panelH, panelGap, chartTop = 900.0, 70.0, 20.0, 120.0, 45.0, 95.0

// canvas maps the timeline's seconds to x.
type canvas struct {
	b     strings.Builder
	start time.Time
	tmax  float64
}

func (c *canvas) xs(sec float64) float64 {
	return chartLeft + (chartW-chartLeft-chartRight)*math.Min(math.Max(sec, 0), c.tmax)/c.tmax
}

func (c *canvas) x(p point) float64 { return c.xs(p.T.Sub(c.start).Seconds()) }

func renderChart(spec chartSpec, start time.Time, points []point) (string, error) {
	if len(points) == 0 {
		return "", fmt.Errorf("no samples to chart")
	}
	c := &canvas{start: start, tmax: points[len(points)-1].T.Sub(start).Seconds()}
	if c.tmax <= 0 {
		c.tmax = 1
	}
	ps := panels(spec)
	h := chartTop + float64(len(ps))*(panelH+panelGap) + 10
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", chartW, h)
	fmt.Fprintf(&c.b, `<rect width="100%%" height="100%%" fill="white"/><text x="%.0f" y="25" font-size="16" font-weight="bold">%s</text>`+"\n", chartLeft, esc(spec.title))
	c.phases(spec.phases, h)
	for pi, p := range ps {
		c.panel(p, chartTop+float64(pi)*(panelH+panelGap), points)
	}
	// The time axis under the last panel.
	yAxis := chartTop + float64(len(ps))*(panelH+panelGap) - panelGap + 15
	for k := 0; k <= 6; k++ {
		sec := c.tmax * float64(k) / 6
		fmt.Fprintf(&c.b, `<text x="%.1f" y="%.0f" text-anchor="middle">%.0fs</text>`+"\n", c.xs(sec), yAxis, sec)
	}
	c.b.WriteString("</svg>\n")
	return c.b.String(), nil
}

// phases shades the phases across every panel and names them once at the top, one
// row per phase so that a short phase's name never runs into the next one's.
func (c *canvas) phases(phases []phase, h float64) {
	for _, ph := range phases {
		if x0, x1 := c.xs(ph.from.Seconds()), c.xs(ph.to.Seconds()); ph.shade {
			fmt.Fprintf(&c.b, `<rect class="phase" x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="#fdf1dc"/>`+"\n", x0, chartTop-55, x1-x0, h-chartTop+55)
		}
	}
	for i, ph := range phases {
		fmt.Fprintf(&c.b, `<text class="phase-name" x="%.1f" y="%.0f" fill="#8a6d3b">%s</text>`+"\n", c.xs(ph.from.Seconds())+4, chartTop-43+13*float64(i%2), esc(ph.name))
	}
}

// panel draws one panel at y0: its frame and grid, the reference line, the
// clipping note, and its series.
func (c *canvas) panel(p panel, y0 float64, points []point) {
	ymax, peak := p.ymax, math.NaN()
	for _, pt := range points {
		for _, se := range p.series {
			if v := se.v(pt); !math.IsNaN(v) && (math.IsNaN(peak) || v > peak) {
				peak = v
			}
		}
	}
	if ymax == 0 {
		ymax = peak
		if !math.IsNaN(p.ref) && (math.IsNaN(ymax) || p.ref > ymax) {
			ymax = p.ref
		}
		ymax = niceCeil(ymax)
	} else if !p.clip && peak > ymax {
		ymax = niceCeil(peak)
	}
	y := func(v float64) float64 { return y0 + panelH - panelH*math.Min(v, ymax)/ymax }
	fmt.Fprintf(&c.b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", chartLeft, y0-8, esc(p.title))
	fmt.Fprintf(&c.b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", chartLeft, y0, chartW-chartLeft-chartRight, panelH)
	for k := 0; k <= 4; k++ {
		v := ymax * float64(k) / 4
		fmt.Fprintf(&c.b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			chartLeft, chartW-chartRight, y(v), y(v), chartLeft-5, y(v)+4, trim(v))
	}
	if !math.IsNaN(p.ref) {
		fmt.Fprintf(&c.b, `<line class="ref" x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="4 4"/><text x="%.0f" y="%.1f" fill="#555">%s</text>`+"\n",
			chartLeft, chartW-chartRight, y(p.ref), y(p.ref), chartLeft+4, y(p.ref)-3, esc(p.refTxt))
	}
	if p.clip && peak > ymax {
		fmt.Fprintf(&c.b, `<text class="clipped" x="%.0f" y="%.1f" text-anchor="end" fill="#2ca02c">axis cut at %s to keep %g readable; peak %s</text>`+"\n",
			chartW-chartRight-4, y0+14, trim(ymax), p.ref, trim(peak))
	}
	for si, se := range p.series {
		c.series(se, si, y0, y, points)
	}
}

// series draws one series (skipped when it has no value) and its legend entry.
func (c *canvas) series(se series, si int, y0 float64, y func(float64) float64, points []point) {
	var pts []string
	prevY := math.NaN()
	for _, pt := range points {
		v := se.v(pt)
		if math.IsNaN(v) {
			continue
		}
		if se.step && !math.IsNaN(prevY) {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", c.x(pt), prevY))
		}
		prevY = y(v)
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", c.x(pt), prevY))
	}
	if len(pts) == 0 {
		return
	}
	fmt.Fprintf(&c.b, `<polyline class="series" data-name="%s" fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", esc(se.name), se.color, strings.Join(pts, " "))
	fmt.Fprintf(&c.b, `<rect x="%.0f" y="%.0f" width="12" height="3" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n",
		chartW-chartRight-230+float64(si)*120, y0-12, se.color, chartW-chartRight-214+float64(si)*120, y0-8, esc(se.name))
}

func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
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

func trim(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
