package simulate

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// WriteSVG draws the report as an SVG chart sharing one time axis: the offered
// load (requests per second), then one panel per policy with its replicas (Ready,
// solid; all non-terminating, dashed; left axis, the same scale in every panel)
// and its queue (waiting in engines and held at the gateway; right axis, scaled
// per panel). The file depends only on the report.
func (r *Report) WriteSVG(w io.Writer) error {
	if len(r.Policies) == 0 || len(r.Policies[0].Series) == 0 {
		return fmt.Errorf("no samples to chart")
	}
	const (
		width, left, right = 1000.0, 60.0, 70.0
		top, panelH, gap   = 50.0, 100.0, 42.0
	)
	tmax := 0.0
	maxReplicas, maxRate := 1.0, 0.0
	for _, p := range r.Policies {
		for _, s := range p.Series {
			tmax = math.Max(tmax, s.T)
			maxReplicas = math.Max(maxReplicas, float64(s.Replicas))
			maxRate = math.Max(maxRate, s.ArrivalRate)
		}
	}
	if tmax <= 0 {
		tmax = 1
	}
	x := func(t float64) float64 { return left + (width-left-right)*t/tmax }
	panels := 1 + len(r.Policies)
	height := top + float64(panels)*(panelH+gap) + 10
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="%.0f" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left,
		esc(fmt.Sprintf("%d requests over %.0f s; TTFT SLO %gs; cold start %gs", r.Workload.Requests, r.Workload.DurationSeconds, r.Settings.TTFTSLOSeconds, r.Settings.ColdStartSeconds)))

	frame := func(y0 float64, title string, ymax float64, axisRight bool, rmax float64) {
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", left, y0-7, esc(title))
		fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", left, y0, width-left-right, panelH)
		for k := 0; k <= 4; k++ {
			yy := y0 + panelH - panelH*float64(k)/4
			fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/>`, left, width-right, yy, yy)
			fmt.Fprintf(b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`, left-4, yy+4, trim(ymax*float64(k)/4))
			if axisRight {
				fmt.Fprintf(b, `<text x="%.0f" y="%.1f" fill="#9467bd">%s</text>`, width-right+4, yy+4, trim(rmax*float64(k)/4))
			}
			_, _ = b.WriteString("\n") // bufio.Writer errors are sticky: Flush returns them
		}
	}
	line := func(pts []float64, ys []float64, color string, dashed, step bool) {
		var sb strings.Builder
		for i := range pts {
			if step && i > 0 {
				fmt.Fprintf(&sb, "%.1f,%.1f ", pts[i], ys[i-1])
			}
			fmt.Fprintf(&sb, "%.1f,%.1f ", pts[i], ys[i])
		}
		dash := ""
		if dashed {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>`+"\n", color, dash, strings.TrimSpace(sb.String()))
	}
	legend := func(y0 float64, items ...string) {
		for i := 0; i < len(items); i += 2 {
			xx := width - right - 360 + float64(i/2)*120
			fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="12" height="3" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n", xx, y0-11, items[i+1], xx+16, y0-7, esc(items[i]))
		}
	}

	// Load.
	load := r.Policies[0].Series
	rmax := niceCeil(maxRate)
	frame(top, "offered load (requests/s)", rmax, false, 0)
	xs, ys := make([]float64, len(load)), make([]float64, len(load))
	for i, s := range load {
		xs[i], ys[i] = x(s.T), top+panelH-panelH*s.ArrivalRate/rmax
	}
	line(xs, ys, "#7f7f7f", false, false)

	ymax := niceCeil(maxReplicas)
	for pi, p := range r.Policies {
		y0 := top + float64(pi+1)*(panelH+gap)
		qmax := 1.0
		for _, s := range p.Series {
			qmax = math.Max(qmax, float64(s.Queue))
		}
		qmax = niceCeil(qmax)
		title := fmt.Sprintf("%s: TTFT<=SLO %.2f%%, %.2f GPU-h (x%.2f oracle)", p.Name, 100*p.TTFTWithinSLO, p.GPUHours, p.GPUHoursVsOracle)
		frame(y0, title, ymax, true, qmax)
		legend(y0, "ready", "#1f77b4", "replicas", "#d62728", "queue (right)", "#9467bd")
		n := len(p.Series)
		xs, ready, total, queue := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
		for i, s := range p.Series {
			xs[i] = x(s.T)
			ready[i] = y0 + panelH - panelH*float64(s.Ready)/ymax
			total[i] = y0 + panelH - panelH*float64(s.Replicas)/ymax
			queue[i] = y0 + panelH - panelH*float64(s.Queue)/qmax
		}
		line(xs, queue, "#9467bd", false, false)
		line(xs, total, "#d62728", true, true)
		line(xs, ready, "#1f77b4", false, true)
	}
	axisY := top + float64(panels)*(panelH+gap) - gap + 14
	for k := 0; k <= 6; k++ {
		t := tmax * float64(k) / 6
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x(t), axisY, timeLabel(t, tmax))
	}
	_, _ = b.WriteString("</svg>\n")
	return b.Flush() // the first write error, if any
}

// timeLabel labels an axis tick in seconds, or in minutes when the axis spans
// more than two.
func timeLabel(sec, span float64) string {
	if span < 120 {
		return strconv.FormatFloat(math.Round(sec), 'f', -1, 64) + "s"
	}
	return strconv.FormatFloat(math.Round(sec/6)/10, 'f', -1, 64) + "min"
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(v float64) float64 {
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

func trim(v float64) string { return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) }

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
