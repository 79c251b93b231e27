package scoreboard

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/saturation-adapter/saturation-adapter/lab/chart"
)

// WriteJSON writes the result as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func pct(v float64) string { return fmt.Sprintf("%.2f%%", 100*v) }

func spread(s Summary, f func(float64) string) string {
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.Min), f(s.Max))
}

func ratio(v float64) string { return fmt.Sprintf("%.2f", v) }

// WriteTable writes the scoreboard as Markdown: a line on the slices and the
// oracle, the frontier of every family (each point on both slices: medians,
// and on the score slice the range over the seeds; the default and the tuned
// point marked; the points beaten on both axes and by whom), then the tuned
// point of every family on the score slice and the verdict on the goal, then
// the same the other way round (chosen on the score slice, reported on the
// tune slice: the two-fold check).
func (r *Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	slo := fmt.Sprintf("TTFT ≤ %gs", r.TTFTSLOSeconds)
	warm := ""
	if r.WarmUpSeconds > 0 {
		warm = fmt.Sprintf(", each slice after %gs of unscored warm-up (as much as precedes it)", r.WarmUpSeconds)
	}
	fmt.Fprintf(&b, "Tuned on %s, scored on %s of the trace%s, %d seeds (%s), %gs mean cold start. Score slice: %d requests (mean %.2f/s, peak minute %.2f/s); the oracle keeps %s within the TTFT SLO at %s GPU-h, %s misses it found no replica count removes (medians, range over the seeds).\n\n",
		r.Tune, r.Score, warm, len(r.Seeds), seedList(r.Seeds), r.ColdStartSeconds, r.Requests, r.ScoreMeanRate, r.ScorePeakMinuteRate,
		spread(r.ScoreOracle.TTFTWithinSLO, pct), spread(r.ScoreOracle.GPUHours, ratio), num(r.ScoreOracle.Unachievable.Median))
	fmt.Fprintf(&b, "| family | point | tune: %s | tune: × oracle | score: %s | score: × oracle GPU-h | abandoned | peak pods | notes |\n", slo, slo)
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, f := range r.Families {
		for _, p := range f.Points {
			var notes []string
			if p.Default {
				notes = append(notes, "default")
			}
			if p.Tuned {
				notes = append(notes, "**tuned**")
			}
			if len(p.DominatedBy) > 0 {
				notes = append(notes, "dominated by "+dominators(p.DominatedBy))
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", f.Name, p.Label,
				pct(p.Tune.TTFTWithinSLO.Median), ratio(p.Tune.GPUHoursVsOracle.Median),
				spread(p.Score.TTFTWithinSLO, pct), spread(p.Score.GPUHoursVsOracle, ratio),
				pct(p.Score.Abandoned.Median), num(p.Score.PeakReplicas.Median), strings.Join(notes, "; "))
		}
	}
	fmt.Fprintf(&b, "\nTuned on the first slice (the cheapest point keeping %s there, else the best share), scored on the second:\n\n", pct(r.SLOGoal))
	r.writeVerdicts(&b, "score", FamilyResult.Tuned, scoreSide, func(p PointResult) []string { return p.DominatedBy })
	cold := ""
	if r.WarmUpSeconds > 0 && r.Tune.Start == 0 {
		cold = ", which has no warm-up: nothing precedes it"
	}
	fmt.Fprintf(&b, "\nThe other way round, so that neither half alone decides: tuned on the second slice by the same rule, scored on the first (%s%s):\n\n", r.Tune, cold)
	r.writeVerdicts(&b, "tune", FamilyResult.TunedOnScore, tuneSide, func(p PointResult) []string { return p.DominatedOnTune })
	_, err := io.WriteString(w, b.String())
	return err
}

// writeVerdicts writes the verdict table of one direction: each family's
// point chosen by pick, its results on the other slice (on; named side in the
// header), whether it meets the goal there and which points beat it there.
func (r *Result) writeVerdicts(b *strings.Builder, side string, pick func(FamilyResult) PointResult, on func(*PointResult) Stats, beaten func(PointResult) []string) {
	slo := fmt.Sprintf("TTFT ≤ %gs", r.TTFTSLOSeconds)
	fmt.Fprintf(b, "| family | tuned point | %s: %s | %s: × oracle GPU-h | meets %s at ≤ %s × oracle | beaten on both axes by |\n", side, slo, side, pct(r.SLOGoal), ratio(r.CostGoal))
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, f := range r.Families {
		p := pick(f)
		st := on(&p)
		by := "-"
		if names := beaten(p); len(names) > 0 {
			by = dominators(names)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", f.Name, p.Label, spread(st.TTFTWithinSLO, pct), spread(st.GPUHoursVsOracle, ratio), r.verdict(st), by)
	}
}

// verdict says whether results st meet the goal, and else by how much they
// miss it.
func (r *Result) verdict(st Stats) string {
	switch s, c := st.TTFTWithinSLO.Median, st.GPUHoursVsOracle.Median; {
	case s < r.SLOGoal && c > r.CostGoal:
		return fmt.Sprintf("no: %.2f points short, %.2f × over", 100*(r.SLOGoal-s), c-r.CostGoal)
	case s < r.SLOGoal:
		return fmt.Sprintf("no: %.2f points short", 100*(r.SLOGoal-s))
	case c > r.CostGoal:
		return fmt.Sprintf("no: %.2f × over", c-r.CostGoal)
	}
	return "yes"
}

// dominators lists at most four dominating points and how many more.
func dominators(names []string) string {
	if len(names) <= 4 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:4], ", "), len(names)-4)
}

func seedList(s []uint64) string {
	if len(s) == 0 {
		return ""
	}
	contiguous := true
	for i := 1; i < len(s); i++ {
		if s[i] != s[i-1]+1 {
			contiguous = false
		}
	}
	if contiguous && len(s) > 2 {
		return fmt.Sprintf("%d–%d", s[0], s[len(s)-1])
	}
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ", ")
}

// WriteSVG draws the score slice's frontiers (lab/chart): GPU-hours against
// the oracle's on x, the share within the TTFT SLO on y, one line per family
// through its points' medians, each point's range over the seeds as thin bars,
// the tuned points labelled, and the goal as dashed lines.
func (r *Result) WriteSVG(w io.Writer) error {
	const width, height, left, top = 1000.0, 640.0, 70.0, 60.0
	xmax, ymin := r.CostGoal, r.SLOGoal
	for _, f := range r.Families {
		for _, p := range f.Points {
			xmax = math.Max(xmax, p.Score.GPUHoursVsOracle.Median)
			ymin = math.Min(ymin, p.Score.TTFTWithinSLO.Median)
		}
	}
	xmax = math.Min(chart.NiceCeil(xmax), 6)
	ymin = math.Max(0, math.Floor(ymin*20)/20)
	c := chart.New(w, width, height, fmt.Sprintf("Frontiers on the score slice %s (%d seeds): share within the TTFT SLO against GPU-hours × oracle", r.Score, len(r.Seeds)))
	pw, ph := width-left-230, height-top-70
	p := c.Panel(left, top, pw, ph, "", chart.Axis{Min: 0, Max: xmax, Label: "GPU-hours × the oracle's (median)", Ticks: 6},
		chart.Axis{Min: ymin, Max: 1, Label: "requests within the TTFT SLO (median)", Ticks: 5, Format: func(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }}, nil)
	p.HLine(r.SLOGoal, "goal "+pct(r.SLOGoal), "#444")
	p.VLine(r.CostGoal, fmt.Sprintf("%s × oracle", ratio(r.CostGoal)), "#444")
	for i, f := range r.Families {
		color := chart.Color(i)
		pts := append([]PointResult(nil), f.Points...)
		// Sort by cost for the line.
		for a := 1; a < len(pts); a++ {
			for b := a; b > 0 && pts[b].Score.GPUHoursVsOracle.Median < pts[b-1].Score.GPUHoursVsOracle.Median; b-- {
				pts[b], pts[b-1] = pts[b-1], pts[b]
			}
		}
		xs, ys := make([]float64, len(pts)), make([]float64, len(pts))
		for k, pt := range pts {
			xs[k], ys[k] = math.Min(pt.Score.GPUHoursVsOracle.Median, xmax), math.Max(pt.Score.TTFTWithinSLO.Median, ymin)
			p.Range(xs[k], ys[k], pt.Score.GPUHoursVsOracle.Min, pt.Score.GPUHoursVsOracle.Max,
				math.Max(pt.Score.TTFTWithinSLO.Min, ymin), pt.Score.TTFTWithinSLO.Max, color)
			if pt.Tuned {
				p.Label(xs[k], ys[k], pt.Label, color)
			}
		}
		style := chart.Style{Color: color, Markers: true}
		if f.Baseline {
			style.Dashed = true
		}
		p.Line(xs, ys, style)
		c.LegendAt(left+pw+20, top+14+float64(i)*18, f.Name, color)
	}
	p.XTicks()
	c.Text(left+pw+20, top+14+float64(len(r.Families))*18+10, "start", "dashed: baselines")
	return c.Close()
}
