package scoreboard

import (
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
	// Floors are the least replicas of the minimum family: a scheduled
	// minimum open over the whole replay (what a schedule known in advance
	// would hold during the trace's hour).
	Floors []float64
	// MinReplicas is every HPA's minReplicas; Behavior every HPA's behavior
	// (simulate.RecommendedBehavior when nil).
	MinReplicas int32
	Behavior    *autoscalingv2.HorizontalPodAutoscalerBehavior
}

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
		Floors:          []float64{2, 4, 6, 8},
		MinReplicas:     1,
	}
}

// The metric names of the families served from a catalog of their own.
const (
	metricAhead = "llm_scoreboard"
)

// Families returns the families of the grid: the baselines (gpu-util,
// keda-queue without and with its cache, queue, kv) and the adapter's (the
// fused saturation, with a demand-rate term, with a held peak, with a
// scheduled minimum).
func Families(g Grid) ([]Family, error) {
	behavior := g.Behavior
	if behavior == nil {
		behavior = simulate.RecommendedBehavior()
	}
	hpaOf := func(name string, m autoscalingv2.MetricSpec) *autoscalingv2.HorizontalPodAutoscaler {
		return simulate.NewHPA(name, g.MinReplicas, behavior.DeepCopy(), m)
	}
	builtin, err := policy.BuiltinCatalog(policy.DefaultSetPoints(), policy.DefaultUnknownSaturation)
	if err != nil {
		return nil, err
	}
	builtinSource := simulate.CatalogSource(builtin)
	var out []Family

	gpu := Family{Name: "gpu-util", Baseline: true,
		Description: "HPA on GPU utilization (Resource nvidia.com/gpu, averageUtilization; NVML's busy fraction via Prometheus every 15 s)"}
	for _, u := range g.GPUUtilization {
		gpu.Points = append(gpu.Points, Point{Label: fmt.Sprintf("%d%%", u), Default: u == 80,
			Autoscaler: simulate.Autoscaler{HPA: hpaOf("gpu-util", simulate.GPUUtilizationMetric(u)), Path: simulate.PathPrometheus, Source: builtinSource}})
	}
	out = append(out, gpu)

	queueFamily := func(name, desc string, path simulate.MetricsPath, baseline bool) Family {
		f := Family{Name: name, Description: desc, Baseline: baseline}
		for _, q := range g.Queue {
			m := simulate.ExternalMetric(simulate.MetricQueueDepth, autoscalingv2.AverageValueMetricType, q)
			f.Points = append(f.Points, Point{Label: "q=" + num(q), Default: q == 5,
				Autoscaler: simulate.Autoscaler{HPA: hpaOf(name, m), Path: path, Source: builtinSource}})
		}
		return f
	}
	out = append(out,
		queueFamily("keda-queue", "KEDA prometheus trigger on the total queue (AverageValue per pod), useCachedMetrics false (KEDA's default): Prometheus every 15 s, queried at each HPA sync", simulate.PathPrometheus, true),
		queueFamily("keda-queue-cached", "the same trigger with useCachedMetrics true: the HPA reads the value KEDA polled every 30 s", simulate.PathKEDA, true),
		queueFamily("queue", "queue-only through the adapter: llm_num_requests_waiting, AverageValue per pod, scraped every 2 s", simulate.PathAdapter, true))

	kv := Family{Name: "kv", Baseline: true, Description: "KV-only through the adapter: llm_kv_cache_usage (pool mean), target Value"}
	for _, v := range g.KV {
		m := simulate.ExternalMetric(simulate.MetricKVCacheUsage, autoscalingv2.ValueMetricType, v)
		kv.Points = append(kv.Points, Point{Label: "kv=" + num(v), Default: v == 0.8,
			Autoscaler: simulate.Autoscaler{HPA: hpaOf("kv", m), Path: simulate.PathAdapter, Source: builtinSource}})
	}
	out = append(out, kv)

	// The adapter's families: each point serves its own policy as
	// llm_scoreboard, for an HPA with target Value 1.
	own := func(name, desc string, points []ownPoint) (Family, error) {
		f := Family{Name: name, Description: desc}
		for _, p := range points {
			c, err := policy.NewCatalog(policy.Policy{Name: metricAhead, Kind: policy.KindMean, UnknownSaturation: policy.DefaultUnknownSaturation,
				HoldLastGood: policy.DefaultHoldLastGood, Terms: p.terms, Peak: p.peak, Minimums: p.minimums})
			if err != nil {
				return f, fmt.Errorf("%s %s: %w", name, p.label, err)
			}
			m := simulate.ExternalMetric(metricAhead, autoscalingv2.ValueMetricType, 1)
			f.Points = append(f.Points, Point{Label: p.label, Default: p.def,
				Autoscaler: simulate.Autoscaler{HPA: hpaOf(name, m), Path: simulate.PathAdapter, Source: simulate.CatalogSource(c)}})
		}
		return f, nil
	}
	fused := func(q, kv float64) []policy.Term {
		return policy.SetPoints{QueueDepth: q, KVCacheUsage: kv}.Terms()
	}
	var sat []ownPoint
	sat = append(sat, ownPoint{label: "q=5,kv=0.8", def: true, terms: fused(5, 0.8)})
	for _, v := range g.SaturationKV {
		sat = append(sat, ownPoint{label: fmt.Sprintf("q=%s,kv=%s", num(g.SaturationQueue), num(v)), terms: fused(g.SaturationQueue, v)})
	}
	demand := func(r float64) []policy.Term {
		return append(fused(g.SaturationQueue, g.DemandKV), policy.Term{Kind: policy.TermDemandRate, SetPoint: r, Window: g.DemandWindow})
	}
	var dem, ahead []ownPoint
	for _, r := range g.DemandRate {
		dem = append(dem, ownPoint{label: "rate=" + num(r), terms: demand(r)})
		peak := g.Peak
		ahead = append(ahead, ownPoint{label: "rate=" + num(r), terms: demand(r), peak: &peak})
	}
	var floors []ownPoint
	for _, k := range g.Floors {
		floors = append(floors, ownPoint{label: "min=" + num(k), terms: fused(g.SaturationQueue, g.DemandKV),
			minimums: []policy.ScheduledMinimum{{Schedule: "0 0 * * *", Duration: 24 * time.Hour, Demand: k}}})
	}
	for _, spec := range []struct {
		name, desc string
		points     []ownPoint
	}{
		{"saturation", "the fused score llm_saturation (mean of max(queue/q, KV/kv)), Value 1, through the adapter", sat},
		{"saturation+rate", fmt.Sprintf("the fused score with a demandRate term (arrivals over %s / requests per second per replica), Value 1", g.DemandWindow), dem},
		{"saturation+rate+peak", fmt.Sprintf("the same with the demand held at its peak over %s (half-life %s) × %s", g.Peak.Window, g.Peak.HalfLife, num(1+g.Peak.Headroom)), ahead},
		{"saturation+minimum", "the fused score with a scheduled minimum of demand open over the whole slice (a known daily peak)", floors},
	} {
		f, err := own(spec.name, spec.desc, spec.points)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

type ownPoint struct {
	label    string
	def      bool
	terms    []policy.Term
	peak     *policy.PeakHold
	minimums []policy.ScheduledMinimum
}

func num(v float64) string { return strconv.FormatFloat(round3(v), 'f', -1, 64) }

func round3(v float64) float64 {
	r := float64(int64(v*1000+0.5)) / 1000
	return r
}
