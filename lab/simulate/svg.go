package simulate

import (
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/saturation-adapter/saturation-adapter/lab/chart"
)

// WriteSVG draws the report as an SVG chart (lab/chart) sharing one time axis:
// the offered load (requests per second), then one panel per autoscaler with
// its replicas (Ready, solid; all non-terminating, dashed; left axis, the same
// scale in every panel) and its queue (waiting in engines and held at the
// gateway; right axis, scaled per panel). The file depends only on the report.
func (r *Report) WriteSVG(w io.Writer) error {
	if len(r.Autoscalers) == 0 || len(r.Autoscalers[0].Series) == 0 {
		return fmt.Errorf("no samples to chart")
	}
	const (
		width, left, right = 1000.0, 60.0, 70.0
		top, panelH, gap   = 50.0, 100.0, 42.0
	)
	tmax := 0.0
	maxReplicas, maxRate := 1.0, 0.0
	for _, p := range r.Autoscalers {
		for _, s := range p.Series {
			tmax = math.Max(tmax, s.T)
			maxReplicas = math.Max(maxReplicas, float64(s.Replicas))
			maxRate = math.Max(maxRate, s.ArrivalRate)
		}
	}
	if tmax <= 0 {
		tmax = 1
	}
	panels := 1 + len(r.Autoscalers)
	height := top + float64(panels)*(panelH+gap) + 10
	c := chart.New(w, width, height, fmt.Sprintf("%d requests over %.0f s; TTFT SLO %gs; cold start %gs", r.Workload.Requests,
		r.Workload.DurationSeconds, r.Settings.TTFTSLOSeconds, r.Settings.ColdStartSeconds))
	timeAxis := chart.Axis{Min: 0, Max: tmax, Ticks: 6, Format: func(v float64) string { return timeLabel(v, tmax) }}
	pw := width - left - right

	load := r.Autoscalers[0].Series
	lp := c.Panel(left, top, pw, panelH, "offered load (requests/s)", timeAxis, chart.Axis{Max: chart.NiceCeil(maxRate)}, nil)
	xs, ys := make([]float64, len(load)), make([]float64, len(load))
	for i, s := range load {
		xs[i], ys[i] = s.T, s.ArrivalRate
	}
	lp.Line(xs, ys, chart.Style{Color: "#7f7f7f"})

	replicas := chart.Axis{Max: chart.NiceCeil(maxReplicas)}
	var last *chart.Panel
	for pi, p := range r.Autoscalers {
		y0 := top + float64(pi+1)*(panelH+gap)
		qmax := 1.0
		for _, s := range p.Series {
			qmax = math.Max(qmax, float64(s.Queue))
		}
		title := fmt.Sprintf("%s: TTFT<=SLO %.2f%%, %.2f GPU-h (x%.2f oracle)", p.Name, 100*p.TTFTWithinSLO, p.GPUHours, p.GPUHoursVsOracle)
		pp := c.Panel(left, y0, pw, panelH, title, timeAxis, replicas, &chart.Axis{Max: chart.NiceCeil(qmax), Color: "#9467bd"})
		pp.Legend("ready", "#1f77b4")
		pp.Legend("replicas", "#d62728")
		pp.Legend("queue (right)", "#9467bd")
		n := len(p.Series)
		xs, ready, total, queue := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
		for i, s := range p.Series {
			xs[i], ready[i], total[i], queue[i] = s.T, float64(s.Ready), float64(s.Replicas), float64(s.Queue)
		}
		pp.Line(xs, queue, chart.Style{Color: "#9467bd", Right: true})
		pp.Line(xs, total, chart.Style{Color: "#d62728", Dashed: true, Step: true})
		pp.Line(xs, ready, chart.Style{Color: "#1f77b4", Step: true})
		last = pp
	}
	last.XTicks()
	return c.Close()
}

// timeLabel labels an axis tick in seconds, or in minutes when the axis spans
// more than two.
func timeLabel(sec, span float64) string {
	if span < 120 {
		return strconv.FormatFloat(math.Round(sec), 'f', -1, 64) + "s"
	}
	return strconv.FormatFloat(math.Round(sec/6)/10, 'f', -1, 64) + "min"
}
