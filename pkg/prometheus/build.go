package prometheus

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// podData is what the queries of a namespace returned for one pod.
type podData struct {
	// series are the engine series (range query), each named as its family.
	series []series
	// windows are, per window length, the increases of the counters and
	// histogram buckets, each named as its family.
	windows map[time.Duration][]signals.Sample
}

// byPod groups an answer's series by pod, keeping those of namespace (all
// namespaces when empty). family, when set, names every series (an
// overridden selector's, a window query's); otherwise a series is read by its
// metric name, as in direct mode. Every other label is the engine's and is
// kept. Series without a pod label are counted in skipped: they cannot be
// joined to a pod.
func byPod(out map[types.NamespacedName]*podData, ss []series, l Labels, namespace, family string, window time.Duration) (skipped int) {
	for _, s := range ss {
		ns, pod := s.labels.Get(l.Namespace), s.labels.Get(l.Pod)
		if pod == "" || ns == "" || (namespace != "" && ns != namespace) {
			skipped++
			continue
		}
		lset := s.labels
		if family != "" {
			lset = labels.NewBuilder(lset).Set(model.MetricNameLabel, family).Labels()
		}
		key := types.NamespacedName{Namespace: ns, Name: pod}
		d := out[key]
		if d == nil {
			d = &podData{}
			out[key] = d
		}
		if window == 0 {
			d.series = append(d.series, series{labels: lset, points: s.points})
			continue
		}
		if d.windows == nil {
			d.windows = map[time.Duration][]signals.Sample{}
		}
		last := s.points[len(s.points)-1]
		d.windows[window] = append(d.windows[window], signals.Sample{Labels: lset, Value: last.v, T: last.t})
	}
	return skipped
}

// buildOptions say how a pod's answer becomes a History.
type buildOptions struct {
	extractor *signals.Extractor
	history   history.HistoryOptions
	// keys are the window aggregates to build (Needs.Windows and the lost
	// demand's window per model).
	keys []history.WindowKey
	// interval is Prometheus's scrape interval: a series whose newest sample is
	// more than 1.5 intervals older than the pod's newest has ended (a re-created
	// pod's predecessor, a removed monitor), as a staleness marker would say.
	interval time.Duration
	// now is the evaluation time: each newest reading's Time.
	now time.Time
	// gauge names the gauge families (which choose a window reading's dialect).
	gauge map[string]bool
	// names are the series names of the families read (a histogram's
	// _bucket, _count and _sum): a series of another name is not kept.
	names map[string]bool
}

// newBuildOptions returns the options for an extractor, with its gauges indexed.
func newBuildOptions(e *signals.Extractor, h history.HistoryOptions, keys []history.WindowKey, interval time.Duration) buildOptions {
	o := buildOptions{extractor: e, history: h, keys: keys, interval: interval, gauge: map[string]bool{}, names: map[string]bool{}}
	for _, f := range e.Families() {
		o.names[f.Name] = true
		switch f.Kind {
		case signals.FamilyGauge:
			o.gauge[f.Name] = true
		case signals.FamilyHistogram:
			o.names[f.Name+"_bucket"], o.names[f.Name+"_count"], o.names[f.Name+"_sum"] = true, true, true
		}
	}
	return o
}

// errNoSeries: Prometheus has no engine series of the pod in the range.
var errNoSeries = errors.New("no engine series in Prometheus")

// build turns one pod's answer into a History: the newest sample of each live
// series is the newest Reading (built by the extractor's own rules, as old as
// its oldest sample); the samples grouped by their scrape timestamp are the
// readings the engine states are judged on; the window increases are the
// window aggregates. Errors: errNoSeries, or the extractor's
// (signals.ErrNoEngineMetrics when the pod's series hold no queue depth or KV
// usage).
func build(d *podData, o buildOptions) (*history.History, error) {
	if d == nil || len(d.series) == 0 {
		return nil, errNoSeries
	}
	var newest time.Time
	for _, s := range d.series {
		if t := s.points[len(s.points)-1].t; t.After(newest) {
			newest = t
		}
	}
	latest := make([]signals.Sample, 0, len(d.series))
	live := make([]series, 0, len(d.series))
	for _, s := range d.series {
		last := s.points[len(s.points)-1]
		if o.interval > 0 && newest.Sub(last.t) > o.interval*3/2 {
			continue
		}
		latest = append(latest, signals.Sample{Labels: s.labels, Value: last.v, T: last.t})
		live = append(live, s)
	}
	r, err := o.extractor.ExtractSamples(latest)
	if err != nil {
		return nil, err
	}
	r.Time = o.now

	// Engine states: the readings of each scrape within the state window,
	// judged by the History's own rules.
	readings := scrapes(live, o.extractor)
	var facts []history.EngineFacts
	if len(readings) > 0 {
		facts = history.NewHistory(history.HistoryOptions{StateWindow: o.history.StateWindow, MaxReadings: o.history.MaxReadings}, readings...).Facts()
	}

	var windows []history.Window
	for _, k := range o.keys {
		inc, ok := d.windows[k.Window]
		if !ok {
			continue
		}
		// The newest gauges choose the dialect and spelling as for the
		// newest reading; only the increases count.
		samples := slices.Clip(inc)
		for _, s := range latest {
			if o.gauge[s.Labels.Get(model.MetricNameLabel)] {
				samples = append(samples, s)
			}
		}
		ri, err := o.extractor.ExtractSamples(samples)
		if err != nil {
			continue
		}
		windows = append(windows, history.WindowOf(k, k.Window, &ri))
	}
	return history.NewSnapshot(&r, windows, facts, o.history), nil
}

// scrapes groups series' samples by timestamp, one Prometheus scrape each,
// and builds a reading of each, oldest first. A scrape without the families
// that make a reading (a monitor that keeps only some) is skipped.
func scrapes(ss []series, e *signals.Extractor) []*signals.Reading {
	byTime := map[int64][]signals.Sample{}
	for _, s := range ss {
		for _, p := range s.points {
			ms := p.t.UnixMilli()
			byTime[ms] = append(byTime[ms], signals.Sample{Labels: s.labels, Value: p.v, T: p.t})
		}
	}
	times := make([]int64, 0, len(byTime))
	for t := range byTime {
		times = append(times, t)
	}
	slices.Sort(times)
	var out []*signals.Reading
	for _, t := range times {
		r, err := e.ExtractSamples(byTime[t])
		if err != nil {
			continue
		}
		r.Time = time.UnixMilli(t)
		out = append(out, &r)
	}
	return out
}

// ReadingsOf reads a saved answer of /api/v1/query (its JSON body: a vector,
// or a range selector's matrix) as explain does, with the server's decoder
// (decodeStream; each series' newest maxPointsPerSeries points), for every
// namespace: per pod (by the namespace and pod labels l name), one Reading per
// scrape timestamp, oldest first, each built by the extractor's rules from the
// series sampled then; a vector answer gives one reading per pod. A pod whose
// series hold no engine metric is in errs (signals.ErrNoEngineMetrics);
// series without the pod labels are not read. A series is read by its metric
// name, as the server reads a series answer: one without (a window query's
// increase, which PromQL leaves nameless) names no family.
// err, for a body the server would not read, is decodeStream's: a *QueryError
// for Prometheus's error answer, else one wrapping ErrResponse.
func ReadingsOf(body []byte, l Labels, e *signals.Extractor) (readings map[types.NamespacedName][]*signals.Reading, errs map[types.NamespacedName]error, err error) {
	a, err := decodeStream(bytes.NewReader(body), decodeLimits{maxPoints: maxPointsPerSeries}, nil)
	if err != nil {
		return nil, nil, err
	}
	pods := map[types.NamespacedName]*podData{}
	byPod(pods, a.series, l, "", "", 0)
	readings, errs = map[types.NamespacedName][]*signals.Reading{}, map[types.NamespacedName]error{}
	for k, d := range pods {
		rs := scrapes(d.series, e)
		if len(rs) == 0 {
			var all []signals.Sample
			for _, s := range d.series {
				last := s.points[len(s.points)-1]
				all = append(all, signals.Sample{Labels: s.labels, Value: last.v, T: last.t})
			}
			_, err := e.ExtractSamples(all)
			if err == nil {
				err = fmt.Errorf("%w: no scrape holds them all", signals.ErrNoEngineMetrics)
			}
			errs[k] = err
			continue
		}
		readings[k] = rs
	}
	return readings, errs, nil
}

// why says, for a message, why a pod has no history.
func why(err error, rng time.Duration) string {
	if errors.Is(err, errNoSeries) {
		return fmt.Sprintf("no engine series in Prometheus for this pod in the last %s", rng)
	}
	return "Prometheus series unusable: " + excerpt.String(err.Error(), 300)
}
