package signals

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
)

// Sample is one series' newest value as a time-series database returns it (a
// Prometheus query result), rather than a line of an exposition body.
type Sample struct {
	// Labels are the series' labels, its metric name (__name__) included.
	Labels labels.Labels
	// Value is the sample's value, unchecked (NaN and ±Inf are rejected per
	// series, as in a body).
	Value float64
	// T is the sample's own timestamp; zero when unknown.
	T time.Time
}

// ExtractSamples builds a Reading from series samples by every rule of Extract:
// the families read, the dialect and spelling chosen, engine and model labels,
// per-engine fallbacks between alternatives (a renamed metric is never counted
// twice), duplicates folded by DuplicateOutcome's rule (the newest sample, then
// the maximum), unlabelled aggregates beside
// per-engine series ignored, SumLabel parts added, histograms from their
// _bucket (and _count) series, and validity per series. Only the series' labels
// matter, never their order. Gateway series get the same validity and duplicate
// rules. The reading's SampleTime is the oldest timestamp of the samples used;
// its Time is left zero for the caller.
//
// Errors (wrapped): ErrNoEngineMetrics when no supported engine's queue depth
// or KV-cache usage is among the samples; ErrParse for a histogram bucket whose
// le is not a number; ErrTooManySeries and ErrTooManyEngines past the
// extractor's bounds.
func (e *Extractor) ExtractSamples(samples []Sample) (Reading, error) {
	var raw []rawSample
	var gateway []gatewaySample
	var flow []string
	read := 0
	for i := range samples {
		s := &samples[i]
		var t int64
		if !s.T.IsZero() {
			t = sampleMillis(s.T.UnixMilli())
		}
		if gs, ok := e.gatewaySeries(&s.Labels, s.Value, t); ok {
			if len(gateway) >= e.opts.MaxSeries {
				return Reading{}, fmt.Errorf("%w: more than %d series of the gateway queue metrics read", ErrTooManySeries, e.opts.MaxSeries)
			}
			gateway = append(gateway, gs)
			continue
		}
		if name := s.Labels.Get(model.MetricNameLabel); len(e.index.gateway) > 0 && isFlowControlFamily(name) {
			if len(flow) < maxFlowFamilies && !slices.Contains(flow, name) {
				flow = append(flow, name)
			}
			continue
		}
		n := len(raw)
		var ok bool
		if raw, ok = e.collect(raw, &s.Labels, s.Value, t, i); !ok {
			return Reading{}, fmt.Errorf("%w: bucket of %s with le=%q", ErrParse,
				excerpt.String(s.Labels.Get(model.MetricNameLabel), 80), excerpt.String(s.Labels.Get(model.BucketLabel), 40))
		}
		if len(raw) > n {
			read++
		}
		if read > e.opts.MaxSeries {
			return Reading{}, fmt.Errorf("%w: more than %d series of the engine metric families read", ErrTooManySeries, e.opts.MaxSeries)
		}
	}
	if len(raw) == 0 && (len(gateway) > 0 || len(flow) > 0) {
		// A gateway (endpoint picker): its queue, or only its other
		// flow-control gauges while every flow is idle; no engine.
		r := Reading{Dialect: DialectGateway, FlowControl: flow}
		r.Gateway, r.SampleTime = dedupeGateway(&r, gateway, samples, e)
		return r, nil
	}
	b := e.bufs.Get().(*scanBuffers)
	defer e.putBuffers(b)
	r, err := e.fold(raw, filterStats{}, b)
	if err != nil {
		return Reading{}, err
	}
	r.Gateway, _ = dedupeGateway(&r, gateway, samples, e)
	r.FlowControl = flow
	return r, nil
}

// scrapeTargetLabels are the labels a time-series database adds per scrape
// target rather than per series: the Prometheus Operator's job, instance,
// endpoint, service and container target labels, and the HA-replica labels of
// Prometheus pairs and Thanos. Two monitors of one endpoint picker (a
// PodMonitor beside the chart's ServiceMonitor) give the same series with
// different values of these only.
var scrapeTargetLabels = []string{"job", "instance", "endpoint", "service", "container", "prometheus", "prometheus_replica", "__replica__"}

// dedupeGateway folds gateway series from a time-series database (with the
// scrape-target labels dropped, so that two monitors of one endpoint picker
// are duplicates) by foldGateway's rules, and returns the oldest sample time
// among the gateway samples (zero when none carries one).
func dedupeGateway(r *Reading, gateway []gatewaySample, samples []Sample, e *Extractor) ([]GatewaySeries, time.Time) {
	var oldest time.Time
	for i := range samples {
		name := samples[i].Labels.Get(model.MetricNameLabel)
		if t := samples[i].T; !t.IsZero() && (e.index.gateway[name] || isFlowControlFamily(name)) && (oldest.IsZero() || t.Before(oldest)) {
			oldest = t
		}
	}
	return foldGateway(r, gateway, true), oldest
}

// foldGateway applies the validity and duplicate rules to gateway series, as
// the engines' series get them: a rejected value (GatewaySeries.Invalid) is
// counted in r.Invalid and warned about; duplicates (the same metric and
// labels, the scrape-target labels dropped first when dropTarget is set)
// follow DuplicateOutcome's rule, counted in r.Duplicates, and a rejected
// duplicate gives way to a valid one. It returns a new slice, nil when none.
func foldGateway(r *Reading, series []gatewaySample, dropTarget bool) []GatewaySeries {
	if len(series) == 0 {
		return nil
	}
	out := make([]GatewaySeries, 0, len(series))
	index := make(map[string]int, len(series))
	var (
		at     []int64 // the sample time of out[i]
		n      []int   // valid series folded into out[i] at that time
		differ []bool
	)
	for i := range series {
		g := &series[i]
		if dropTarget {
			dropTargetLabels(g.Labels)
		}
		if g.Invalid != "" {
			if r.Invalid == nil {
				r.Invalid = map[Reason]int{}
			}
			r.Invalid[g.Invalid]++
			r.warn(fmt.Sprintf("rejected gateway series %s%s = %g: %s", g.Metric, describeLabels(g.Labels), g.raw, g.Invalid))
		}
		k := g.key()
		j, dup := index[k]
		if !dup {
			index[k] = len(out)
			out = append(out, g.GatewaySeries)
			at, n, differ = append(at, g.t), append(n, 1), append(differ, false)
			continue
		}
		cur := &out[j]
		switch {
		case g.Invalid != "":
			// A rejected duplicate never replaces what another says.
		case cur.Invalid != "":
			*cur, at[j], n[j] = g.GatewaySeries, g.t, 1
		case g.t != 0 && at[j] != 0 && g.t < at[j]:
			r.duplicates(DuplicateOlder, 1, "gateway "+g.Metric)
		case g.t != 0 && at[j] != 0 && g.t > at[j]:
			r.duplicates(DuplicateOlder, n[j], "gateway "+g.Metric)
			*cur, at[j], n[j], differ[j] = g.GatewaySeries, g.t, 1, false
		case g.Value != cur.Value:
			differ[j] = true
			cur.Value = max(cur.Value, g.Value)
			n[j]++
		default:
			n[j]++
		}
	}
	for j := range out {
		if differ[j] {
			r.duplicates(DuplicateDisagree, 1, "")
			r.warn(fmt.Sprintf("%d duplicate gateway series %s%s disagree; using their maximum %g", n[j], out[j].Metric, describeLabels(out[j].Labels), out[j].Value))
		}
	}
	return out
}

// describeLabels renders labels as {k="v",...}, sorted, for warnings.
func describeLabels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteString("=")
		b.WriteString(strconv.Quote(m[k]))
	}
	b.WriteByte('}')
	return b.String()
}

func dropTargetLabels(m map[string]string) {
	for _, l := range scrapeTargetLabels {
		delete(m, l)
	}
}

// key is the series' identity: its metric and sorted labels.
func (g *GatewaySeries) key() string {
	names := make([]string, 0, len(g.Labels))
	for k := range g.Labels {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString(g.Metric)
	for _, k := range names {
		b.WriteByte(0)
		b.WriteString(k)
		b.WriteByte(1)
		b.WriteString(g.Labels[k])
	}
	return b.String()
}

// FamilyType says how a family's series are read.
type FamilyType int

// The kinds of family.
const (
	// FamilyGauge: a gauge, read as its value.
	FamilyGauge FamilyType = iota
	// FamilyCounter: a cumulative counter; windows read its increase.
	FamilyCounter
	// FamilyHistogram: a histogram; Name is its base name, windows read the
	// increase of its Name_bucket series.
	FamilyHistogram
)

// Family is one metric family the extractor reads, in one spelling.
type Family struct {
	// Name is the family's name as an engine exposes it
	// (e.g. "vllm:num_requests_waiting"; a histogram's base name).
	Name string
	// Kind is how its series are read.
	Kind FamilyType
	// Histo is the latency histogram a FamilyHistogram holds.
	Histo Histo
}

// Families returns every family the extractor reads (histograms only when it
// reads them), each spelling of each dialect once, in table order, then the
// gateway queue metrics of ExtractOptions.GatewayMetrics (gauges): the names a
// time-series database must be asked for to build the same Readings.
func (e *Extractor) Families() []Family {
	var out []Family
	seen := map[string]bool{}
	add := func(name string, k FamilyType, h Histo) {
		if !seen[name] {
			seen[name] = true
			out = append(out, Family{Name: name, Kind: k, Histo: h})
		}
	}
	for d := range e.dialects {
		dia := &e.dialects[d]
		for k := range dia.spellings() {
			for s := range NumSignals {
				kind := FamilyGauge
				if s.IsCounter() {
					kind = FamilyCounter
				}
				for _, set := range dia.Sources[s] {
					for _, src := range set.Sources {
						add(dia.spell(src.Metric, k), kind, 0)
					}
				}
			}
			if !e.opts.Histograms {
				continue
			}
			for h := range NumHistos {
				for _, hs := range dia.Histos[h] {
					add(dia.spell(hs.Metric, k), FamilyHistogram, h)
				}
			}
		}
	}
	for _, metric := range e.opts.GatewayMetrics {
		for _, g := range gatewayReadNames(metric) {
			add(g, FamilyGauge, 0)
		}
	}
	if len(e.opts.GatewayMetrics) > 0 {
		for _, g := range flowControlEvidence {
			add(g, FamilyGauge, 0)
		}
	}
	return out
}

// flowControlEvidence are the flow-control gauges an endpoint picker with flow
// control on keeps exporting while every flow is idle and its queue series
// are deleted (Reading.FlowControl): the pool saturation, upstream
// (gateway-api-inference-extension pkg/epp/metrics) and in llm-d's mirror. A
// time-series database is asked for them beside the gateway queue metrics.
var flowControlEvidence = []string{"inference_extension_flow_control_pool_saturation", "llm_d_epp_flow_control_pool_saturation"}
