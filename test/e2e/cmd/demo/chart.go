package main

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/saturation-adapter/saturation-adapter/lab/chart"
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
				if !p.HPASynced {
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

// chart geometry, in SVG pixels: every panel spans the same plot width.
const chartW, chartLeft, chartRight, panelH, panelGap, chartTop = 900.0, 70.0, 20.0, 120.0, 45.0, 95.0

// plotW is the width of every panel's plot area.
const plotW = chartW - chartLeft - chartRight

// renderChart draws the timeline with lab/chart: the phases shaded behind the
// panels, one panel per entry of panels(spec) against the seconds since start,
// and the time axis under the last one.
func renderChart(spec chartSpec, start time.Time, points []point) (string, error) {
	if len(points) == 0 {
		return "", fmt.Errorf("no samples to chart")
	}
	tmax := points[len(points)-1].T.Sub(start).Seconds()
	if tmax <= 0 {
		tmax = 1
	}
	timeAxis := chart.Axis{Max: tmax, Ticks: 6, Format: func(sec float64) string { return fmt.Sprintf("%.0fs", sec) }}
	ps := panels(spec)
	h := chartTop + float64(len(ps))*(panelH+panelGap) + 10
	var b strings.Builder
	c := chart.New(&b, chartW, h, spec.title)
	drawPhases(c, spec.phases, timeAxis, h)
	for pi, p := range ps {
		pan := drawPanel(c, p, chartTop+float64(pi)*(panelH+panelGap), timeAxis, start, points)
		if pi == len(ps)-1 {
			pan.XTicks()
		}
	}
	if err := c.Close(); err != nil {
		return "", err
	}
	return b.String(), nil
}

// drawPhases shades the phases across every panel and names them once at the
// top, one row per phase so that a short phase's name never runs into the
// next one's.
func drawPhases(c *chart.Canvas, phases []phase, timeAxis chart.Axis, h float64) {
	x := func(d time.Duration) float64 { return chartLeft + plotW*timeAxis.Frac(d.Seconds()) }
	for _, ph := range phases {
		if ph.shade {
			c.Group("phase", ph.name)
			c.Rect(x(ph.from), chartTop-55, x(ph.to)-x(ph.from), h-chartTop+55, "#fdf1dc")
			c.EndGroup()
		}
	}
	c.Group("phase-name", "")
	for i, ph := range phases {
		c.ColorText(x(ph.from)+4, chartTop-43+13*float64(i%2), "start", ph.name, "#8a6d3b")
	}
	c.EndGroup()
}

// drawPanel draws panel p at y0 and returns it: its frame, grid and y axis
// (see yMax), the reference line, the clipping note, and each series that has
// a value, with its legend entry.
func drawPanel(c *chart.Canvas, p panel, y0 float64, timeAxis chart.Axis, start time.Time, points []point) *chart.Panel {
	ymax, peak := p.yMax(points)
	pan := c.Panel(chartLeft, y0, plotW, panelH, p.title, timeAxis, chart.Axis{Max: ymax}, nil)
	if !math.IsNaN(p.ref) {
		c.Group("ref", p.refTxt)
		pan.HLine(p.ref, p.refTxt, "#555")
		c.EndGroup()
	}
	if p.clip && peak > ymax {
		c.Group("clipped", "")
		c.ColorText(chartLeft+plotW-4, y0+14, "end", fmt.Sprintf("axis cut at %s to keep %g readable; peak %s", chart.Trim(ymax), p.ref, chart.Trim(peak)), "#2ca02c")
		c.EndGroup()
	}
	for _, se := range p.series {
		xs, ys := se.values(start, points)
		if len(xs) == 0 {
			continue
		}
		c.Group("series", se.name)
		pan.Line(xs, ys, chart.Style{Color: se.color, Step: se.step, Width: 2})
		c.EndGroup()
		pan.Legend(se.name, se.color)
	}
	return pan
}

// yMax returns the top of p's y axis and the highest value of its series
// (NaN when none has a value): p.ymax when set (raised to the peak unless
// the panel clips), else the peak or the reference line, rounded up.
func (p panel) yMax(points []point) (ymax, peak float64) {
	ymax, peak = p.ymax, math.NaN()
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
		ymax = chart.NiceCeil(ymax)
	} else if !p.clip && peak > ymax {
		ymax = chart.NiceCeil(peak)
	}
	return ymax, peak
}

// values returns the series' points that have a value: seconds since start
// and the value.
func (se series) values(start time.Time, points []point) (xs, ys []float64) {
	for _, pt := range points {
		if v := se.v(pt); !math.IsNaN(v) {
			xs, ys = append(xs, pt.T.Sub(start).Seconds()), append(ys, v)
		}
	}
	return xs, ys
}
