package prometheus

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Labels names the labels that tie a series to its pod: kube-prometheus-stack's
// PodMonitors and ServiceMonitors write "namespace" and "pod"; some setups
// relabel them (kubernetes_namespace, kubernetes_pod_name).
type Labels struct {
	Namespace string
	Pod       string
}

// DefaultLabels returns namespace and pod.
func DefaultLabels() Labels { return Labels{Namespace: "namespace", Pod: "pod"} }

// Queries say where each engine metric family is found in Prometheus: by its
// own name, restricted by Matchers, unless Series gives a selector for it.
// The zero value reads every family by its own name.
type Queries struct {
	// Matchers are label matchers added to every selector, in PromQL selector
	// syntax (`{cluster="prod"}`): a multi-cluster Thanos or Mimir holds many
	// clusters' namespaces. Empty for none.
	Matchers string
	// Series maps an engine metric family (a name of signals.Extractor.Families,
	// e.g. "vllm:num_requests_waiting"; a histogram's base name) to the series
	// selector that holds it in Prometheus (`vllm_num_requests_waiting` where a
	// pipeline renamed it, or a recording rule `job:vllm_waiting:max`; for a
	// histogram, its _bucket series). The series it selects are read as that
	// family, whatever their name.
	Series map[string]string
}

// labelMatcher is how a string becomes a label matcher value: PromQL
// double-quoted strings take Go's escapes.
func labelMatcher(name, value string) string { return name + "=" + strconv.Quote(value) }

// newParser returns a PromQL parser with the default options.
func newParser() parser.Parser { return parser.NewParser(parser.Options{}) }

// ParseMatchers parses Queries.Matchers: a selector of label matchers without
// a metric name. Errors say what is wrong.
func ParseMatchers(s string) ([]*labels.Matcher, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	ms, err := newParser().ParseMetricSelector(s)
	if err != nil {
		return nil, fmt.Errorf("not a PromQL label selector such as {cluster=\"prod\"}: %w", err)
	}
	for _, m := range ms {
		if m.Name == model.MetricNameLabel {
			return nil, fmt.Errorf("must not match the metric name (%s): the adapter chooses the families", m)
		}
	}
	return ms, nil
}

// ParseSeries parses one selector of Queries.Series. Errors say what is wrong.
func ParseSeries(s string) ([]*labels.Matcher, error) {
	ms, err := newParser().ParseMetricSelector(s)
	if err != nil {
		return nil, fmt.Errorf("not a PromQL series selector such as vllm_num_requests_waiting{job=\"vllm\"}: %w", err)
	}
	return ms, nil
}

// plan is every query of one namespace, built from the catalog's needs and the
// Queries: one range query of the engine series (the default families in one
// selector, each overridden family in its own), and per window and counter
// (or histogram bucket) family one instant query of its increase. One query
// per family, not their union: joining them with "or" made Prometheus hash
// every series of the answer so far once per family (21 families), and a
// 3,000-pod namespace's window query ran past the 5 s timeout on a loaded
// Prometheus 2.42 (2.1-5.9 s, against 0.3-0.4 s per non-empty family alone);
// apart, Prometheus runs them on its cores in parallel and a family no
// engine exports costs an index lookup.
type plan struct {
	labels   Labels
	matchers []*labels.Matcher
	// families lists the families read; overrides the selectors of those that
	// Queries.Series moves.
	families  []signals.Family
	overrides map[string][]*labels.Matcher
	// seriesRange is the range of the engine series query: the state window
	// or the max age, whichever is longer.
	seriesRange time.Duration
	// windows are the distinct window lengths of the catalog's rate and
	// latency terms (and of the clipped state's lost demand), each with the
	// latency histograms its terms read.
	windows []window
}

// window is one window length and the histograms read over it.
type window struct {
	d      time.Duration
	histos map[signals.Histo]bool
}

// query is one Prometheus query of a namespace and how to read its answer.
type query struct {
	// kind labels the self-metrics: "series" or "window".
	kind string
	// expr is the PromQL.
	expr string
	// family, when set, names the family every series of the answer is: an
	// overridden selector's, and a window query's (increase() drops the
	// metric name, and each window query reads one family); otherwise each
	// series carries its own name (__name__).
	family string
	// window is the window of a window query, 0 for the series queries.
	window time.Duration
}

// selector renders a selector of matchers plus the namespace and the extra
// matchers, with an exact metric name in front as people write it.
func (p *plan) selector(namespace string, ms []*labels.Matcher) string {
	name := ""
	parts := make([]string, 0, len(ms)+len(p.matchers)+1)
	for _, m := range ms {
		if name == "" && m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual && model.LegacyValidation.IsValidMetricName(m.Value) {
			name = m.Value
			continue
		}
		parts = append(parts, m.String())
	}
	parts = append(parts, labelMatcher(p.labels.Namespace, namespace))
	for _, m := range p.matchers {
		parts = append(parts, m.String())
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// nameIs matches one metric name.
func nameIs(name string) *labels.Matcher {
	return labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, name)
}

// promDuration renders a duration as PromQL reads it, in milliseconds (every
// Prometheus release parses "90000ms").
func promDuration(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }

// queries returns the queries of one namespace.
func (p *plan) queries(namespace string) []query {
	var out []query
	var names []string
	for _, f := range p.families {
		if f.Kind == signals.FamilyHistogram {
			continue
		}
		if ms, ok := p.overrides[f.Name]; ok {
			out = append(out, query{kind: "series", family: f.Name, expr: p.selector(namespace, ms) + "[" + promDuration(p.seriesRange) + "]"})
			continue
		}
		names = append(names, regexp.QuoteMeta(f.Name))
	}
	if len(names) > 0 {
		m := labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, strings.Join(names, "|"))
		out = slices.Insert(out, 0, query{kind: "series", expr: p.selector(namespace, []*labels.Matcher{m}) + "[" + promDuration(p.seriesRange) + "]"})
	}
	for _, w := range p.windows {
		for _, f := range p.families {
			name := f.Name
			switch {
			case f.Kind == signals.FamilyGauge:
				continue
			case f.Kind == signals.FamilyHistogram && !w.histos[f.Histo]:
				continue
			case f.Kind == signals.FamilyHistogram:
				name += "_bucket"
			}
			ms, ok := p.overrides[f.Name]
			if !ok {
				ms = []*labels.Matcher{nameIs(name)}
			}
			// The family is the query's, not a label the query writes: a
			// label_replace of one onto every series would make two of a
			// pod's series that differ only in an engine label of that
			// name one labelset, and Prometheus fails the whole query
			// ("vector cannot contain metrics with the same labelset").
			out = append(out, query{kind: "window", window: w.d, family: name, expr: fmt.Sprintf("increase(%s[%s])",
				p.selector(namespace, ms), promDuration(w.d))})
		}
	}
	return out
}
