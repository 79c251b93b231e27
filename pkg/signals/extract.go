package signals

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
)

// Errors of Extract, for errors.Is. Each is wrapped with the detail.
var (
	// ErrNoEngineMetrics: the body parses but carries no queue depth or KV-cache
	// usage metric of any supported engine.
	ErrNoEngineMetrics = errors.New("no LLM engine saturation metrics found")
	// ErrParse: a line of a family the adapter reads is not valid exposition text,
	// or the body is not exposition text at all.
	ErrParse = errors.New("parsing exposition")
	// ErrTooManySeries: more series of the families read than
	// ExtractOptions.MaxSeries.
	ErrTooManySeries = errors.New("too many series")
	// ErrTooManyEngines: more engines than ExtractOptions.MaxEngines.
	ErrTooManyEngines = errors.New("too many engines")
)

// Reason says why a series was rejected.
type Reason string

// The reasons a series is rejected; they label the adapter's
// invalid-samples counter.
const (
	ReasonNaN        Reason = "nan"
	ReasonInf        Reason = "inf"
	ReasonNegative   Reason = "negative"
	ReasonAboveRange Reason = "above_range"
	// ReasonMalformed: a histogram whose buckets are not cumulative, or without
	// its +Inf bucket.
	ReasonMalformed Reason = "malformed"
	// ReasonInconsistent: a series larger than another that includes it
	// (vLLM's deferred waits above num_requests_waiting): the signal it
	// would be subtracted from drops out for the engine.
	ReasonInconsistent Reason = "inconsistent"
)

// Reasons lists every Reason, in documentation order.
func Reasons() []Reason {
	return []Reason{ReasonNaN, ReasonInf, ReasonNegative, ReasonAboveRange, ReasonMalformed, ReasonInconsistent}
}

// The defaults of ExtractOptions.
const (
	// DefaultMaxSeries bounds the series of the families read per body. A vLLM
	// pod with 8 data-parallel engines and every histogram has about 600.
	DefaultMaxSeries = 20000
	// DefaultMaxEngines bounds the engines per pod (data-parallel ranks, Triton
	// models). vLLM's largest data-parallel deployments run 64 ranks per node.
	DefaultMaxEngines = 256
	// maxLineBytes bounds one series line of a family the adapter reads.
	maxLineBytes = 64 << 10
	// maxLabelBytes bounds the model names and engine IDs kept from labels;
	// longer ones are cut (and said so).
	maxLabelBytes = 256
	// maxModels bounds the distinct model names kept per reading.
	maxModels = 16
)

// ExtractOptions configure an Extractor.
type ExtractOptions struct {
	// Histograms makes the extractor read latency histograms (TTFT, end-to-end
	// and inter-token latency), which only latency guardrail terms need; without
	// it their lines are skipped unparsed. It also turns the series cache on
	// (see seriesCache), which pays only for the hundreds of histogram series.
	Histograms bool
	// MaxSeries bounds the series of the families read per body (0:
	// DefaultMaxSeries); more is ErrTooManySeries.
	MaxSeries int
	// MaxEngines bounds the engines per pod (0: DefaultMaxEngines); more is
	// ErrTooManyEngines.
	MaxEngines int
	// GatewayMetrics are gateway queue gauges to read (a policy's gateway input,
	// e.g. DefaultGatewayQueueMetric): their series land in Reading.Gateway, and
	// a body with them but no engine metric is a gateway reading, not an error.
	GatewayMetrics []string
}

// Extractor reads /metrics bodies. It is immutable (but for a bounded cache of
// histogram layouts) and safe for concurrent use.
type Extractor struct {
	opts     ExtractOptions
	dialects []Dialect
	index    sourceIndex
	bufs     sync.Pool // *scanBuffers
	layouts  layoutCache
	// names, sources and strs let readings share what is the same in every
	// scrape: source names, Sources maps, engine IDs and model names.
	names   sourceNames
	sources sourcesCache
	strs    stringCache
	series  seriesCache
}

// NewExtractor returns an Extractor for the built-in engine dialects that reads
// every family it knows, histograms included (explain, tests).
func NewExtractor() *Extractor { return NewExtractorWith(ExtractOptions{Histograms: true}) }

// NewExtractorWith returns an Extractor for the built-in engine dialects with
// the given options.
func NewExtractorWith(opts ExtractOptions) *Extractor {
	if opts.MaxSeries <= 0 {
		opts.MaxSeries = DefaultMaxSeries
	}
	if opts.MaxEngines <= 0 {
		opts.MaxEngines = DefaultMaxEngines
	}
	d := builtinDialects()
	e := &Extractor{opts: opts, dialects: d, index: newSourceIndex(d, opts.Histograms, opts.GatewayMetrics), names: newSourceNames(d)}
	e.series.off = !opts.Histograms
	e.bufs.New = func() any { return &scanBuffers{} }
	return e
}

// maxPooledLines and maxPooledSamples bound the buffers kept for reuse: a
// pod's huge body must not stay in memory once read (issue 20).
const (
	maxPooledLines   = 1 << 20
	maxPooledSamples = 16 << 10
)

// putBuffers returns b to the pool unless a huge body grew it.
func (e *Extractor) putBuffers(b *scanBuffers) {
	if b.lines.Cap() > maxPooledLines || cap(b.samples) > maxPooledSamples || cap(b.fast) > maxPooledSamples {
		return
	}
	e.bufs.Put(b)
}

// scanBuffers are the per-call buffers of Extract, pooled.
type scanBuffers struct {
	lines   bytes.Buffer
	lineNos []int
	samples []rawSample
	gateway []gatewaySample
	lset    labels.Labels
	// flow lists the flow-control families seen that are not read (see
	// Reading.FlowControl); gwOldest is the oldest gateway sample timestamp
	// (milliseconds, 0: none).
	flow     []string
	gwOldest int64
	// What fold builds and drops: engines by ID, their builds (reused with
	// their cells and maps), engine IDs, model names, histogram bounds.
	engines map[string]*engineBuild
	builds  []*engineBuild
	nBuilds int
	ids     []string
	models  map[string]struct{}
	// firstModel holds, per engine ID, the first model seen (splitModels).
	firstModel map[string]string
	bounds     []float64
	key        []byte
	// The series cache's part (see seriesCache): fast holds the samples of the
	// lines it answered; accepted counts the lines read; global and offsets
	// give, per line handed to textparse, its place among the lines read and
	// its offset in lines; firstSample its first sample in samples and
	// learnable whether the cache may learn it.
	fast        []rawSample
	accepted    int
	global      []int
	offsets     []int
	firstSample []int
	learnable   []bool
	// Per series the parser read: the filtered line it starts on and the
	// length of its series bytes (name and label set as the parser consumed
	// them); aligned, whether lines and series matched one to one (see
	// parse); eofAt, the indices of the "# EOF" lines among the filtered ones.
	entryLine []int
	seriesLen []int
	aligned   bool
	eofAt     []int
}

// mergeFast merges the samples of the lines the series cache answered into
// samples, in the order of the lines, as parse would have appended them.
func (b *scanBuffers) mergeFast() {
	for i := range b.samples {
		b.samples[i].line = b.global[b.samples[i].line]
	}
	if len(b.fast) == 0 {
		return
	}
	parsed := len(b.samples)
	b.samples = append(b.samples, b.fast...) // room; then merge from the back
	i, j := parsed-1, len(b.fast)-1
	for k := len(b.samples) - 1; j >= 0; k-- {
		if i >= 0 && b.samples[i].line > b.fast[j].line {
			b.samples[k] = b.samples[i]
			i--
		} else {
			b.samples[k] = b.fast[j]
			j--
		}
	}
}

// newBuild returns an empty engineBuild for id, reusing one of an earlier
// extraction (its cells' and maps' memory).
func (b *scanBuffers) newBuild(id string) *engineBuild {
	if b.nBuilds == len(b.builds) {
		b.builds = append(b.builds, &engineBuild{})
	}
	eb := b.builds[b.nBuilds]
	b.nBuilds++
	eb.reset(id)
	return eb
}

// lineNo returns the body's line number of the i-th filtered line; 0 when
// unknown (the tests' reference extraction parses a whole body unfiltered).
func (b *scanBuffers) lineNo(i int) int {
	if len(b.lineNos) == 0 {
		return 0
	}
	return b.lineNos[min(i, len(b.lineNos)-1)]
}

// rawSample is one series of interest, as read.
type rawSample struct {
	scalar   bool
	sref     sourceRef
	href     histoRef
	engine   string
	model    string
	sumLabel string  // the value of the SourceSet's SumLabel, if any
	le       float64 // bucket bound of a histogram bucket
	value    float64
	ts       int64 // milliseconds; 0 when the sample has none
	line     int   // index into the filtered lines, for messages
}

// Extract parses a Prometheus text exposition (format 0.0.4; a missing final
// newline, CRLF line endings, a UTF-8 byte order mark and leading blanks are
// accepted) and returns the pod's canonical signals. Only the lines of the
// families some dialect reads are handed to the parser (Prometheus's own
// model/textparse): a malformed line of any other family cannot void the pod,
// and costs only the scan for its name.
//
// Errors (wrapped, naming the line): ErrParse for a malformed line of a family
// read, or a body with no exposition line at all; ErrNoEngineMetrics when no
// supported engine's queue depth or KV-cache usage is present; ErrTooManySeries
// and ErrTooManyEngines past the options' bounds. Invalid values are not errors:
// they are counted and reported in the Reading.
func (e *Extractor) Extract(body []byte) (Reading, error) {
	return e.ExtractContent(body, "")
}

// ExtractContent is Extract for a body of the given Content-Type: OpenMetrics
// text (application/openmetrics-text) is read by textparse's OpenMetrics parser
// (timestamps in seconds, exemplars, # EOF); anything else as the text format
// 0.0.4, with exemplars after a series ignored.
func (e *Extractor) ExtractContent(body []byte, contentType string) (Reading, error) {
	if isJSON(body, contentType) {
		// Short: the scraper keeps about 200 bytes of an error (trtllm-serve's
		// /metrics is its iteration stats, hazard NC-17).
		return Reading{}, fmt.Errorf("%w: JSON, not Prometheus text (trtllm-serve: scrape /prometheus/metrics; return_perf_metrics, enable_iter_perf_stats)", ErrParse)
	}
	om := isOpenMetrics(contentType)
	b := e.bufs.Get().(*scanBuffers)
	defer e.putBuffers(b)
	st, err := e.filter(body, om, false, b)
	if err != nil {
		return Reading{}, err
	}
	err = e.parse(om, b.lines.Bytes(), b)
	if !b.aligned && len(b.fast) > 0 {
		// The parser did not read the lines as the filter cut them, so the
		// lines the cache answered are not proven to read as they would
		// there: read the body again without the cache.
		if st, err = e.filter(body, om, true, b); err != nil {
			return Reading{}, err
		}
		err = e.parse(om, b.lines.Bytes(), b)
	}
	if err != nil {
		return Reading{}, err
	}
	if !om && b.aligned {
		e.series.learn(e, b)
	}
	b.mergeFast()
	return e.reading(b, st)
}

// isJSON reports whether a body is JSON rather than exposition text: its
// Content-Type says so, or it starts with '[' (no exposition line does; a
// '{' may start a UTF-8 series line).
func isJSON(body []byte, contentType string) bool {
	ct := strings.TrimSpace(strings.ToLower(contentType))
	if strings.HasPrefix(ct, "application/json") {
		return true
	}
	rest := bytes.TrimLeft(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")), " \t\r\n")
	return len(rest) > 0 && rest[0] == '['
}

// isOpenMetrics reports whether a Content-Type is OpenMetrics text.
func isOpenMetrics(contentType string) bool {
	return strings.HasPrefix(strings.TrimSpace(strings.ToLower(contentType)), "application/openmetrics-text")
}

// reading turns the parsed samples into a Reading.
func (e *Extractor) reading(b *scanBuffers, st filterStats) (Reading, error) {
	if len(b.samples) == 0 && (len(b.gateway) > 0 || len(b.flow) > 0) {
		// A gateway (endpoint picker): its queue, or, with every flow idle and
		// collected, only its other flow-control families; no engine.
		r := Reading{Dialect: DialectGateway, FlowControl: cloneOrNil(b.flow), SampleTime: milliTime(b.gwOldest)}
		r.Gateway = foldGateway(&r, b.gateway, false)
		return r, nil
	}
	r, err := e.fold(b.samples, st, b)
	if err != nil {
		return Reading{}, err
	}
	// nil when none, whatever the pooled buffer held before.
	r.Gateway, r.FlowControl = foldGateway(&r, b.gateway, false), cloneOrNil(b.flow)
	return r, nil
}

// cloneOrNil returns a copy of s, nil when s is empty (a pooled buffer's
// slice is never nil once used).
func cloneOrNil[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}

// sampleMillis is an explicit sample timestamp (Unix milliseconds) as the
// extractor keeps it, where 0 means "none": the epoch itself is kept as 1 ms
// after it, so that a sample stamped at 0 reads as 56 years old, not as
// fresh.
func sampleMillis(ms int64) int64 {
	if ms == 0 {
		return 1
	}
	return ms
}

// milliTime is t (Unix milliseconds) as a time, zero for 0.
func milliTime(t int64) time.Time {
	if t == 0 {
		return time.Time{}
	}
	return time.UnixMilli(t)
}

// flowControlPrefixes are the name prefixes of the gateway's flow-control
// families: the Gateway API inference extension's (pkg/epp/metrics,
// inference_extension_flow_control_*) and llm-d's mirror of them
// (llm_d_epp_flow_control_*, e.g. llm_d_epp_flow_control_pool_saturation),
// and the NVIDIA Dynamo frontend's (dynamo_frontend_*), whose router queue
// gauge exists only while its router queues.
var flowControlPrefixes = []string{"inference_extension_flow_control_", "llm_d_epp_flow_control_", "dynamo_frontend_"}

// maxFlowFamilies bounds Reading.FlowControl.
const maxFlowFamilies = 8

// noteFlowFamily records name in b.flow when it is a flow-control family and
// the extractor reads gateway metrics.
func (e *Extractor) noteFlowFamily(name []byte, b *scanBuffers) {
	if len(e.index.gateway) == 0 || len(b.flow) >= maxFlowFamilies {
		return
	}
	if isFlowControlFamily(string(name)) && !slices.Contains(b.flow, string(name)) {
		b.flow = append(b.flow, string(name))
	}
}

// isFlowControlFamily reports whether name is a gateway flow-control family.
func isFlowControlFamily(name string) bool {
	for _, p := range flowControlPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// DefaultGatewayQueueMetric is the Gateway API inference extension's flow-control
// queue gauge (kubernetes-sigs/gateway-api-inference-extension, PR #1714:
// inference_extension_flow_control_queue_size), labelled by inference_pool,
// fairness_id, priority and model names. A gateway input with
// it reads LLMDGatewayQueueMetric first (see GatewayQueueMetrics).
const DefaultGatewayQueueMetric = "inference_extension_flow_control_queue_size"

// LLMDGatewayQueueMetric is the same queue gauge under llm-d-router's name:
// from v0.10.0 (2026-08-17; llm-d/llm-d-router pkg/epp/metrics) the endpoint
// picker emits every flow-control and pool gauge under the deprecated
// inference_extension_* / inference_pool_* name and a llm_d_epp_* one, from
// the same call.
const LLMDGatewayQueueMetric = "llm_d_epp_flow_control_queue_size"

// LLMDStaleEndpointsMetric is llm-d-router's count of endpoints whose metrics
// are missing or stale (llm_d_epp_flow_control_stale_endpoints{detector},
// llm-d-router PR #2165): the saturation detector scores them saturated
// (fail-closed), so flow control stops dispatching and its queue grows while
// engines idle.
const LLMDStaleEndpointsMetric = "llm_d_epp_flow_control_stale_endpoints"

// GatewayQueueMetrics returns the families a gateway input of metric reads,
// in order of preference: one body counts only the first it has, never two
// (the endpoint picker exports each queue series under both names). For the
// inference extension's queue gauge (the default) that is llm-d-router's
// name, then it; any other metric is read alone. An extractor reading metric
// reads them all (ExtractOptions.GatewayMetrics), and with llm-d's name its
// stale-endpoints gauge.
func GatewayQueueMetrics(metric string) []string {
	if metric == DefaultGatewayQueueMetric {
		return []string{LLMDGatewayQueueMetric, DefaultGatewayQueueMetric}
	}
	return []string{metric}
}

// DialectGateway is the Reading.Dialect of a body with gateway queue series
// and no engine metric.
const DialectGateway = "gateway"

// GatewaySeries is one series of a gateway queue metric: its labels (without
// the metric name; at most maxGatewayLabels, values cut to maxLabelBytes) and
// its value, a count of waiting requests.
type GatewaySeries struct {
	Metric string            `json:"metric"`
	Labels map[string]string `json:"labels"`
	Value  float64           `json:"value"`
	// Invalid, when set, says why the series' value was rejected by the
	// engines' validity rules (NaN, ±Inf, negative, above MaxRequests): Value
	// is then 0 and means nothing, and a gateway input that selects the series
	// has no queue (policy.GatewayInput.Queue fails), never a queue of 0.
	Invalid Reason `json:"invalid,omitempty"`
}

// gatewaySample is a gateway series as read, before foldGateway: its value as
// read (for a rejection's warning) and its timestamp in milliseconds (0:
// none), for the duplicate rule.
type gatewaySample struct {
	GatewaySeries
	raw float64
	t   int64
}

// maxGatewayLabels bounds the labels kept per gateway series.
const maxGatewayLabels = 32

// gatewaySeries returns the series as a GatewaySeries when it is one of the
// gateway queue metrics read, its value checked as a queue depth is (a
// rejected one has Invalid set); t is its timestamp in milliseconds, 0 for
// none.
func (e *Extractor) gatewaySeries(lset *labels.Labels, value float64, t int64) (gatewaySample, bool) {
	name := lset.Get(model.MetricNameLabel)
	if !e.index.gateway[name] {
		return gatewaySample{}, false
	}
	gs := gatewaySample{GatewaySeries: GatewaySeries{Metric: name, Labels: map[string]string{}, Value: value}, raw: value, t: t}
	if _, reason, bad := validate(QueueDepth, value); bad {
		gs.Value, gs.Invalid = 0, reason
	}
	lset.Range(func(l labels.Label) {
		if l.Name != model.MetricNameLabel && len(gs.Labels) < maxGatewayLabels {
			gs.Labels[excerpt.String(l.Name, maxLabelBytes)] = excerpt.String(l.Value, maxLabelBytes)
		}
	})
	return gs, true
}

// HasLabels reports whether the series carries every label name of match.
func (g *GatewaySeries) HasLabels(match map[string]string) bool {
	for k := range match {
		if _, ok := g.Labels[k]; !ok {
			return false
		}
	}
	return true
}

// Matches reports whether every label of match has that value on the series.
func (g *GatewaySeries) Matches(match map[string]string) bool {
	for k, v := range match {
		if g.Labels[k] != v {
			return false
		}
	}
	return true
}

// filterStats describes what filter skipped.
type filterStats struct {
	// other is the number of lines that are not exposition text at all, first the
	// number of the first one and firstText an excerpt of it.
	other     int
	first     int
	firstText string
}

// filter copies the logical lines (see nextLine) of families some dialect
// reads into b.lines, one per line, normalised (no final CR, no leading
// blanks, no exemplar in the text format). A line the series cache answers
// (hits) is not copied; noCache turns the cache off.
func (e *Extractor) filter(body []byte, om, noCache bool, b *scanBuffers) (filterStats, error) {
	var st filterStats
	b.lines.Reset()
	b.lineNos, b.offsets, b.global, b.fast, b.accepted, b.eofAt = b.lineNos[:0], b.offsets[:0], b.global[:0], b.fast[:0], 0, b.eofAt[:0]
	b.flow = b.flow[:0]
	useCache := !om && !noCache
	if useCache {
		e.series.mu.RLock() // for hit
		defer e.series.mu.RUnlock()
	}
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	var last lastFamily
	join := true
	for n := 1; len(body) > 0; {
		first := n
		line, rest, physical, failed := nextLine(body, om, join)
		body, n = rest, n+physical
		if failed {
			join = false // textparse rejects the body: an unterminated quoted string
		}
		if k := len(line); k > 0 && line[k-1] == '\r' {
			line = line[:k-1]
		}
		for len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			line = line[1:]
		}
		if len(line) == 0 {
			continue
		}
		if line[0] == '#' {
			if om && bytes.Equal(bytes.TrimSpace(line), []byte("# EOF")) {
				b.eofAt = append(b.eofAt, len(b.offsets))
				b.addLine([]byte("# EOF"), first)
			}
			continue
		}
		if !e.index.first[line[0]] && line[0] != '{' {
			if !metricNameStart(line[0]) {
				st.other1(first, line)
			}
			continue // no family read starts with this byte
		}
		name, read, ok := e.lineFamily(line, &last)
		if !ok {
			st.other1(first, line)
			continue
		}
		if !read {
			e.noteFlowFamily(name, b)
			continue
		}
		if err := checkLine(line, name, first); err != nil {
			return st, err
		}
		if !om {
			line = stripExemplar(line)
		}
		if b.accepted >= e.opts.MaxSeries {
			return st, fmt.Errorf("%w: more than %d series of the engine metric families read", ErrTooManySeries, e.opts.MaxSeries)
		}
		// Only a line of one physical line: the cache's keys hold no newline.
		if useCache && physical == 1 && e.series.hit(line, b) {
			b.accepted++
			continue
		}
		b.addLine(line, first)
	}
	if om && (len(b.lineNos) == 0 || b.lines.Len() < 6 || !bytes.HasSuffix(b.lines.Bytes(), []byte("# EOF\n"))) {
		// The OpenMetrics parser needs its terminator; a truncated body is still
		// read as far as it goes, as Prometheus does not.
		b.eofAt = append(b.eofAt, len(b.offsets))
		b.addLine([]byte("# EOF"), 0)
	}
	return st, nil
}

// lastFamily is the metric name of the last series line read, and whether its
// family is read: a family's series come one after the other, so the next
// line usually has the same name.
type lastFamily struct {
	name []byte
	read bool
}

// lineFamily returns the metric name of a series line and whether its family
// is read; ok is false when the line names no metric.
func (e *Extractor) lineFamily(line []byte, last *lastFamily) (name []byte, read, ok bool) {
	if k := len(last.name); k > 0 && len(line) > k && isNameEnd(line[k]) && bytes.Equal(line[:k], last.name) {
		// The same name as the line before (which holds no '{', blank or tab)
		// is the same answer.
		return last.name, last.read, true
	}
	name, ok = lineMetricName(line)
	if !ok {
		return nil, false, false
	}
	read = e.index.read[string(name)] // no allocation: Go optimises string(b) in a map index
	*last = lastFamily{}
	if line[0] != '{' { // a quoted name may hold the bytes that end others
		*last = lastFamily{name: name, read: read}
	}
	return name, read, true
}

// checkLine fails a series line of a family read that is longer than
// maxLineBytes or holds a NUL byte, naming the line and the family.
func checkLine(line, name []byte, lineNo int) error {
	if len(line) > maxLineBytes {
		return fmt.Errorf("%w: line %d: a series of %s is %d bytes long, more than %d", ErrParse, lineNo, excerpt.String(string(name), 80), len(line), maxLineBytes)
	}
	if bytes.IndexByte(line, 0) >= 0 {
		return fmt.Errorf("%w: line %d: NUL byte in a series of %s", ErrParse, lineNo, excerpt.String(string(name), 80))
	}
	return nil
}

// other1 counts a line that is not exposition text.
func (st *filterStats) other1(n int, line []byte) {
	if st.other == 0 {
		st.first, st.firstText = n, excerpt.String(string(line), 80)
	}
	st.other++
}

// addLine hands a line (body line number n, 0 for one the filter adds) to
// the parser.
func (b *scanBuffers) addLine(line []byte, n int) {
	b.global = append(b.global, b.accepted)
	b.offsets = append(b.offsets, b.lines.Len())
	b.lineNos = append(b.lineNos, n)
	if n != 0 {
		b.accepted++
	}
	b.lines.Write(line)
	b.lines.WriteByte('\n')
}

// lineMetricName returns the metric name a series line starts with: the bytes
// up to the first '{', blank or tab, or the quoted name of a UTF-8 series,
// which textparse accepts anywhere in the label set as a quoted string
// followed by ',' or '}' ({"vllm:num_requests_waiting",engine="0"},
// {engine="0","vllm:num_requests_waiting"}). ok is false for a line that
// cannot be a series of the exposition format.
func lineMetricName(line []byte) ([]byte, bool) {
	if line[0] == '{' {
		return quotedMetricName(line[1:])
	}
	if !metricNameStart(line[0]) {
		return nil, false
	}
	for i, c := range line {
		if c == '{' || c == ' ' || c == '\t' {
			return line[:i], true
		}
	}
	return line, true
}

// quotedMetricName returns the first quoted string of a label set (after its
// '{') that is followed by ',' or '}': the metric name. Label values (a quoted
// string after '=') are skipped.
func quotedMetricName(rest []byte) ([]byte, bool) {
	afterEqual := false
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; c {
		case '}':
			return nil, false
		case '=':
			afterEqual = true
		case '"':
			j := i + 1
			for ; j < len(rest) && rest[j] != '"'; j++ {
				if rest[j] == '\\' {
					j++
				}
			}
			if j >= len(rest) {
				return nil, false
			}
			quoted := rest[i+1 : j]
			i = j
			if afterEqual {
				afterEqual = false // a label value
				continue
			}
			k := j + 1
			for k < len(rest) && (rest[k] == ' ' || rest[k] == '\t') {
				k++
			}
			if k < len(rest) && (rest[k] == ',' || rest[k] == '}') {
				return quoted, true
			}
		}
	}
	return nil, false
}

// isNameEnd reports whether c ends an unquoted metric name in a series line.
func isNameEnd(c byte) bool { return c == '{' || c == ' ' || c == '\t' }

// metricNameStart reports whether c can start a metric name ([a-zA-Z_:]).
func metricNameStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// stripExemplar drops an OpenMetrics exemplar (" # {…} v") after the value of a
// text-format line, which the 0.0.4 parser would reject.
func stripExemplar(line []byte) []byte {
	if bytes.IndexByte(line, '#') < 0 {
		return line
	}
	end := 0
	// A series has a label set when its first '{' comes before its first
	// space (a metric name has none; a label value's spaces come after the
	// '{'); otherwise the '{' is the exemplar's. The exemplar's own braces
	// come after " # ": find the series' closing brace as the first '}'
	// outside quotes.
	if open, sp := bytes.IndexByte(line, '{'), bytes.IndexByte(line, ' '); open >= 0 && (sp < 0 || open < sp) {
		end = closingBrace(line)
	}
	if j := bytes.Index(line[end:], []byte(" # {")); j >= 0 {
		return bytes.TrimRight(line[:end+j], " ")
	}
	return line
}

// closingBrace returns the index just after the '}' that closes the series'
// label set, skipping quoted label values; 0 if none.
func closingBrace(line []byte) int {
	inQuote := false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '}':
			return i + 1
		}
	}
	return 0
}

// parse runs the exposition parser over data, the filtered lines (or, in the
// tests' reference extraction, a whole body), and keeps the samples of
// interest in b.samples. Each sample's line is the index of the filtered line
// its series starts on, found from where the parser's series bytes lie in
// data (with no filtered lines, the series' index); b.aligned reports whether
// every filtered line but "# EOF" gave exactly one series, in order, each
// starting where its line starts: what the series cache may learn from.
func (e *Extractor) parse(om bool, data []byte, b *scanBuffers) error {
	b.samples = b.samples[:0]
	b.gateway = b.gateway[:0]
	b.gwOldest = 0
	b.firstSample, b.learnable, b.entryLine, b.seriesLen = b.firstSample[:0], b.learnable[:0], b.entryLine[:0], b.seriesLen[:0]
	// No filtered line (every line answered by the cache) is aligned; a
	// whole body (the tests' reference) is not filtered lines at all.
	b.aligned = len(data) == 0 || len(b.offsets) > 0
	if len(data) == 0 {
		return nil
	}
	var p textparse.Parser
	if om {
		p = textparse.NewOpenMetricsParser(data, labels.NewSymbolTable())
	} else {
		p = textparse.NewPromParser(data, labels.NewSymbolTable(), false)
	}
	entry := -1
	for {
		kind, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.aligned = false
			return e.parseError(om, b, err)
		}
		if kind != textparse.EntrySeries {
			continue
		}
		entry++
		series, ts, value := p.Series()
		line := entry
		if len(b.offsets) > 0 {
			var start bool
			line, start = b.lineOf(data, series)
			if !start || line != entry+b.eofBefore(line) {
				b.aligned = false
			}
		}
		b.firstSample, b.learnable = append(b.firstSample, len(b.samples)), append(b.learnable, ts == nil)
		b.entryLine, b.seriesLen = append(b.entryLine, line), append(b.seriesLen, len(series))
		p.Labels(&b.lset)
		name := b.lset.Get(model.MetricNameLabel)
		var t int64
		if ts != nil {
			t = sampleMillis(*ts)
		}
		if e.index.gateway[name] {
			b.learnable[entry] = false // gateway series are never learned (see seriesCache)
		}
		if gs, ok := e.gatewaySeries(&b.lset, value, t); ok {
			b.gateway = append(b.gateway, gs)
			if t != 0 && (b.gwOldest == 0 || t < b.gwOldest) {
				b.gwOldest = t
			}
		}
		var ok bool
		if b.samples, ok = e.collect(b.samples, &b.lset, value, t, line); !ok {
			return fmt.Errorf("%w: line %d: bucket of %s with le=%q", ErrParse, b.lineNo(line), name, excerpt.String(b.lset.Get(model.BucketLabel), 40))
		}
	}
	if b.aligned && len(b.entryLine) != len(b.offsets)-len(b.eofAt) {
		b.aligned = false
	}
	return nil
}

// lineOf returns the index of the filtered line that series (bytes the
// parser returned, a part of data) starts on, and whether it starts where
// that line starts. The place comes from the slices' capacities: series
// shares data's array, so cap(data)-cap(series) is its offset.
func (b *scanBuffers) lineOf(data, series []byte) (int, bool) {
	off := cap(data) - cap(series)
	if len(series) == 0 || off < 0 || off >= len(data) || &data[off] != &series[0] {
		return 0, false // not a part of data: no place
	}
	i, found := slices.BinarySearch(b.offsets, off)
	if !found {
		i-- // the line it lies in; offsets[0] is 0
	}
	return max(i, 0), found
}

// eofBefore counts the "# EOF" lines before filtered line i (OpenMetrics;
// they give no series).
func (b *scanBuffers) eofBefore(i int) int {
	n, _ := slices.BinarySearch(b.eofAt, i)
	return n
}

// collect appends to out what one series (its labels, value and timestamp in
// milliseconds, 0 for none) is to the dialects that read its family. ok is
// false for a histogram bucket whose le is not a number.
func (e *Extractor) collect(out []rawSample, lset *labels.Labels, value float64, t int64, line int) ([]rawSample, bool) {
	name := lset.Get(model.MetricNameLabel)
	for _, ref := range e.index.scalars[name] {
		src := ref.source
		if src.Label != "" && lset.Get(src.Label) != src.Value {
			continue
		}
		d := &e.dialects[ref.dialect]
		s := rawSample{scalar: true, sref: ref, value: value, ts: t, line: line}
		s.engine, s.model = engineKey(d, lset), lset.Get(d.ModelLabel)
		if sl := d.Sources[ref.signal][ref.pref].SumLabel; sl != "" {
			s.sumLabel = lset.Get(sl)
		}
		out = append(out, s)
	}
	for _, ref := range e.index.histos[name] {
		d := &e.dialects[ref.dialect]
		s := rawSample{href: ref, value: value, ts: t, line: line}
		s.engine, s.model = engineKey(d, lset), lset.Get(d.ModelLabel)
		if ref.kind == partBucket {
			le, err := strconv.ParseFloat(lset.Get(model.BucketLabel), 64)
			if err != nil || math.IsNaN(le) {
				return out, false
			}
			s.le = le
		}
		out = append(out, s)
	}
	return out, true
}

// parseError names the first filtered line the parser rejects, re-parsing line
// by line (the error path only).
func (e *Extractor) parseError(om bool, b *scanBuffers, cause error) error {
	data := b.lines.Bytes()
	for i, start := range b.offsets {
		end := len(data)
		if i+1 < len(b.offsets) {
			end = b.offsets[i+1]
		}
		l := data[start:end]
		if len(l) == 0 || i >= len(b.lineNos) || b.lineNos[i] == 0 {
			continue
		}
		var p textparse.Parser
		if om {
			p = textparse.NewOpenMetricsParser(append(slices.Clone(l), "# EOF\n"...), labels.NewSymbolTable())
		} else {
			p = textparse.NewPromParser(l, labels.NewSymbolTable(), false)
		}
		for {
			_, err := p.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("%w: line %d: %s: %s", ErrParse, b.lineNos[i], excerpt.String(err.Error(), 120), excerpt.String(strings.TrimSpace(string(l)), 120))
			}
		}
	}
	return fmt.Errorf("%w: %s", ErrParse, excerpt.String(cause.Error(), 200))
}

// engineKey returns the engine's ID: the values of the dialect's engine labels,
// joined by "/" with empty trailing values left out, at most maxLabelBytes
// long. Distinct label values never share an ID: when the ID cannot be the
// values as they are (cut to length, control characters or invalid UTF-8
// replaced, or a "/" inside a value that is not the last), it ends in "#" and
// a hash of the exact values (FNV-64a), so two engines whose labels differ
// only past the cut stay two engines (issue 19). Where the series of one ID
// carry several models, splitModels adds the model to it.
func engineKey(d *Dialect, lset *labels.Labels) string {
	switch len(d.EngineLabels) {
	case 0:
		return ""
	case 1:
		return engineID(lset.Get(d.EngineLabels[0]), false)
	}
	parts := make([]string, 0, len(d.EngineLabels))
	for _, l := range d.EngineLabels {
		parts = append(parts, lset.Get(l))
	}
	for len(parts) > 0 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	ambiguous := false
	for _, p := range parts[:max(len(parts)-1, 0)] {
		ambiguous = ambiguous || strings.Contains(p, "/")
	}
	return engineID(strings.Join(parts, "/"), ambiguous)
}

// engineID returns raw as an engine ID, or, when it would not be raw (see
// engineKey) or ambiguous is set, an excerpt of it with a hash of raw.
func engineID(raw string, ambiguous bool) string {
	id := excerpt.String(raw, maxLabelBytes)
	if id == raw && !ambiguous {
		return raw
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(raw))
	return excerpt.String(raw, maxLabelBytes-17) + "#" + strconv.FormatUint(h.Sum64(), 16)
}

// ratioEpsilon is the float noise above 1 accepted (and clamped) in a ratio: an
// engine computing 1 - free/total can report 1.0000000000000002.
const ratioEpsilon = 1e-6

// MaxRequests is the largest queue depth or running count accepted from one
// series. No engine holds a billion requests; values above it are corrupt (a
// uint64 underflow reads 1.8e19) and would otherwise dominate, or overflow, a
// pool's sum.
const MaxRequests = 1e9

// maxCounter is the largest counter value accepted: 2^53, beyond which a float
// counter no longer counts by one.
const maxCounter = 1 << 53

// validate reports whether v is outside the valid range of the signal and why,
// and returns v clamped for float noise (a ratio at 1 + 1e-7 reads 1).
func validate(s Signal, v float64) (float64, Reason, bool) {
	switch {
	case math.IsNaN(v):
		return v, ReasonNaN, true
	case math.IsInf(v, 0):
		return v, ReasonInf, true
	case v < 0:
		return v, ReasonNegative, true
	case s.isRatio() && v > 1+ratioEpsilon:
		return v, ReasonAboveRange, true
	case s.isRatio() && v > 1:
		return 1, "", false
	case s.isCount() && v > MaxRequests:
		return v, ReasonAboveRange, true
	case s.IsCounter() && v > maxCounter:
		return v, ReasonAboveRange, true
	}
	return v, "", false
}

// fold turns the samples into a Reading, in phases: choose the dialect and its
// spelling; drop unlabelled aggregates beside engine-labelled series; make
// each model of an engine label value that carries several an engine; validate
// every series; per engine and signal choose the first alternative with a valid
// value (duplicates collapsed to their maximum); build histograms; fold the
// engines into the pod.
func (e *Extractor) fold(samples []rawSample, st filterStats, b *scanBuffers) (Reading, error) {
	dialect, spelling, ok := e.chooseDialect(samples)
	if !ok {
		if e.hasDialect(samples, "trtllm") {
			return Reading{}, fmt.Errorf("%w: trtllm-serve's metrics without its queue and running gauges (trtllm_num_requests_waiting, TensorRT-LLM 1.3 and later, "+
				"filled from iteration stats: enable_iter_perf_stats: true): its load is unknown", ErrNoEngineMetrics)
		}
		if st.other > 0 {
			return Reading{}, fmt.Errorf("%w: line %d is not exposition text: %q (and %d other lines)", ErrParse, st.first, st.firstText, st.other-1)
		}
		return Reading{}, fmt.Errorf("%w (looked for %s)", ErrNoEngineMetrics, e.lookedFor())
	}
	d := &e.dialects[dialect]
	r := Reading{Dialect: d.Name}
	samples = e.keepDialect(&r, samples, dialect, spelling)
	if st.other > 0 {
		r.warn(fmt.Sprintf("%d lines are not exposition text and were skipped (first: line %d)", st.other, st.first))
	}
	samples = dropAggregates(&r, d, spelling, samples)
	// Before splitModels, which may give an engine without the engine label
	// an ID.
	engineLabelled := slices.ContainsFunc(samples, func(s rawSample) bool { return s.engine != "" })
	samples = splitModels(&r, d, spelling, samples, b)

	engines, ids, models := e.buildEngines(&r, d, samples, b)
	var oldest int64
	for _, eb := range engines {
		// The reading is as old as the oldest sample it uses: a duplicate
		// dropped for an older sample does not age it.
		oldest = eb.oldest(oldest)
	}
	ids = mergeUnlabelled(d, engines, ids)
	if len(ids) > e.opts.MaxEngines {
		return Reading{}, fmt.Errorf("%w: %d engines, more than %d", ErrTooManyEngines, len(ids), e.opts.MaxEngines)
	}
	slices.SortFunc(ids, compareEngineIDs)
	for m := range models {
		r.Models = append(r.Models, m)
	}
	slices.Sort(r.Models)
	if oldest != 0 {
		r.SampleTime = time.UnixMilli(oldest)
	}

	e.resolve(&r, dialect, spelling, engines, ids, b)
	e.foldPod(&r, d, engineLabelled)
	return r, nil
}

// foldPod names a vLLM reading's version (engineLabelled: some series carry
// the engine label), warns about a Triton pod whose models would add up, and
// folds the engines into the pod's values (for Triton, its default view: see
// defaultView).
func (e *Extractor) foldPod(r *Reading, d *Dialect, engineLabelled bool) {
	if d.Name == "vllm" {
		r.Dialect = vllmVersion(r.Sources[KVCacheUsage.String()], engineLabelled)
	}
	keep := defaultView(r)
	if d.BackendPrefix != "" && keep == nil && len(r.Models) > 1 {
		r.warn(fmt.Sprintf("%d models (%s) and no TensorRT-LLM backend series or %q model: their queues add up, "+
			"and an ensemble's steps count one request once each; set the policy's model", len(r.Models), strings.Join(r.Models, ", "), TritonBackendModel))
	}
	r.Fold = FoldEngines(r.Engines, keep)
}

// buildEngines groups the samples of the chosen dialect by engine (in the
// order first seen; IDs interned) and adds each to its engine, collecting the
// served model names (at most maxModels).
func (e *Extractor) buildEngines(r *Reading, d *Dialect, samples []rawSample, b *scanBuffers) (map[string]*engineBuild, []string, map[string]struct{}) {
	if b.engines == nil {
		b.engines, b.models = map[string]*engineBuild{}, map[string]struct{}{}
	}
	clear(b.engines)
	clear(b.models)
	b.nBuilds, b.ids = 0, b.ids[:0]
	engines, ids, models := b.engines, b.ids, b.models
	for i := range samples {
		s := &samples[i]
		eb, ok := engines[s.engine]
		if !ok {
			// Interned: s.engine shares the memory of the series' whole label set.
			id := e.strs.intern(s.engine)
			eb = b.newBuild(id)
			engines[id] = eb
			ids = append(ids, id)
		}
		if s.model != "" {
			if eb.model == "" { // the engine's only model (splitModels)
				eb.model = e.strs.intern(excerpt.String(s.model, maxLabelBytes))
			}
			if len(models) < maxModels {
				models[e.strs.intern(excerpt.String(s.model, maxLabelBytes))] = struct{}{}
			}
		}
		if d.BackendPrefix != "" && s.scalar && strings.HasPrefix(s.sref.source.Metric, d.BackendPrefix) {
			eb.backend = true
		}
		if s.scalar {
			eb.addScalar(r, s)
		} else {
			eb.addHisto(r, d, s)
		}
	}
	b.ids = ids // keep the grown slice for the next extraction
	return engines, ids, models
}

// TritonBackendModel is the model name Triton's TensorRT-LLM backend has by
// convention (triton-inference-server/tensorrtllm_backend's all_models
// repository: preprocessing, tensorrt_llm, postprocessing, ensemble).
const TritonBackendModel = "tensorrt_llm"

// defaultView returns which engines a reading's pod value counts when no
// model is asked for (nil: all). Triton counts the models that do the work,
// never the sum of an ensemble's steps, each of which holds the same
// requests: its TensorRT-LLM backend models (with nv_trt_llm_* series) when it
// has any, else the one named by the backend's convention
// (TritonBackendModel) when several models are served.
func defaultView(r *Reading) func(*EngineSignals) bool {
	if slices.ContainsFunc(r.Engines, func(e EngineSignals) bool { return e.Backend }) {
		return func(e *EngineSignals) bool { return e.Backend }
	}
	if r.Dialect == "triton-trtllm" && len(r.Models) > 1 && slices.Contains(r.Models, TritonBackendModel) {
		return func(e *EngineSignals) bool { return e.Model == TritonBackendModel }
	}
	return nil
}

// hasDialect reports whether a sample belongs to the dialect named name.
func (e *Extractor) hasDialect(samples []rawSample, name string) bool {
	for i := range samples {
		d := samples[i].sref.dialect
		if !samples[i].scalar {
			d = samples[i].href.dialect
		}
		if e.dialects[d].Name == name {
			return true
		}
	}
	return false
}

// mergeUnlabelled gives the series of families that no engine label splits
// (vLLM's admission_rejections_total is per process) to the pod's only
// engine-labelled engine; with several engines they stay a pod-level part of
// their own (ID "").
func mergeUnlabelled(d *Dialect, engines map[string]*engineBuild, ids []string) []string {
	agg, ok := engines[""]
	if len(d.EngineLabels) == 0 || !ok || len(ids) != 2 {
		return ids
	}
	other := engines[ids[0]]
	if ids[0] == "" {
		other = engines[ids[1]]
	}
	for _, kc := range agg.cells {
		if other.cell(kc.key, false) == nil {
			other.cells = append(other.cells, kc)
		}
	}
	// Copied, not shared: builds are reused, each with maps of its own.
	for k, m := range agg.buckets {
		if len(m) == 0 || len(other.buckets[k]) > 0 {
			continue
		}
		for le, c := range m {
			other.bucketCells(k)[le] = c
		}
	}
	for k, c := range agg.hparts {
		if other.hparts == nil {
			other.hparts = map[[3]int]cell{}
		}
		if _, dup := other.hparts[k]; !dup {
			other.hparts[k] = c
		}
	}
	if other.model == "" {
		other.model = agg.model
	}
	delete(engines, "")
	return []string{other.id}
}

// chooseDialect picks the dialect, and the spelling within it, that has the most
// of the fused signals (queue depth, KV-cache usage), then running; ties go to
// table order. ok is false when none has queue depth or KV-cache usage.
func (e *Extractor) chooseDialect(samples []rawSample) (dialect, spelling int, ok bool) {
	const maxSpellings = 2
	n := len(e.dialects) * maxSpellings
	var scoreBuf [16]int
	var seenBuf [16]uint32
	score, seen := scoreBuf[:], seenBuf[:]
	if n > len(scoreBuf) {
		score, seen = make([]int, n), make([]uint32, n)
	}
	for i := range samples {
		s := &samples[i]
		if !s.scalar {
			continue
		}
		k := s.sref.dialect*maxSpellings + s.sref.spelling
		bit := uint32(1) << s.sref.signal
		if seen[k]&bit != 0 {
			continue
		}
		seen[k] |= bit
		switch s.sref.signal {
		case QueueDepth, KVCacheUsage:
			score[k] += 4
		case Running:
			score[k] += 2
		default:
			score[k]++
		}
	}
	best := -1
	for k := range n {
		if seen[k]&(1<<QueueDepth|1<<KVCacheUsage) == 0 {
			continue
		}
		if best < 0 || score[k] > score[best] {
			best = k // ties keep the earlier dialect and spelling
		}
	}
	if best < 0 {
		return 0, 0, false
	}
	return best / maxSpellings, best % maxSpellings, true
}

// keepDialect returns the samples of the chosen dialect and spelling, warning
// about the others: a mixed body (metrics of another engine beside) or both
// spellings of one engine (never added together).
func (e *Extractor) keepDialect(r *Reading, samples []rawSample, dialect, spelling int) []rawSample {
	d := &e.dialects[dialect]
	var otherDialect, otherSpelling string
	out := samples[:0]
	for _, s := range samples {
		sd, sk := s.sref.dialect, s.sref.spelling
		if !s.scalar {
			sd, sk = s.href.dialect, s.href.spelling
		}
		switch {
		case sd == dialect && sk == spelling:
			out = append(out, s)
		case sd == dialect:
			otherSpelling = d.Spellings[sk]
		default:
			otherDialect = e.dialects[sd].Name
		}
	}
	if otherDialect != "" {
		r.warn(fmt.Sprintf("mixed body: %s metrics beside %s ones; read as %s", otherDialect, d.Name, d.Name))
	}
	if otherSpelling != "" {
		r.warn(fmt.Sprintf("both %q and %q names of %s are present; read %q only", d.Spellings[spelling], otherSpelling, d.Name, d.Spellings[spelling]))
	}
	return out
}

// dropAggregates drops, per signal (and per histogram), unlabelled series
// beside engine-labelled ones: a series without the engine label next to
// per-engine series of the same signal is an aggregate of them (a relabelled
// sum, a second exporter, SGLang's tokenizer-wide generation_tokens_total
// beside its schedulers' per-rank realtime_tokens_total), not another engine,
// and adding it would count the pod twice.
func dropAggregates(r *Reading, d *Dialect, spelling int, samples []rawSample) []rawSample {
	if len(d.EngineLabels) == 0 || !slices.ContainsFunc(samples, func(s rawSample) bool { return s.engine == "" }) ||
		!slices.ContainsFunc(samples, func(s rawSample) bool { return s.engine != "" }) {
		return samples
	}
	var labelled [int(NumSignals) + int(NumHistos)]bool
	for i := range samples {
		if samples[i].engine != "" {
			labelled[samples[i].what()] = true
		}
	}
	out, dropped := dropWhere(d, samples, func(s *rawSample) bool { return s.engine == "" && labelled[s.what()] })
	for _, m := range dropped {
		r.warn(fmt.Sprintf("a series of %s without the %s label beside per-engine series is an aggregate, not an engine; ignored",
			d.spell(m, spelling), strings.Join(d.EngineLabels, "/")))
	}
	return out
}

// dropWhere removes from samples, in place, those drop reports, and returns
// the rest and the metrics of those removed, each once, in order of first
// appearance (for the caller's warning).
func dropWhere(d *Dialect, samples []rawSample, drop func(*rawSample) bool) (out []rawSample, dropped []string) {
	out = samples[:0]
	for _, s := range samples {
		if drop(&s) {
			if m := s.metric(d); !slices.Contains(dropped, m) {
				dropped = append(dropped, m)
			}
			continue
		}
		out = append(out, s)
	}
	return out, dropped
}

// splitModels makes each model of an engine an engine of its own when the
// series of one engine ID carry several values of the dialect's model label:
// two servers of one pod scraped together, or a multi-model server, whose
// series are not duplicates of one engine whatever their order. Such an
// engine's ID is the engine ID and the model joined by "/" ("0/big"; see
// modelEngineID). An engine ID whose series carry one model (the common case)
// is left as it is, its series without the model label included. Beside
// several models, a series without the model label is an aggregate of them
// when they have series of its signal (ignored, with a warning, as
// dropAggregates does for the engine label); else it stays under the engine
// ID, an engine of its own without a model.
func splitModels(r *Reading, d *Dialect, spelling int, samples []rawSample, b *scanBuffers) []rawSample {
	if d.ModelLabel == "" || slices.Contains(d.EngineLabels, d.ModelLabel) {
		return samples // the model is part of the engine ID already (Triton)
	}
	if b.firstModel == nil {
		b.firstModel = map[string]string{}
	}
	first := b.firstModel
	defer clear(first) // no label value of this body kept in the pool
	// One map lookup per change of engine or model, and a map only when an
	// engine ID has several models.
	var split map[string]bool
	var prevEngine, prevModel string
	have := false
	for i := range samples {
		s := &samples[i]
		if s.model == "" || have && s.engine == prevEngine && s.model == prevModel {
			continue
		}
		prevEngine, prevModel, have = s.engine, s.model, true
		m, ok := first[s.engine]
		switch {
		case !ok:
			first[s.engine] = s.model
		case m != s.model:
			if split == nil {
				split = map[string]bool{}
			}
			split[s.engine] = true
		}
	}
	if split == nil {
		return samples
	}
	type engineWhat struct {
		engine string
		what   int
	}
	labelled := map[engineWhat]bool{} // the signals and histograms of the models' series
	for i := range samples {
		if s := &samples[i]; s.model != "" && split[s.engine] {
			labelled[engineWhat{s.engine, s.what()}] = true
		}
	}
	out, dropped := dropWhere(d, samples, func(s *rawSample) bool {
		return s.model == "" && split[s.engine] && labelled[engineWhat{s.engine, s.what()}]
	})
	for _, m := range dropped {
		r.warn(fmt.Sprintf("a series of %s without the %s label beside series of several models of one engine is an aggregate, not an engine; ignored",
			d.spell(m, spelling), d.ModelLabel))
	}
	// The IDs: an engine's and a model's, unless two engines would share
	// one (the engine ID "0/big" beside engine "0" with models "big" and
	// "small"); then the model's is hashed.
	type engineModel struct{ engine, model string }
	ids := map[engineModel]string{}
	taken := map[string]int{}
	for i := range out {
		s := &out[i]
		switch k := (engineModel{s.engine, s.model}); {
		case s.model == "" || !split[s.engine]:
			if _, ok := ids[k]; !ok {
				ids[k] = s.engine
				taken[s.engine]++
			}
		default:
			if _, ok := ids[k]; !ok {
				id := modelEngineID(s.engine, s.model, false)
				ids[k] = id
				taken[id]++
			}
		}
	}
	for k, id := range ids {
		if k.model != "" && split[k.engine] && taken[id] > 1 {
			ids[k] = modelEngineID(k.engine, k.model, true)
		}
	}
	for i := range out {
		if s := &out[i]; s.model != "" && split[s.engine] {
			s.engine = ids[engineModel{s.engine, s.model}]
		}
	}
	return out
}

// modelEngineID returns the ID of the engine serving model among the several
// models of engine ID id: id and model joined by "/", cut and hashed as
// engineID does; with hash set, always hashed (of id and model apart, so that
// no two pairs share a hash input).
func modelEngineID(id, model string, hash bool) string {
	raw := id + "/" + model
	if !hash {
		return engineID(raw, false)
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(model))
	return excerpt.String(raw, maxLabelBytes-17) + "#" + strconv.FormatUint(h.Sum64(), 16)
}

// what is the signal of a scalar sample, NumSignals + the histogram of a
// histogram sample.
func (s *rawSample) what() int {
	if s.scalar {
		return int(s.sref.signal)
	}
	return int(NumSignals) + int(s.href.histo)
}

// metric returns the table name (first spelling) of the family the sample
// belongs to, for grouping.
func (s *rawSample) metric(d *Dialect) string {
	if s.scalar {
		return d.Sources[s.sref.signal][s.sref.pref].Sources[s.sref.part].Metric
	}
	return d.Histos[s.href.histo][s.href.pref].Metric
}

// cell is one engine's value of one source (or one SumLabel part of it),
// folded from its valid duplicate series by the duplicate rule (see
// DuplicateOutcome): the newest sample wins, and equally new ones that
// disagree give their maximum.
type cell struct {
	value  float64
	t      int64 // the value's sample time in milliseconds, 0 when unknown
	n      int   // valid series at t
	differ bool
	bad    int // rejected series
}

// add folds in one valid series' value v sampled at t (milliseconds, 0 when
// the series carries no timestamp) and returns how many series lost to a
// newer duplicate: v itself, or the ones folded before. Series without a
// timestamp are compared by value only.
func (c *cell) add(v float64, t int64) (older int) {
	switch {
	case c.n == 0:
		c.value, c.t = v, t
	case t != 0 && c.t != 0 && t < c.t:
		return 1
	case t != 0 && c.t != 0 && t > c.t:
		older = c.n
		c.value, c.t, c.n, c.differ = v, t, 0, false
	case v != c.value:
		c.differ = true
		c.value = math.Max(c.value, v)
	}
	if c.t == 0 {
		c.t = t
	}
	c.n++
	return older
}

// partKey identifies a cell: a source of a set, and a SumLabel value.
type partKey struct {
	signal   Signal
	pref     int
	part     int
	sumLabel string
}

// engineBuild collects one engine's series.
type engineBuild struct {
	id      string
	model   string
	backend bool
	cells   []keyedCell
	// buckets, by histogram and preference: le → cell; an empty map is none.
	buckets map[[2]int]map[float64]cell
	hparts  map[[3]int]cell // count and sum
	// rejected are the lines of the series rejected so far: a series read
	// by several source sets (a part of two sums) is counted and warned
	// about once.
	rejected []int
}

// reset empties the build for engine id, keeping its memory.
func (eb *engineBuild) reset(id string) {
	eb.id, eb.model, eb.backend = id, "", false
	eb.cells, eb.rejected = eb.cells[:0], eb.rejected[:0]
	for _, m := range eb.buckets {
		clear(m)
	}
	clear(eb.hparts)
}

// oldest returns the oldest sample time (milliseconds) among the cells'
// values and t (0 for none).
func (eb *engineBuild) oldest(t int64) int64 {
	older := func(c *cell) {
		if c.n > 0 && c.t != 0 && (t == 0 || c.t < t) {
			t = c.t
		}
	}
	for i := range eb.cells {
		older(&eb.cells[i].c)
	}
	for _, m := range eb.buckets {
		for _, c := range m {
			older(&c)
		}
	}
	for _, c := range eb.hparts {
		older(&c)
	}
	return t
}

// keyedCell is a cell and its key; an engine has a few dozen at most, so a
// slice scanned linearly beats a map.
type keyedCell struct {
	key partKey
	c   cell
}

// cell returns the engine's cell for k, creating it when create is set. The
// pointer is valid until the next cell is created.
func (eb *engineBuild) cell(k partKey, create bool) *cell {
	for i := range eb.cells {
		if eb.cells[i].key == k {
			return &eb.cells[i].c
		}
	}
	if !create {
		return nil
	}
	eb.cells = append(eb.cells, keyedCell{key: k})
	return &eb.cells[len(eb.cells)-1].c
}

// bucketCells returns the bucket cells of histogram and preference k.
func (eb *engineBuild) bucketCells(k [2]int) map[float64]cell {
	if eb.buckets == nil {
		eb.buckets = map[[2]int]map[float64]cell{}
	}
	m := eb.buckets[k]
	if m == nil {
		m = map[float64]cell{}
		eb.buckets[k] = m
	}
	return m
}

func (eb *engineBuild) addScalar(r *Reading, s *rawSample) {
	c := eb.cell(partKey{signal: s.sref.signal, pref: s.sref.pref, part: s.sref.part, sumLabel: s.sumLabel}, true)
	check := s.sref.signal
	if s.sref.combine == CombineRatio {
		check = Running // the parts of a ratio are counts (KV blocks): validate as such
	}
	v, reason, bad := validate(check, s.value)
	if bad {
		c.bad++
		if slices.Contains(eb.rejected, s.line) {
			return
		}
		eb.rejected = append(eb.rejected, s.line)
		if r.Invalid == nil {
			r.Invalid = map[Reason]int{}
		}
		r.Invalid[reason]++
		r.warn(fmt.Sprintf("rejected %s%s = %g: %s", s.sref.source.String(), engineSuffix(s.engine), s.value, reason))
		return
	}
	if older := c.add(v, s.ts); older > 0 {
		r.duplicates(DuplicateOlder, older, s.sref.source.String()+engineSuffix(s.engine))
	}
}

func engineSuffix(id string) string {
	if id == "" {
		return ""
	}
	return ` (engine "` + id + `")`
}

func (eb *engineBuild) addHisto(r *Reading, d *Dialect, s *rawSample) {
	k := [2]int{int(s.href.histo), s.href.pref}
	var older int
	if s.href.kind == partBucket {
		m := eb.bucketCells(k)
		c := m[s.le]
		older = c.add(s.value, s.ts)
		m[s.le] = c
	} else {
		if eb.hparts == nil {
			eb.hparts = map[[3]int]cell{}
		}
		pk := [3]int{k[0], k[1], int(s.href.kind)}
		c := eb.hparts[pk]
		older = c.add(s.value, s.ts)
		eb.hparts[pk] = c
	}
	if older > 0 {
		r.duplicates(DuplicateOlder, older, d.Histos[s.href.histo][s.href.pref].Metric+engineSuffix(s.engine))
	}
}

// resolve chooses, per engine and signal, the first alternative with a valid
// value, builds the engines' histograms and records sources and warnings.
func (e *Extractor) resolve(r *Reading, dialect, spelling int, engines map[string]*engineBuild, ids []string, b *scanBuffers) {
	d := &e.dialects[dialect]
	var use [NumSignals]signalUse
	presentPref := presentPrefs(d, engines, ids)
	key := sourcesKey{dialect: int8(dialect), spelling: int8(spelling)}
	for h := range NumHistos {
		key.histos[h] = -1
	}
	r.Engines = make([]EngineSignals, 0, len(ids))
	for _, id := range ids {
		es := e.resolveEngine(r, d, engines[id], id, &presentPref, &use)
		for h := range NumHistos {
			for p := range d.Histos[h] {
				if hist, ok := engines[id].histogram(h, p, d, spelling, id, r, &e.layouts, b); ok {
					es.Hist[h] = hist
					if key.histos[h] < 0 {
						key.histos[h] = int8(p)
					}
					break
				}
			}
		}
		r.Engines = append(r.Engines, es)
	}
	for s := range NumSignals {
		key.sets[s] = int8(presentPref[s])
		if presentPref[s] >= 0 {
			e.warnUse(r, dialect, spelling, s, presentPref[s], &use[s], len(ids))
		}
	}
	r.Sources = e.sources.get(key, &e.names)
}

// signalUse is how a signal was read over a pod's engines.
type signalUse struct {
	present  int    // engines with any series of the signal
	valid    int    // engines with a valid value
	prefs    uint64 // the alternatives read, one bit each
	fellBack []string
}

// presentPrefs returns, per signal, the most preferred source set present in
// the body (-1 for none): reported as the signal's source even when all its
// values are invalid.
func presentPrefs(d *Dialect, engines map[string]*engineBuild, ids []string) [NumSignals]int {
	var presentPref [NumSignals]int
	for s := range NumSignals {
		presentPref[s] = -1
	}
	for _, id := range ids {
		for i := range engines[id].cells {
			k := &engines[id].cells[i].key
			if k.part == 0 && d.Sources[k.signal][k.pref].Combine == CombineSum {
				continue // a sum is present by what it adds (see CombineSum)
			}
			if p := presentPref[k.signal]; p < 0 || k.pref < p {
				presentPref[k.signal] = k.pref
			}
		}
	}
	return presentPref
}

// resolveEngine reads one engine's scalar signals: per signal, the first
// source set (in preference order) with a valid value, less the signals its
// set subtracts (Minus), recording in use how each was read.
func (e *Extractor) resolveEngine(r *Reading, d *Dialect, eb *engineBuild, id string, presentPref *[NumSignals]int, use *[NumSignals]signalUse) EngineSignals {
	es := EngineSignals{ID: id, Model: eb.model, Backend: eb.backend}
	var chosen [NumSignals]int8
	for s := range NumSignals {
		chosen[s] = -1
		present := false
		for p := range d.Sources[s] {
			v, has, valid := eb.value(d, s, p, id, r)
			if !has {
				continue
			}
			if !present {
				use[s].present++
				present = true
			}
			if !valid {
				if d.Sources[s][p].Combine == CombineSum {
					// Every other set of the signal leaves out the invalid
					// part's contribution (they are its older spellings, or
					// the first part alone): reading one would undercount.
					break
				}
				continue
			}
			if p != presentPref[s] {
				use[s].fellBack = append(use[s].fellBack, id)
			}
			es.Set(s, v)
			chosen[s] = int8(p)
			use[s].valid++
			use[s].prefs |= 1 << p
			break
		}
	}
	for s := range NumSignals {
		if chosen[s] < 0 {
			continue
		}
		for _, m := range d.Sources[s][chosen[s]].Minus {
			x, ok := es.Value(m)
			if !ok {
				continue
			}
			v, _ := es.Value(s)
			if x > v {
				// A part larger than the whole it is part of: the gauges
				// contradict each other, and which one is wrong is unknown.
				r.warn(fmt.Sprintf("%s is %g for engine %q, more than %s's %g that includes it; %s drops out for that engine",
					d.Sources[m][chosen[m]].String(), x, id, d.Sources[s][chosen[s]].String(), v, s))
				if r.Invalid == nil {
					r.Invalid = map[Reason]int{}
				}
				r.Invalid[ReasonInconsistent]++
				es.Clear(s)
				use[s].valid--
				break
			}
			es.Set(s, v-x)
		}
	}
	return es
}

// warnUse warns about a signal that fell back to a less preferred source on
// some engines, or that is invalid on some or all of them.
func (e *Extractor) warnUse(r *Reading, dialect, spelling int, s Signal, pref int, u *signalUse, engines int) {
	d := &e.dialects[dialect]
	name := e.names.set(dialect, s, pref, spelling)
	for _, id := range u.fellBack {
		for p := range d.Sources[s] {
			if u.prefs&(1<<p) != 0 && p != pref {
				r.warn(fmt.Sprintf("%s has no valid value for engine %q; read %s instead", name, id, e.names.set(dialect, s, p, spelling)))
				break
			}
		}
	}
	switch {
	case u.valid == 0:
		r.warn(fmt.Sprintf("no valid %s series; %s drops out", name, s))
	case u.valid < engines:
		r.warn(fmt.Sprintf("%s is valid for %d of %d engines; the pod value uses those only", s, u.valid, engines))
	}
}

// value returns the engine's value of alternative p of signal s: has is false
// when the engine has no series of it, valid false when it has series but no
// valid value (all rejected, or a ratio missing a part).
func (eb *engineBuild) value(d *Dialect, s Signal, p int, id string, r *Reading) (v float64, has, valid bool) {
	set := d.Sources[s][p]
	partValue := func(part int) (float64, bool, bool) {
		sum, found, ok := 0.0, false, false
		for i := range eb.cells {
			k, c := eb.cells[i].key, &eb.cells[i].c
			if k.signal != s || k.pref != p || k.part != part {
				continue
			}
			found = true
			if c.n == 0 {
				continue
			}
			if c.differ {
				r.duplicates(DuplicateDisagree, 1, "")
				r.warn(fmt.Sprintf("%d duplicate series of %s for engine %q disagree; using their maximum %g",
					c.n+c.bad, set.Sources[part].String(), id, c.value))
				c.differ = false // warn and count once
			}
			sum += c.value
			ok = true
		}
		return sum, found, ok
	}
	switch set.Combine {
	case CombineRatio:
		num, h1, ok1 := partValue(0)
		den, h2, ok2 := partValue(1)
		if !h1 && !h2 {
			return 0, false, false
		}
		if !ok1 || !ok2 || !(den > 0) {
			return 0, true, false
		}
		v, _, bad := validate(s, num/den)
		return v, true, !bad
	case CombineSum:
		// A part with series but no valid value leaves the sum unknown, not
		// smaller: the set is invalid (and resolveEngine reads no other set).
		total, base, baseOK := partValue(0)
		found, partsOK := false, true
		for part := 1; part < len(set.Sources); part++ {
			x, h, o := partValue(part)
			found = found || h
			if o {
				total += x
			} else if h {
				partsOK = false
			}
		}
		if !found {
			return 0, false, false
		}
		if !base || !baseOK || !partsOK {
			return 0, true, false
		}
		v, _, bad := validate(s, total)
		return v, true, !bad
	case CombineMax:
		// The maximum over the parts present: one present without a valid
		// value leaves it unknown (the fullest pool may be that one).
		best, found, ok := 0.0, false, true
		for part := range set.Sources {
			x, h, o := partValue(part)
			found = found || h
			switch {
			case o:
				best = max(best, x)
			case h:
				ok = false
			}
		}
		return best, found, found && ok
	}
	x, h, o := partValue(0)
	if o {
		x, _, _ = validate(s, x)
	}
	return x, h, o
}

// histogram builds the engine's histogram h from alternative p; ok is false
// when the engine has none there, or it is malformed (then counted and warned).
func (eb *engineBuild) histogram(h Histo, p int, d *Dialect, spelling int, id string, r *Reading, lc *layoutCache, b *scanBuffers) (*Histogram, bool) {
	k := [2]int{int(h), p}
	buckets := eb.buckets[k]
	count, hasCount := eb.hparts[[3]int{k[0], k[1], int(partCount)}]
	sum, hasSum := eb.hparts[[3]int{k[0], k[1], int(partSum)}]
	if len(buckets) == 0 && !hasCount {
		return nil, false
	}
	reject := func(reason Reason, why string) (*Histogram, bool) {
		if r.Invalid == nil {
			r.Invalid = map[Reason]int{}
		}
		r.Invalid[reason]++
		r.warn(fmt.Sprintf("rejected histogram %s: %s", d.spell(d.Histos[h][p].Metric, spelling)+engineSuffix(id), why))
		return nil, false
	}
	// The bounds are gathered in a scratch slice: the layout cache has them
	// already, but for a pod's first scrape (or a new layout).
	bounds := b.bounds[:0]
	for le := range buckets {
		if !math.IsInf(le, 1) {
			bounds = append(bounds, le)
		}
	}
	b.bounds = bounds
	slices.Sort(bounds)
	if len(bounds) > 0 && bounds[0] < 0 { // -Inf too
		// Every histogram read counts seconds or tokens: a bound below 0
		// would give a negative quantile, and -Inf a NaN in a pooled one.
		return reject(ReasonMalformed, fmt.Sprintf("bucket bound le=%q is below 0 (its observations are seconds or tokens)", strconv.FormatFloat(bounds[0], 'g', -1, 64)))
	}
	inf, hasInf := buckets[math.Inf(1)]
	total := 0.0
	switch {
	case hasInf:
		total = inf.value
	case hasCount:
		total = count.value
	default:
		return reject(ReasonMalformed, "no +Inf bucket and no _count")
	}
	if hasCount && count.value > total {
		total = count.value
	}
	hist := &Histogram{Counts: make([]float64, len(bounds)), Count: total}
	if hasSum {
		hist.Sum = sum.value
	}
	prev := 0.0
	for i, b := range bounds {
		c := buckets[b].value
		if _, reason, bad := validate(Preemptions, c); bad {
			return reject(reason, fmt.Sprintf("bucket le=%g is %g", b, c))
		}
		if c < prev-prev*1e-12 {
			return reject(ReasonMalformed, fmt.Sprintf("bucket le=%g (%g) is below the bucket before it (%g): not cumulative", b, c, prev))
		}
		c = max(c, prev)
		hist.Counts[i] = c
		prev = c
	}
	if _, reason, bad := validate(Preemptions, total); bad {
		return reject(reason, fmt.Sprintf("count is %g", total))
	}
	if total < prev {
		return reject(ReasonMalformed, fmt.Sprintf("count %g is below the last bucket (%g)", total, prev))
	}
	if math.IsNaN(hist.Sum) || math.IsInf(hist.Sum, 0) {
		hist.Sum = 0
	}
	hist.Bounds = lc.intern(bounds, &b.key)
	return hist, true
}

// vllmVersion names the vLLM metrics generation: V1 exports the engine label and,
// from 0.9.2, kv_cache_usage_perc; V0 has neither.
func vllmVersion(kvSource string, engineLabelled bool) string {
	if kvSource == "vllm:kv_cache_usage_perc" || engineLabelled {
		return "vllm-v1"
	}
	return "vllm-v0"
}

// compareEngineIDs orders engine IDs numerically when both are numbers ("2" before
// "10"), else lexically.
func compareEngineIDs(a, b string) int {
	if len(a) != len(b) && isDigits(a) && isDigits(b) {
		return len(a) - len(b)
	}
	return strings.Compare(a, b)
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

func (e *Extractor) lookedFor() string {
	var names []string
	for _, d := range e.dialects {
		if src := d.Sources[QueueDepth]; len(src) > 0 {
			names = append(names, src[len(src)-1].Sources[0].Metric)
		}
	}
	return strings.Join(names, ", ")
}

// layoutCache interns histogram bucket bounds, so that the readings of thousands
// of pods with the same buckets share one slice. Bounded: past maxLayouts
// distinct layouts new ones are not interned.
type layoutCache struct {
	mu sync.RWMutex
	m  map[string][]float64
}

const maxLayouts = 1024

// intern returns the shared slice of bounds, which is a scratch slice the
// caller reuses: the equal one seen before, else a copy (kept while the cache
// has room). key is scratch space for the cache key, the bounds' bits.
func (lc *layoutCache) intern(bounds []float64, key *[]byte) []float64 {
	k := (*key)[:0]
	for _, b := range bounds {
		k = binary.LittleEndian.AppendUint64(k, math.Float64bits(b))
	}
	*key = k
	lc.mu.RLock()
	got, ok := lc.m[string(k)] // no allocation: Go optimises string(b) in a map index
	lc.mu.RUnlock()
	if ok {
		return got
	}
	out := make([]float64, len(bounds))
	copy(out, bounds)
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if got, ok := lc.m[string(k)]; ok {
		return got
	}
	if lc.m == nil {
		lc.m = map[string][]float64{}
	}
	if len(lc.m) < maxLayouts {
		lc.m[string(k)] = out
	}
	return out
}
