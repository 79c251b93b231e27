package scoreboard

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/saturation-adapter/saturation-adapter/lab/simulate"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// Grid is the sweep of every family: the targets each is run at. Every
// family gets as many points around its own default.
type Grid struct {
	// GPUUtilization are the gpu-util HPA's averageUtilization targets,
	// percent (its usual range is 70–90; 80 is the default point).
	GPUUtilization []int32
	// Queue are the waiting requests per pod of the queue-only families
	// (keda-queue, keda-queue-cached, queue; 5, llm-d's threshold, is the
	// default point).
	Queue []float64
	// KV are the KV-cache usage targets of the kv family (0.8 is the default).
	KV []float64
	// SaturationQueue is the queue set point of the fused families
	// (calibrate's measurement); SaturationKV the KV set points the
	// saturation family sweeps. The fused score at the adapter's defaults
	// (5, 0.8) is the saturation family's default point.
	SaturationQueue float64
	SaturationKV    []float64
	// DemandKV is the KV set point of the families with a demand-rate term;
	// DemandRate the requests per second per replica they sweep, over
	// DemandWindow.
	DemandKV     float64
	DemandRate   []float64
	DemandWindow time.Duration
	// Peak is the peak hold of the ahead family.
	Peak policy.PeakHold
	// Trend is the trend of the trend family.
	Trend policy.Trend
	// Floors are the least replicas of the minimum family: a scheduled
	// minimum open over the whole replay (what a schedule known in advance
	// would hold during the trace's hour).
	Floors []float64
	// MinReplicas is every HPA's minReplicas; Behavior every HPA's behavior
	// (simulate.RecommendedBehavior when nil), its scale-up stabilization
	// window replaced when ScaleUpWindows holds any.
	MinReplicas int32
	Behavior    *autoscalingv2.HorizontalPodAutoscalerBehavior
	// ScaleUpWindows are every HPA's scale-up stabilization windows (at most
	// MaxScaleUpWindows; none keeps Behavior's own). One window replaces
	// Behavior's in every point's HPA (see HPABehavior); several sweep every
	// family's points over them too: each point once per window, its label
	// ending ",up=60s", so that every family chooses its window on the tune
	// slice as it chooses its target. The point at Behavior's own window keeps
	// the family's default mark.
	ScaleUpWindows []time.Duration
}

// MaxScaleUpWindows is the most scale-up windows a grid takes: each replays
// every point again.
const MaxScaleUpWindows = 10

// DefaultGrid returns a grid around the defaults of every family; the fused
// families at the given calibrated queue and KV set points and per-replica
// rate.
func DefaultGrid(queue, kv, rate float64) Grid {
	return Grid{
		GPUUtilization:  []int32{50, 60, 70, 80, 90},
		Queue:           []float64{1, 2, 3, 5, 8},
		KV:              []float64{0.2, 0.3, 0.4, 0.6, 0.8},
		SaturationQueue: queue,
		SaturationKV:    []float64{kv * 0.7, kv * 0.85, kv, kv * 1.15, kv * 1.3},
		DemandKV:        kv,
		DemandRate:      []float64{rate * 0.7, rate * 0.8, rate * 0.9, rate, rate * 1.1},
		DemandWindow:    30 * time.Second,
		Peak:            policy.PeakHold{Window: 10 * time.Minute, Headroom: 0.1, HalfLife: 5 * time.Minute},
		Trend:           policy.Trend{Window: 2 * time.Minute, Lookahead: 4 * time.Minute},
		Floors:          []float64{2, 4, 6, 8},
		MinReplicas:     1,
	}
}

// MaxRate bounds the grid's queue targets and demand rates: a million
// requests (waiting per pod, or per second per replica), far beyond any
// engine, and small enough for every label to print exactly.
const MaxRate = 1e6

// Validate reports every grid value out of its range at once, naming it,
// before any family is built (a NaN target once reached a quantity parser
// that panics): GPU utilization in [1, 100] percent, queue targets and set
// points and demand rates in [policy.MinSetPoint, MaxRate], KV-cache targets
// and set points in [policy.MinSetPoint, 1], floors in (0,
// simulate.MaxFleet], a demand window in [1s, 1h], a trend window in [1s,
// policy.MaxTrendWindow] and lookahead in (0, policy.MaxLookahead] and, when
// there are any, the scale-up windows (ScaleUpWindowErrors). The peak hold
// is the policy's to validate (policy.NewCatalog, when the families are
// built).
func (g Grid) Validate() error {
	var errs []error
	in := func(name string, v, lo, hi float64) {
		if !(v >= lo && v <= hi) {
			errs = append(errs, fmt.Errorf("%s %g: want a number in [%g, %g]", name, v, lo, hi))
		}
	}
	for _, u := range g.GPUUtilization {
		if u < 1 || u > 100 {
			errs = append(errs, fmt.Errorf("GPU utilization target %d: want a percentage in [1, 100]", u))
		}
	}
	for _, q := range g.Queue {
		in("queue target", q, policy.MinSetPoint, MaxRate)
	}
	for _, v := range g.KV {
		in("KV-cache usage target", v, policy.MinSetPoint, 1)
	}
	in("fused queue set point", g.SaturationQueue, policy.MinSetPoint, MaxRate)
	for _, v := range g.SaturationKV {
		in("fused KV-cache set point", v, policy.MinSetPoint, 1)
	}
	in("demand-rate KV-cache set point", g.DemandKV, policy.MinSetPoint, 1)
	for _, r := range g.DemandRate {
		in("demand rate", r, policy.MinSetPoint, MaxRate)
	}
	for _, f := range g.Floors {
		if !(f > 0 && f <= simulate.MaxFleet) {
			errs = append(errs, fmt.Errorf("floor %g: want a number of replicas in (0, %d]", f, simulate.MaxFleet))
		}
	}
	if g.DemandWindow < time.Second || g.DemandWindow > time.Hour {
		errs = append(errs, fmt.Errorf("demand-rate window %v: want one in [1s, 1h]", g.DemandWindow))
	}
	if g.Trend.Window < time.Second || g.Trend.Window > policy.MaxTrendWindow {
		errs = append(errs, fmt.Errorf("trend window %v: want one in [1s, %v]", g.Trend.Window, policy.MaxTrendWindow))
	}
	if g.Trend.Lookahead <= 0 || g.Trend.Lookahead > policy.MaxLookahead {
		errs = append(errs, fmt.Errorf("trend lookahead %v: want one in (0s, %v]", g.Trend.Lookahead, policy.MaxLookahead))
	}
	if len(g.ScaleUpWindows) > 0 {
		errs = append(errs, ScaleUpWindowErrors(g.ScaleUpWindows)...)
	}
	return errors.Join(errs...)
}

// ScaleUpWindowErrors reports what is wrong with windows as a grid's
// ScaleUpWindows, naming no flag: at most two errors, the first when there
// are none or more than MaxScaleUpWindows of them, the other joining one
// error per window that is not whole seconds in [0, 1h] (the HPA API's
// range) or is given twice. It returns nil when they are valid. (A grid
// without any keeps Behavior's window; Validate checks windows only when
// there are some.)
func ScaleUpWindowErrors(windows []time.Duration) []error {
	var out, errs []error
	if n := len(windows); n == 0 || n > MaxScaleUpWindows {
		out = append(out, fmt.Errorf("%d windows, want 1 to %d (each multiplies the replays)", n, MaxScaleUpWindows))
	}
	seen := map[time.Duration]bool{}
	for _, w := range windows {
		switch {
		case w < 0 || w > time.Hour || w%time.Second != 0:
			errs = append(errs, fmt.Errorf("scale-up window %v: want whole seconds in [0, 1h] (the HPA API's range)", w))
		case seen[w]:
			errs = append(errs, fmt.Errorf("scale-up window %v given twice", w))
		}
		seen[w] = true
	}
	if err := errors.Join(errs...); err != nil {
		out = append(out, err)
	}
	return out
}

// The metric names of the families served from a catalog of their own.
const (
	metricAhead = "llm_scoreboard"
)

// Families returns the families of the grid: the baselines (gpu-util,
// keda-queue without and with its cache, queue, kv) and the adapter's (the
// fused saturation, with a demand-rate term, with a held peak, with a trend
// (Named: compared when asked for), with a scheduled minimum).
func Families(g Grid) ([]Family, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	b, err := newFamilyBuilder(g)
	if err != nil {
		return nil, err
	}
	out := []Family{b.gpuUtil()}
	out = append(out,
		b.queue("keda-queue", "KEDA prometheus trigger on the total queue (AverageValue per pod), useCachedMetrics false (KEDA's default): Prometheus every 15 s, queried at each HPA sync", simulate.PathPrometheus),
		b.queue("keda-queue-cached", "the same trigger with useCachedMetrics true: the HPA reads the value KEDA polled every 30 s", simulate.PathKEDA),
		b.queue("queue", "queue-only through the adapter: llm_num_requests_waiting, AverageValue per pod, scraped every 2 s", simulate.PathAdapter),
		b.kv())
	for _, spec := range []struct {
		name, desc string
		points     []ownPoint
		named      bool
	}{
		{"saturation", "the fused score llm_saturation (mean of max(queue/q, KV/kv)), Value 1, through the adapter", b.saturationPoints(), false},
		{"saturation+rate", fmt.Sprintf("the fused score with a demandRate term (arrivals over %s / requests per second per replica), Value 1", g.DemandWindow), b.demandPoints(nil), false},
		{"saturation+rate+peak", fmt.Sprintf("the same with the demand held at its peak over %s (half-life %s) × %s", g.Peak.Window, g.Peak.HalfLife, num(1+g.Peak.Headroom)), b.demandPoints(&g.Peak), false},
		{"saturation+rate+trend", fmt.Sprintf("the same with the demand's rise over %s extrapolated %s ahead", g.Trend.Window, g.Trend.Lookahead), b.trendPoints(), true},
		{"saturation+minimum", "the fused score with a scheduled minimum of demand open over the whole slice (a known daily peak)", b.minimumPoints(), false},
	} {
		f, err := b.own(spec.name, spec.desc, spec.points)
		if err != nil {
			return nil, err
		}
		f.Named = spec.named
		out = append(out, f)
	}
	if len(g.ScaleUpWindows) > 1 {
		for i := range out {
			out[i].Points = b.perScaleUpWindow(out[i].Points)
		}
	}
	return out, nil
}

// perScaleUpWindow returns each of points once per window of the grid's
// ScaleUpWindows, in sweep order (a point's windows together), each HPA with
// that scale-up stabilization window and a label ending ",up=" and the window
// in seconds. A point keeps its default mark at the behavior's own window.
func (b *familyBuilder) perScaleUpWindow(points []Point) []Point {
	own := time.Duration(-1)
	if up := b.behavior.ScaleUp; up != nil && up.StabilizationWindowSeconds != nil {
		own = time.Duration(*up.StabilizationWindowSeconds) * time.Second
	}
	var out []Point
	for _, p := range points {
		for _, w := range b.g.ScaleUpWindows {
			q := p
			q.Label = fmt.Sprintf("%s,up=%ds", p.Label, int64(w/time.Second))
			q.Default = p.Default && w == own
			hpa := p.Autoscaler.HPA.DeepCopy()
			if hpa.Spec.Behavior == nil {
				hpa.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{}
			}
			setScaleUpWindow(hpa.Spec.Behavior, w)
			q.Autoscaler.HPA = hpa
			out = append(out, q)
		}
	}
	return out
}

// setScaleUpWindow sets b's scale-up stabilization window to w (whole
// seconds), adding scale-up rules when b has none.
func setScaleUpWindow(b *autoscalingv2.HorizontalPodAutoscalerBehavior, w time.Duration) {
	if b.ScaleUp == nil {
		b.ScaleUp = &autoscalingv2.HPAScalingRules{}
	}
	secs := int32(w / time.Second)
	b.ScaleUp.StabilizationWindowSeconds = &secs
}

// HPABehavior returns a copy of the behavior every point's HPA starts from:
// Behavior (simulate.RecommendedBehavior when nil) with the scale-up
// stabilization window of ScaleUpWindows when it holds one. With several,
// each point's copies differ from it in that window only (Families).
func (g Grid) HPABehavior() *autoscalingv2.HorizontalPodAutoscalerBehavior {
	b := simulate.RecommendedBehavior()
	if g.Behavior != nil {
		b = g.Behavior.DeepCopy()
	}
	if len(g.ScaleUpWindows) == 1 {
		setScaleUpWindow(b, g.ScaleUpWindows[0])
	}
	return b
}

// familyBuilder makes the families of a grid: every HPA gets the grid's
// minReplicas and behavior (Grid.HPABehavior), and the baselines' metrics
// come from the built-in catalog at the adapter's default set points.
type familyBuilder struct {
	g        Grid
	behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
	builtin  func() simulate.MetricSource
}

// newFamilyBuilder returns the builder of g's families, every HPA's behavior
// g.HPABehavior. Errors: the built-in catalog's.
func newFamilyBuilder(g Grid) (*familyBuilder, error) {
	behavior := g.HPABehavior()
	builtin, err := policy.BuiltinCatalog(policy.DefaultSetPoints(), policy.DefaultUnknownSaturation)
	if err != nil {
		return nil, err
	}
	return &familyBuilder{g: g, behavior: behavior, builtin: simulate.CatalogSource(builtin)}, nil
}

// hpa returns the HPA named name on metric m, with the grid's minReplicas
// and a copy of its behavior.
func (b *familyBuilder) hpa(name string, m autoscalingv2.MetricSpec) *autoscalingv2.HorizontalPodAutoscaler {
	return simulate.NewHPA(name, b.g.MinReplicas, b.behavior.DeepCopy(), m)
}

// gpuUtil returns gpu-util: the HPA on GPU utilization at each of the grid's
// targets (80 % the default point).
func (b *familyBuilder) gpuUtil() Family {
	f := Family{Name: "gpu-util", Baseline: true,
		Description: "HPA on GPU utilization (Resource nvidia.com/gpu, averageUtilization; NVML's busy fraction via Prometheus every 15 s)"}
	for _, u := range b.g.GPUUtilization {
		f.Points = append(f.Points, Point{Label: fmt.Sprintf("%d%%", u), Default: u == 80,
			Autoscaler: simulate.Autoscaler{HPA: b.hpa("gpu-util", simulate.GPUUtilizationMetric(u)), Path: simulate.PathPrometheus, Source: b.builtin}})
	}
	return f
}

// queue returns a queue-only baseline: the HPA on the waiting requests per pod
// (AverageValue) at each of the grid's queue targets (5 the default point),
// its metric reaching the HPA on path.
func (b *familyBuilder) queue(name, desc string, path simulate.MetricsPath) Family {
	f := Family{Name: name, Description: desc, Baseline: true}
	for _, q := range b.g.Queue {
		m := simulate.ExternalMetric(simulate.MetricQueueDepth, autoscalingv2.AverageValueMetricType, q)
		f.Points = append(f.Points, Point{Label: "q=" + num(q), Default: q == 5,
			Autoscaler: simulate.Autoscaler{HPA: b.hpa(name, m), Path: path, Source: b.builtin}})
	}
	return f
}

// kv returns kv: the HPA on the pool's mean KV-cache usage (Value) at each of
// the grid's KV targets (0.8 the default point).
func (b *familyBuilder) kv() Family {
	f := Family{Name: "kv", Baseline: true, Description: "KV-only through the adapter: llm_kv_cache_usage (pool mean), target Value"}
	for _, v := range b.g.KV {
		m := simulate.ExternalMetric(simulate.MetricKVCacheUsage, autoscalingv2.ValueMetricType, v)
		f.Points = append(f.Points, Point{Label: "kv=" + num(v), Default: v == 0.8,
			Autoscaler: simulate.Autoscaler{HPA: b.hpa("kv", m), Path: simulate.PathAdapter, Source: b.builtin}})
	}
	return f
}

// own returns one of the adapter's families: each point serves its own
// policy as llm_scoreboard, for an HPA with target Value 1. Errors: a point
// whose policy is invalid.
func (b *familyBuilder) own(name, desc string, points []ownPoint) (Family, error) {
	f := Family{Name: name, Description: desc}
	for _, p := range points {
		c, err := policy.NewCatalog(policy.Policy{Name: metricAhead, Kind: policy.KindMean, UnknownSaturation: policy.DefaultUnknownSaturation,
			HoldLastGood: policy.DefaultHoldLastGood, Terms: p.terms, Peak: p.peak, Trend: p.trend, Minimums: p.minimums})
		if err != nil {
			return f, fmt.Errorf("%s %s: %w", name, p.label, err)
		}
		m := simulate.ExternalMetric(metricAhead, autoscalingv2.ValueMetricType, 1)
		f.Points = append(f.Points, Point{Label: p.label, Default: p.def,
			Autoscaler: simulate.Autoscaler{HPA: b.hpa(name, m), Path: simulate.PathAdapter, Source: simulate.CatalogSource(c)}})
	}
	return f, nil
}

// fused returns the terms of the fused score at queue set point q and KV set
// point kv.
func fused(q, kv float64) []policy.Term {
	return policy.SetPoints{QueueDepth: q, KVCacheUsage: kv}.Terms()
}

// saturationPoints are saturation's points: the adapter's defaults (5, 0.8),
// the default point, then the grid's KV set points at its queue set point.
func (b *familyBuilder) saturationPoints() []ownPoint {
	pts := []ownPoint{{label: "q=5,kv=0.8", def: true, terms: fused(5, 0.8)}}
	for _, v := range b.g.SaturationKV {
		pts = append(pts, ownPoint{label: fmt.Sprintf("q=%s,kv=%s", num(b.g.SaturationQueue), num(v)), terms: fused(b.g.SaturationQueue, v)})
	}
	return pts
}

// demandPoints are the points of the families with a demand-rate term, one
// per rate of the grid, holding the demand's peak when peak is set.
func (b *familyBuilder) demandPoints(peak *policy.PeakHold) []ownPoint {
	var pts []ownPoint
	for _, r := range b.g.DemandRate {
		terms := append(fused(b.g.SaturationQueue, b.g.DemandKV), policy.Term{Kind: policy.TermDemandRate, SetPoint: r, Window: b.g.DemandWindow})
		p := ownPoint{label: "rate=" + num(r), terms: terms}
		if peak != nil {
			held := *peak
			p.peak = &held
		}
		pts = append(pts, p)
	}
	return pts
}

// trendPoints are saturation+rate+trend's points: demandPoints with the
// grid's trend.
func (b *familyBuilder) trendPoints() []ownPoint {
	pts := b.demandPoints(nil)
	for i := range pts {
		t := b.g.Trend
		pts[i].trend = &t
	}
	return pts
}

// minimumPoints are saturation+minimum's points: the fused score with a
// scheduled minimum of each of the grid's floors, open over the whole day.
func (b *familyBuilder) minimumPoints() []ownPoint {
	var pts []ownPoint
	for _, k := range b.g.Floors {
		pts = append(pts, ownPoint{label: "min=" + num(k), terms: fused(b.g.SaturationQueue, b.g.DemandKV),
			minimums: []policy.ScheduledMinimum{{Schedule: "0 0 * * *", Duration: 24 * time.Hour, Demand: k}}})
	}
	return pts
}

// ownPoint is a point of one of the adapter's families: its label, whether it
// is the family's default, and the policy it serves.
type ownPoint struct {
	label    string
	def      bool
	terms    []policy.Term
	peak     *policy.PeakHold
	trend    *policy.Trend
	minimums []policy.ScheduledMinimum
}

// num formats v for a label, rounded to three decimals.
func num(v float64) string { return strconv.FormatFloat(round3(v), 'f', -1, 64) }

// round3 rounds v (>= 0) to three decimals, halves up.
func round3(v float64) float64 {
	r := float64(int64(v*1000+0.5)) / 1000
	return r
}
