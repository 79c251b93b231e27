package scoreboard

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/saturation-adapter/saturation-adapter/lab/simulate"
	"github.com/saturation-adapter/saturation-adapter/lab/trace"
)

// tiny is a scoreboard small enough for a unit test: two 2-minute slices of
// the conversation trace at twice its rate, a 30 s cold start, 2 seeds, two
// families of two points.
func tiny(t *testing.T, workers int) Config {
	t.Helper()
	tr, err := trace.ReadFile("../../data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv")
	if err != nil {
		t.Fatal(err)
	}
	g := DefaultGrid(3, 0.3, 12)
	g.GPUUtilization, g.Queue = []int32{60, 80}, []float64{2, 5}
	all, err := Families(g)
	if err != nil {
		t.Fatal(err)
	}
	var fams []Family
	for _, f := range all {
		if f.Name == "gpu-util" || f.Name == "keda-queue" {
			fams = append(fams, f)
		}
	}
	sim := simulate.DefaultConfig()
	sim.ColdStart = 30 * time.Second
	w := simulate.DefaultWorkloadOptions()
	w.RateScale = 2
	return Config{Sim: sim, Trace: tr, Window: w, Tune: Slice{20 * time.Minute, 2 * time.Minute}, Score: Slice{22 * time.Minute, 2 * time.Minute},
		Seeds: []uint64{1, 2}, Families: fams, SLOGoal: 0.99, CostGoal: 1.15, Workers: workers}
}

// TestRunDeterministicAcrossWorkers: the same seeds give the same result
// whatever the number of replays at once, and the table and the chart are
// written.
func TestRunDeterministicAcrossWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("replays eight slices")
	}
	one, err := Run(tiny(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	two, err := Run(tiny(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(one, two); diff != "" {
		t.Fatalf("1 and 2 workers differ (-1 +2):\n%s", diff)
	}
	var table, svg bytes.Buffer
	if err := one.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if err := one.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| gpu-util | 60% |", "| keda-queue | q=5 |", "default", "**tuned**", "2 seeds (1, 2)"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var root struct{ XMLName xml.Name }
	if err := xml.Unmarshal(svg.Bytes(), &root); err != nil || root.XMLName.Local != "svg" {
		t.Errorf("the frontier chart is not SVG: %v", err)
	}
	if f := one.Family("gpu-util"); f == nil || len(f.Points) != 2 || f.Points[0].Score.TTFTWithinSLO.Min > f.Points[0].Score.TTFTWithinSLO.Max {
		t.Errorf("gpu-util results %+v", f)
	}
}

// TestTunedAndDominated: the tuned point is the cheapest reaching the goal on
// the tune slice (else the best share), and a point is dominated by those at
// least as good on both axes of the score slice and better on one.
func TestTunedAndDominated(t *testing.T) {
	pt := func(fam, label string, tuneSLO, tuneCost, scoreSLO, scoreCost float64) PointResult {
		return PointResult{Family: fam, Label: label,
			Tune:  Stats{TTFTWithinSLO: Summary{Median: tuneSLO}, GPUHoursVsOracle: Summary{Median: tuneCost}},
			Score: Stats{TTFTWithinSLO: Summary{Median: scoreSLO}, GPUHoursVsOracle: Summary{Median: scoreCost}}}
	}
	res := &Result{Families: []FamilyResult{
		{Name: "a", Points: []PointResult{pt("a", "1", 0.995, 1.3, 0.99, 1.3), pt("a", "2", 0.991, 1.1, 0.98, 1.0), pt("a", "3", 0.98, 0.9, 0.97, 0.9)}},
		{Name: "b", Points: []PointResult{pt("b", "1", 0.95, 1.0, 0.99, 1.2), pt("b", "2", 0.97, 1.2, 0.95, 1.4)}},
	}}
	for i := range res.Families {
		f := &res.Families[i]
		f.Points[pickTuned(f.Points, 0.99, tuneSide)].Tuned = true
		f.Points[pickTuned(f.Points, 0.99, scoreSide)].TunedOnScore = true
	}
	markDominated(res)
	if got := res.Family("a").Tuned().Label; got != "2" {
		t.Errorf("a's tuned point %s, want 2 (the cheapest at >= 99 %% on the tune slice)", got)
	}
	if got := res.Family("b").Tuned().Label; got != "2" {
		t.Errorf("b's tuned point %s, want 2 (none reaches the goal: the best share)", got)
	}
	if got := res.Families[1].Points[1].DominatedBy; !cmp.Equal(got, []string{"a/1", "a/2", "a/3", "b/1"}) {
		t.Errorf("b/2 dominated by %v, want every other point", got)
	}
	if got := res.Families[0].Points[0].DominatedBy; !cmp.Equal(got, []string{"b/1"}) {
		t.Errorf("a/1 dominated by %v, want b/1 (the same share, cheaper)", got)
	}
	if got := res.Families[1].Points[0].DominatedBy; got != nil {
		t.Errorf("b/1 (the best share at its cost) dominated by %v, want none", got)
	}
	// The other way round: chosen on the score slice, judged on the tune slice.
	if got := res.Family("a").TunedOnScore().Label; got != "1" {
		t.Errorf("a's point tuned on the score slice %s, want 1 (the only one at >= 99 %% there)", got)
	}
	if got := res.Family("b").TunedOnScore().Label; got != "1" {
		t.Errorf("b's point tuned on the score slice %s, want 1 (the cheapest at >= 99 %% there)", got)
	}
	if got := res.Families[0].Points[0].DominatedOnTune; got != nil {
		t.Errorf("a/1 (the best share on the tune slice) dominated there by %v, want none", got)
	}
	if got := res.Families[1].Points[1].DominatedOnTune; !cmp.Equal(got, []string{"a/2", "a/3"}) {
		t.Errorf("b/2 dominated on the tune slice by %v, want a/2 and a/3 (better shares, cheaper)", got)
	}
	var table bytes.Buffer
	res.SLOGoal, res.CostGoal, res.TTFTSLOSeconds = 0.99, 1.15, 2
	res.Tune, res.Score = Slice{0, 30 * time.Minute}, Slice{30 * time.Minute, 30 * time.Minute}
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| a | 2 | 98.00% (0.00%–0.00%) | 1.00 (0.00–0.00) | no: 1.00 points short | - |",
		"scored on the first (0m–30m):",
		"| a | 1 | 99.50% (0.00%–0.00%) | 1.30 (0.00–0.00) | no: 0.15 × over | - |",
		"| b | 1 | 95.00% (0.00%–0.00%) | 1.00 (0.00–0.00) | no: 4.00 points short | a/3 |",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

// TestWarmUp: with a warm-up, each slice is replayed after what precedes it
// in the trace (the tune slice at the trace's start has none), the score slice
// still counts the window's requests only, and the table says so.
func TestWarmUp(t *testing.T) {
	if testing.Short() {
		t.Skip("replays eight slices")
	}
	cfg := tiny(t, 0)
	cfg.Tune.Start = 0
	cfg.Window.RateScale = 1 // every row once, no draws: both runs replay the window's rows alike
	cold, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Window.WarmUp = 5 * time.Minute
	warm, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if warm.Requests != cold.Requests || warm.ScoreMeanRate != cold.ScoreMeanRate || warm.WarmUpSeconds != 300 {
		t.Errorf("score slice after a warm-up: %d requests at %g/s (warm-up %gs), want the cold slice's %d at %g/s after 300 s",
			warm.Requests, warm.ScoreMeanRate, warm.WarmUpSeconds, cold.Requests, cold.ScoreMeanRate)
	}
	if diff := cmp.Diff(cold.TuneOracle, warm.TuneOracle); diff != "" {
		t.Errorf("the tune slice starts the trace, so no warm-up precedes it; its oracle changed (-cold +warm):\n%s", diff)
	}
	var table bytes.Buffer
	if err := warm.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if want := "each slice after 300s of unscored warm-up"; !strings.Contains(table.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, table.String())
	}
}

// TestScaleUpWindowSweep: with several scale-up windows every family's points
// are swept over them too (each point once per window, its HPA at that window
// and its label ending ",up=<seconds>s"), the default mark staying at the
// behavior's own window; with one window the points are the grid's own.
func TestScaleUpWindowSweep(t *testing.T) {
	g := DefaultGrid(3, 0.3, 12)
	plain, err := Families(g)
	if err != nil {
		t.Fatal(err)
	}
	g.ScaleUpWindows = []time.Duration{30 * time.Second, 60 * time.Second}
	swept, err := Families(g)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range swept {
		p := plain[i]
		if len(f.Points) != 2*len(p.Points) {
			t.Fatalf("%s: %d points, want %d", f.Name, len(f.Points), 2*len(p.Points))
		}
		for j, q := range f.Points {
			base, w := p.Points[j/2], []int32{30, 60}[j%2]
			if want := fmt.Sprintf("%s,up=%ds", base.Label, w); q.Label != want {
				t.Errorf("%s point %d: label %q, want %q", f.Name, j, q.Label, want)
			}
			if got := *q.Autoscaler.HPA.Spec.Behavior.ScaleUp.StabilizationWindowSeconds; got != w {
				t.Errorf("%s: scale-up window %d, want %d", q.Label, got, w)
			}
			if q.Default != (base.Default && w == 30) {
				t.Errorf("%s: default %v, want it only at the recommended 30 s", q.Label, q.Default)
			}
			if diff := cmp.Diff(base.Autoscaler.HPA.Spec.Behavior.ScaleDown, q.Autoscaler.HPA.Spec.Behavior.ScaleDown); diff != "" {
				t.Errorf("%s: scale-down changed: %s", q.Label, diff)
			}
		}
		// The base point's HPA is not shared with the copies.
		if *p.Points[0].Autoscaler.HPA.Spec.Behavior.ScaleUp.StabilizationWindowSeconds != 30 {
			t.Errorf("%s: the grid's own point was changed", f.Name)
		}
	}
	g.ScaleUpWindows = []time.Duration{45 * time.Second}
	one, err := Families(g)
	if err != nil {
		t.Fatal(err)
	}
	if len(one[0].Points) != len(plain[0].Points) || one[0].Points[0].Label != plain[0].Points[0].Label {
		t.Errorf("one window: points %d (%q), want the grid's own %d (%q)", len(one[0].Points), one[0].Points[0].Label, len(plain[0].Points), plain[0].Points[0].Label)
	}
}

// TestGridScaleUpWindow: the grid applies one scale-up window to every
// point's HPA (HPABehavior: Behavior's otherwise, which is not changed), and
// refuses more than MaxScaleUpWindows windows or a bad one; a grid without
// any keeps Behavior's window.
func TestGridScaleUpWindow(t *testing.T) {
	g := DefaultGrid(3, 0.3, 12)
	g.Behavior = simulate.RecommendedBehavior()
	g.ScaleUpWindows = []time.Duration{45 * time.Second}
	want := simulate.RecommendedBehavior()
	up := int32(45)
	want.ScaleUp.StabilizationWindowSeconds = &up
	if diff := cmp.Diff(want, g.HPABehavior()); diff != "" {
		t.Errorf("HPABehavior (-want +got):\n%s", diff)
	}
	families, err := Families(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, p := range f.Points {
			if got := *p.Autoscaler.HPA.Spec.Behavior.ScaleUp.StabilizationWindowSeconds; got != up {
				t.Errorf("%s %s: scale-up window %d, want %d", f.Name, p.Label, got, up)
			}
		}
	}
	if diff := cmp.Diff(simulate.RecommendedBehavior(), g.Behavior); diff != "" {
		t.Errorf("the grid's Behavior was changed (-want +got):\n%s", diff)
	}
	g.ScaleUpWindows = nil
	if diff := cmp.Diff(simulate.RecommendedBehavior(), g.HPABehavior()); diff != "" {
		t.Errorf("no window: HPABehavior is not Behavior (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		windows []time.Duration
		want    []string
	}{
		{make([]time.Duration, MaxScaleUpWindows+1), []string{"11 windows, want 1 to 10 (each multiplies the replays)", "scale-up window 0s given twice"}},
		{[]time.Duration{90 * time.Minute}, []string{"scale-up window 1h30m0s: want whole seconds in [0, 1h] (the HPA API's range)"}},
	} {
		g.ScaleUpWindows = tt.windows
		_, err := Families(g)
		for _, want := range tt.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%v: error %v, want it to contain %q", tt.windows, err, want)
			}
		}
	}
	if errs := ScaleUpWindowErrors(nil); len(errs) != 1 || errs[0].Error() != "0 windows, want 1 to 10 (each multiplies the replays)" {
		t.Errorf("ScaleUpWindowErrors(nil) = %v, want the count refused", errs)
	}
}

// TestTrendFamilyNamed: the trend family is built with every point of the
// demand-rate family and is the only family compared only when named, so
// that the default set stays the one the documented tables were made with.
func TestTrendFamilyNamed(t *testing.T) {
	families, err := Families(DefaultGrid(3, 0.3, 12))
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	points := map[string]int{}
	for _, f := range families {
		if f.Named {
			named = append(named, f.Name)
		}
		points[f.Name] = len(f.Points)
	}
	if len(named) != 1 || named[0] != "saturation+rate+trend" {
		t.Errorf("families compared only when named: %v, want [saturation+rate+trend]", named)
	}
	if points["saturation+rate+trend"] != points["saturation+rate"] || points["saturation+rate"] == 0 {
		t.Errorf("points: %v, want the trend family to sweep the demand-rate family's rates", points)
	}
}
