package manifests

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// The alert tests below are what `promtool test rules` does, on the rules a user
// applies (rendered/monitoring.yaml, which the chart renders identically): synthetic
// series are loaded, every alert's expression is evaluated by Prometheus's own engine
// every 30s over the whole run, and an alert fires once its expression has held for its
// `for`. (promtool's unit-test runner is in a main package; promqltest would add a
// hundred modules to the adapter's go.mod.)

const (
	sampleStep = 15 * time.Second // the scrape interval of the synthetic series
	evalStep   = 30 * time.Second // Prometheus's rule evaluation interval
	runLength  = 3 * time.Hour
)

// synth is one synthetic series: value(i) for the sample at i × sampleStep; NaN means
// no sample.
type synth struct {
	lset  labels.Labels
	value func(i int) float64
}

// engine labels one engine pod's series as the Prometheus Operator's target labels do.
func engine(name string, extra ...string) labels.Labels {
	return labels.FromStrings(append([]string{"__name__", name, "namespace", "llm", "pod", "vllm-0", "model_name", "m"}, extra...)...)
}

// at returns the sample index at minute m.
func at(m float64) int { return int(m * float64(time.Minute) / float64(sampleStep)) }

// counter returns a counter series whose rate per second is rate(i) at sample i.
func counter(lset labels.Labels, rate func(i int) float64) synth {
	n := int(runLength / sampleStep)
	v := make([]float64, n+1)
	for i := 1; i <= n; i++ {
		v[i] = v[i-1] + rate(i)*sampleStep.Seconds()
	}
	return synth{lset: lset, value: func(i int) float64 { return v[i] }}
}

// ttft returns the TTFT histogram's bucket le="2.5" and count series: perSecond requests,
// a share slow(i) of them slower than 2.5s.
func ttft(perSecond float64, slow func(i int) float64) []synth {
	return []synth{
		counter(engine("vllm:time_to_first_token_seconds_bucket", "le", "2.5"), func(i int) float64 { return perSecond * (1 - slow(i)) }),
		counter(engine("vllm:time_to_first_token_seconds_bucket", "le", "+Inf"), func(int) float64 { return perSecond }),
		counter(engine("vllm:time_to_first_token_seconds_count"), func(int) float64 { return perSecond }),
	}
}

func gauge(lset labels.Labels, f func(i int) float64) synth { return synth{lset: lset, value: f} }

func constant(v float64) func(int) float64 { return func(int) float64 { return v } }

// healthyEngine is a busy engine doing its job: the KV cache full (0.97), a short queue
// moving between 0 and 4, a preemption every half hour, 5 requests a second with
// 99.5 % of first tokens within 2.5s.
func healthyEngine() []synth {
	return append([]synth{
		gauge(engine("vllm:kv_cache_usage_perc"), constant(0.97)),
		gauge(engine("vllm:num_requests_waiting"), func(i int) float64 { return math.Round(2 + 2*math.Sin(float64(i)/7)) }),
		counter(engine("vllm:num_preemptions_total"), func(i int) float64 {
			if i%at(30) == 0 {
				return 1 / sampleStep.Seconds()
			}
			return 0
		}),
	}, ttft(5, constant(0.005))...)
}

// replace returns series with those named like each of with replaced by it.
func replace(series []synth, with ...synth) []synth {
	out := slices.Clone(series)
	for _, w := range with {
		i := slices.IndexFunc(out, func(s synth) bool { return labels.Equal(s.lset, w.lset) })
		if i < 0 {
			out = append(out, w)
		} else {
			out[i] = w
		}
	}
	return out
}

func TestAlertsOnSeries(t *testing.T) {
	pr := only[*prometheusRule](t, decodeFile(t, monitoringPath), adapterName)
	requests := func(result string, lset ...string) labels.Labels {
		return labels.FromStrings(append([]string{"__name__", "saturation_adapter_requests_total", "namespace", "saturation-adapter", "metric", "llm_saturation", "result", result}, lset...)...)
	}
	ok := counter(requests("ok"), constant(4.0/60))
	for _, tc := range []struct {
		name   string
		series []synth
		want   []string // the alerts that must fire; every other must not
	}{
		{"healthy busy engine: KV cache full, short queue", healthyEngine(), nil},
		{"KV cache at 0.99 with a steady queue of 20 (the HPA keeping up)",
			replace(healthyEngine(),
				gauge(engine("vllm:kv_cache_usage_perc"), constant(0.99)),
				gauge(engine("vllm:num_requests_waiting"), func(i int) float64 { return 20 + float64(i%5) - 2 })), nil},
		{"queue growing 2 a minute with the KV cache full, from minute 60",
			replace(healthyEngine(),
				gauge(engine("vllm:kv_cache_usage_perc"), func(i int) float64 { return 0.95 + 0.04*math.Min(1, float64(i)/float64(at(60))) }),
				gauge(engine("vllm:num_requests_waiting"), func(i int) float64 { return 2 + math.Max(0, float64(i-at(60)))*2*sampleStep.Minutes() })),
			[]string{"LLMEngineSaturated"}},
		{"queue growing while the KV cache has room (the engine is not the limit)",
			replace(healthyEngine(),
				gauge(engine("vllm:kv_cache_usage_perc"), constant(0.4)),
				gauge(engine("vllm:num_requests_waiting"), func(i int) float64 { return 2 + math.Max(0, float64(i-at(60)))*2*sampleStep.Minutes() })),
			nil},
		{"a burst of 30 preemptions in one minute",
			replace(healthyEngine(), counter(engine("vllm:num_preemptions_total"), func(i int) float64 {
				if i >= at(60) && i < at(61) {
					return 0.5
				}
				return 0
			})), nil},
		{"0.2 preemptions a second for 40 minutes",
			replace(healthyEngine(), counter(engine("vllm:num_preemptions_total"), func(i int) float64 {
				if i >= at(60) && i < at(100) {
					return 0.2
				}
				return 0
			})), []string{"LLMEnginePreemptions"}},
		{"one slow first token on a quiet model",
			replace(healthyEngine(), ttft(0.01, func(i int) float64 {
				if i == at(90) {
					return 1
				}
				return 0
			})...), nil},
		{"30 % of first tokens slow at 2 requests a second for 90 minutes",
			replace(healthyEngine(), ttft(2, func(i int) float64 {
				if i >= at(60) && i < at(150) {
					return 0.3
				}
				return 0.001
			})...), []string{"LLMEngineTTFTSLOBurn"}},
		{"one request for a mistyped metric name",
			append(healthyEngine(), ok, counter(requests("not_found", "metric", "llm_saturaton"), func(i int) float64 {
				if i == at(60) {
					return 1 / sampleStep.Seconds()
				}
				return 0
			})), nil},
		{"an HPA polling a mistyped metric name every 15s",
			append(healthyEngine(), ok, counter(requests("not_found", "metric", "llm_saturaton"), func(i int) float64 {
				if i >= at(60) {
					return 1 / sampleStep.Seconds()
				}
				return 0
			})), []string{"SaturationAdapterValuesNotServed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := firedAlerts(t, pr, tc.series)
			if !slices.Equal(got, tc.want) {
				t.Errorf("alerts fired %q, want %q", got, tc.want)
			}
		})
	}
}

// firedAlerts evaluates every alert of pr on series every evalStep over the run and
// returns, sorted, those whose expression held for their `for`.
func firedAlerts(t *testing.T, pr *prometheusRule, series []synth) []string {
	t.Helper()
	eng := promql.NewEngine(promql.EngineOpts{
		Logger: slog.New(slog.DiscardHandler), MaxSamples: 10_000_000, Timeout: time.Minute,
		LookbackDelta: 5 * time.Minute,
	})
	store := memStorage(series)
	start := time.Unix(0, 0)
	var fired []string
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			hold := time.Duration(0)
			if r.For != "" {
				d, err := model.ParseDuration(r.For)
				if err != nil {
					t.Fatalf("%s: for %q: %v", r.Alert, r.For, err)
				}
				hold = time.Duration(d)
			}
			pendingSince := map[string]time.Time{}
			didFire := false
			for ts := start; !ts.After(start.Add(runLength)) && !didFire; ts = ts.Add(evalStep) {
				q, err := eng.NewInstantQuery(context.Background(), store, nil, r.Expr, ts)
				if err != nil {
					t.Fatalf("%s: %v", r.Alert, err)
				}
				res := q.Exec(context.Background())
				if res.Err != nil {
					t.Fatalf("%s at %s: %v", r.Alert, ts.Sub(start), res.Err)
				}
				vec, err := res.Vector()
				if err != nil {
					t.Fatalf("%s: %v", r.Alert, err)
				}
				active := map[string]bool{}
				for _, s := range vec {
					key := s.Metric.String()
					active[key] = true
					if _, ok := pendingSince[key]; !ok {
						pendingSince[key] = ts
					}
					if ts.Sub(pendingSince[key]) >= hold {
						didFire = true
					}
				}
				for k := range pendingSince {
					if !active[k] {
						delete(pendingSince, k)
					}
				}
				q.Close()
			}
			if didFire {
				fired = append(fired, r.Alert)
			}
		}
	}
	sort.Strings(fired)
	return fired
}

// memStorage serves synthetic series to the PromQL engine.
type memStorage []synth

func (m memStorage) Querier(mint, maxt int64) (storage.Querier, error) {
	return &storage.MockQuerier{SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
		var out []storage.Series
		n := int(runLength / sampleStep)
		for _, s := range m {
			if !matches(s.lset, ms) {
				continue
			}
			var samples []chunks.Sample
			for i := 0; i <= n; i++ {
				ts := int64(i) * sampleStep.Milliseconds()
				if ts < mint || ts > maxt {
					continue
				}
				if v := s.value(i); !math.IsNaN(v) {
					samples = append(samples, floatSample{t: ts, f: v})
				}
			}
			out = append(out, storage.NewListSeries(s.lset, samples))
		}
		sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].Labels(), out[j].Labels()) < 0 })
		return &seriesList{series: out, i: -1}
	}}, nil
}

func matches(lset labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lset.Get(m.Name)) {
			return false
		}
	}
	return true
}

// seriesList is a storage.SeriesSet over a slice.
type seriesList struct {
	series []storage.Series
	i      int
}

func (s *seriesList) Next() bool                        { s.i++; return s.i < len(s.series) }
func (s *seriesList) At() storage.Series                { return s.series[s.i] }
func (s *seriesList) Err() error                        { return nil }
func (s *seriesList) Warnings() annotations.Annotations { return nil }

// floatSample is a float sample (chunks.Sample).
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                      { return s.t }
func (s floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                    { return s.f }
func (s floatSample) H() *histogram.Histogram       { return nil }
func (s floatSample) FH() *histogram.FloatHistogram { return nil }
func (s floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample           { return s }
