package main

import (
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// writeChart writes an SVG timeline of samples: offered load, replicas (desired and
// ready), saturation and queue depth, one panel each, sharing the time axis.
func writeChart(path, title string, samples []stack.Sample) error {
	if len(samples) == 0 {
		return fmt.Errorf("no samples to chart")
	}
	const w, left, right, panelH, gap, top = 900.0, 70.0, 20.0, 140.0, 45.0, 50.0
	t0 := samples[0].T
	tmax := samples[len(samples)-1].T.Sub(t0).Seconds()
	if tmax <= 0 {
		tmax = 1
	}
	x := func(i int) float64 { return left + (w-left-right)*samples[i].T.Sub(t0).Seconds()/tmax }
	type series struct {
		name, color string
		v           func(stack.Sample) float64
		step        bool
	}
	panels := []struct {
		title  string
		series []series
		ref    float64 // a dashed reference line, NaN for none
	}{
		{"offered load (requests/s, Azure conversation trace)", []series{
			{"req/s", "#7f7f7f", func(s stack.Sample) float64 { return s.OfferedRPS }, false},
		}, math.NaN()},
		{"replicas", []series{
			{"desired (HPA)", "#d62728", func(s stack.Sample) float64 {
				if s.Desired == 0 { // the HPA has not synced yet
					return math.NaN()
				}
				return float64(s.Desired)
			}, true},
			{"ready", "#1f77b4", func(s stack.Sample) float64 { return float64(s.Ready) }, true},
		}, math.NaN()},
		{"llm_saturation (target 1)", []series{
			{"llm_saturation", "#2ca02c", func(s stack.Sample) float64 { return s.Saturation }, false},
		}, 1},
		{"queue depth (waiting requests, all pods)", []series{
			{"waiting", "#9467bd", func(s stack.Sample) float64 { return s.Queue }, false},
		}, math.NaN()},
	}
	h := top + float64(len(panels))*(panelH+gap) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%.0f" y="25" font-size="16" font-weight="bold">%s</text>`+"\n", left, esc(title))
	for pi, p := range panels {
		y0 := top + float64(pi)*(panelH+gap)
		ymax := 0.0
		for _, s := range samples {
			for _, se := range p.series {
				if v := se.v(s); !math.IsNaN(v) && v > ymax {
					ymax = v
				}
			}
		}
		if !math.IsNaN(p.ref) && p.ref > ymax {
			ymax = p.ref
		}
		ymax = niceCeil(ymax)
		y := func(v float64) float64 { return y0 + panelH - panelH*v/ymax }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", left, y0-8, esc(p.title))
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", left, y0, w-left-right, panelH)
		for k := 0; k <= 4; k++ {
			v := ymax * float64(k) / 4
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n",
				left, w-right, y(v), y(v), left-5, y(v)+4, trim(v))
		}
		if !math.IsNaN(p.ref) {
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="4 4"/>`+"\n", left, w-right, y(p.ref), y(p.ref))
		}
		for si, se := range p.series {
			var pts []string
			prevY := math.NaN()
			for i, s := range samples {
				v := se.v(s)
				if math.IsNaN(v) {
					continue
				}
				if se.step && !math.IsNaN(prevY) {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), prevY))
				}
				prevY = y(v)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), prevY))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", se.color, strings.Join(pts, " "))
			fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="12" height="3" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n",
				w-right-230+float64(si)*120, y0-12, se.color, w-right-214+float64(si)*120, y0-8, esc(se.name))
		}
	}
	// time axis under the last panel
	yAxis := top + float64(len(panels))*(panelH+gap) - gap + 15
	for k := 0; k <= 6; k++ {
		sec := tmax * float64(k) / 6
		px := left + (w-left-right)*sec/tmax
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%.0fs</text>`+"\n", px, yAxis, sec)
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
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
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
