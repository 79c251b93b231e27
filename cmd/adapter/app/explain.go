package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/saturation-adapter/saturation-adapter/cmd/internal/help"

	cliflag "k8s.io/component-base/cli/flag"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	promsource "github.com/saturation-adapter/saturation-adapter/pkg/prometheus"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// ExplainPod is the explain output for one pod: its newest reading, and its
// evaluation under the chosen policy over all of its scrapes.
type ExplainPod struct {
	// Source names the pod's files, comma-separated in time order.
	Source string `json:"source"`
	// Scrapes is the number of files (readings) of the pod.
	Scrapes         int                     `json:"scrapes"`
	Dialect         string                  `json:"dialect"`
	Models          []string                `json:"models"`
	Metrics         map[string]string       `json:"metrics"`
	Engines         []signals.EngineSignals `json:"engines"`
	QueueDepth      *float64                `json:"queueDepth"`
	QueueDeferred   *float64                `json:"queueDeferred,omitempty"`
	Running         *float64                `json:"running"`
	KVCacheUsage    *float64                `json:"kvCacheUsage"`
	KVCacheUsageMax *float64                `json:"kvCacheUsageMax"`
	Preemptions     *float64                `json:"preemptions"`
	// State is the pod's engine state, EngineStates each engine's.
	State        policy.EngineState    `json:"state"`
	EngineStates []policy.EngineReport `json:"engineStates,omitempty"`
	// Terms, Dominant, Saturation, Counted and Why: see policy.PodReport.
	Terms      []policy.TermValue     `json:"terms"`
	Dominant   policy.TermKind        `json:"dominant,omitempty"`
	Saturation *float64               `json:"saturation"`
	Counted    float64                `json:"counted"`
	Why        string                 `json:"why,omitempty"`
	Invalid    map[signals.Reason]int `json:"invalid"`
	// Duplicates counts the duplicate series not used as read, by outcome
	// (signals.DuplicateOutcome); the warnings say which.
	Duplicates map[signals.DuplicateOutcome]int `json:"duplicates,omitempty"`
	Warnings   []string                         `json:"warnings"`
}

// ExplainPool is what an HPA would see for the pods as one pool of Ready pods:
// the chosen policy's value (and the built-in llm_saturation and
// llm_demand_replicas), or, when no pod has a value, the error the server
// would return, with null values.
type ExplainPool struct {
	Pods           int                `json:"pods"`
	Unknown        int                `json:"unknown"`
	Policy         string             `json:"policy"`
	Value          *float64           `json:"value"`
	Latency        []policy.TermValue `json:"latency,omitempty"`
	Saturation     *float64           `json:"saturation"`
	DemandReplicas *float64           `json:"demandReplicas"`
	// GatewayQueue is the gateway-held backlog the policy's gateway input adds
	// (from the --gateway files), nil without one.
	GatewayQueue *float64 `json:"gatewayQueue,omitempty"`
	// Ahead says how the policy's peak hold, trend and scheduled minimums
	// moved the value (replicas), nil when it has none. Explain holds no
	// history across runs: its peak and trend are those of the pool's answers
	// at the reading times given.
	Ahead *policy.AheadValue `json:"ahead,omitempty"`
	// Answers is, for a policy with a peak hold or a trend, how many answers
	// the pool state saw (explainReplayed: one per distinct reading time from
	// the first at which every pod has a reading, within the policy's memory,
	// the newest included); AnswersSpan is the time from the first to the
	// newest (a Go duration, "" for one answer).
	Answers     int    `json:"answers,omitempty"`
	AnswersSpan string `json:"answersSpan,omitempty"`
	// TrendUnfit says why a policy's trend adds nothing because the samples
	// it holds are too few or too close for its fit
	// (policy.PoolState.TrendSamples), "" otherwise.
	TrendUnfit string `json:"trendUnfit,omitempty"`
	// Starting and InFlight: pods of a scale-up still starting (--starting)
	// and what a demand policy does for them ("scale-from-zero in flight: …").
	Starting int    `json:"starting,omitempty"`
	InFlight string `json:"inFlight,omitempty"`
	Error    string `json:"error,omitempty"`
	// Warnings say what an HPA on this policy would get wrong: requests held by
	// flow control that the policy does not count, a mean policy
	// read at zero Ready pods (NC-08).
	Warnings []string `json:"warnings,omitempty"`
}

// Explanation is the whole explain output.
type Explanation struct {
	Pods []ExplainPod `json:"pods"`
	Pool ExplainPool  `json:"pool"`
	// Warnings are the policy configuration's own (every policy's
	// Policy.Warnings, as the server logs them when it loads --config: a queue
	// set point at or above the admission cap) and what explain cannot do
	// offline (a role: policy filters pods by a label no file carries).
	Warnings []string `json:"warnings,omitempty"`
}

// ExplainOptions are explain's own flags.
type ExplainOptions struct {
	// Policy is the metric to evaluate (a name of the catalog).
	Policy string
	// Interval is the time between the scrapes of one pod, for files whose
	// samples carry no timestamps.
	Interval time.Duration
	// Output is json or table.
	Output string
	// PrometheusResponses are saved Prometheus answers to evaluate instead of
	// /metrics files (see ExplainPrometheus).
	PrometheusResponses []string
	// Gateways are /metrics files of the gateway's pods (the endpoint picker),
	// one per pod: the backlog of a policy's gateway input, and requests held
	// by flow control that a policy without one misses.
	Gateways []string
	// Starting is the number of pods a scale-up created that are still
	// starting (policy.PoolBuilder.AddStarting).
	Starting int
	// At is, for files without timestamps, when the newest scrape of the pod
	// with the most files was taken (each pod's files Interval apart from its
	// first), and the time of a pool without pods: scheduled minimums are
	// open or closed then. Zero: the clock.
	At time.Time
}

func newExplainCommand() *cobra.Command {
	scoring := NewScoringOptions()
	prom := NewPrometheusOptions()
	eo := ExplainOptions{Policy: policy.MetricSaturation, Interval: 2 * time.Second, Output: "json"}
	at := "now"
	cmd := &cobra.Command{
		Use:   "explain POD... [--gateway FILE] | explain --gateway FILE --policy NAME | explain --prometheus-response FILE",
		Short: "Evaluate /metrics bodies or a saved Prometheus answer offline and print the saturation as JSON or a table",
		Long: `explain evaluates each POD as the server evaluates a pod: a POD is one /metrics file, or
several scrapes of one pod comma-separated in time order (a.prom,a2.prom,a3.prom; - reads
standard input), taken --interval apart unless their samples carry timestamps. It prints each
pod's signals, every term of --policy with its value, set point and ratio, the dominant term,
each engine's state (wedged, frozen, sleeping, clipped) and, under "pool", what an HPA would
be served for these pods as one pool. It needs no cluster. --config and the scoring flags
are the server's. A policy's peak hold and trend are those of the pool's answers at the
reading times given (one per time, at least half of --interval apart), as if the HPA had
asked then.

With --prometheus-response FILE (repeatable; - reads standard input) it evaluates instead
what Prometheus answered to an instant query of the engines' series (the JSON of
/api/v1/query), as the server does with --source=prometheus: every (namespace, pod) of the
answer is one Ready pod, each Prometheus scrape in a range selector's answer one reading.

With --gateway FILE (repeatable, one per gateway pod: the endpoint picker's /metrics) a
policy with a gateway input adds the gateway's queue to the demand, as the server does; with
no POD, that is a pool at zero replicas, whose demand is the gateway's alone. A gateway
holding requests that --policy does not count is warned about.`,
		Example: `  # One scrape of one pod, as a table
  curl -s http://10.0.0.7:8000/metrics > a.prom
  adapter explain -o table a.prom

  # Four scrapes of one pod 2 s apart (engine states need at least 3
  # spanning half of --engine-state-window: 5 of its default 10 s), and a second pod
  adapter explain a1.prom,a2.prom,a3.prom,a4.prom b.prom --policy llm_demand_replicas

  # A policy of your configuration file, with the endpoint picker's /metrics
  adapter explain --config policies.yaml --policy chat-saturation --gateway epp.prom a.prom

  # What Prometheus answered (--source=prometheus)
  adapter explain --prometheus-response answer.json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 && len(eo.PrometheusResponses) == 0 && len(eo.Gateways) == 0 {
				return fmt.Errorf("explain needs at least one POD (a /metrics file, or several comma-separated; - reads standard input), --gateway FILE or --prometheus-response FILE")
			}
			if (len(args) > 0 || len(eo.Gateways) > 0) && len(eo.PrometheusResponses) > 0 {
				return fmt.Errorf("explain takes /metrics files (POD, --gateway) or --prometheus-response, not both")
			}
			return nil
		},
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if at != "now" {
				t, err := time.Parse(time.RFC3339Nano, at)
				if err != nil {
					return fmt.Errorf("--at=%q: not an RFC 3339 time (2026-12-07T09:00:00Z, or with an offset +01:00) nor now", at)
				}
				if t.Before(minExplainAt) {
					return fmt.Errorf("--at=%q: before %s; give a time the pods could have been scraped at", at, minExplainAt.Format(time.RFC3339))
				}
				eo.At = t
			}
			return explainRun(cmd, args, &scoring, prom, eo)
		},
	}
	var fss cliflag.NamedFlagSets
	in := fss.FlagSet("input")
	in.DurationVar(&eo.Interval, "interval", eo.Interval, "Time between the scrapes of one pod, for files whose samples carry no timestamps.")
	in.StringVar(&at, "at", at, "For files whose samples carry no timestamps, when the newest scrape of the pod with the most files was taken (each pod's files --interval apart from its first), and the time of a pool without pods (RFC 3339, e.g. 2026-12-07T09:00:00+01:00, 1970 or later, or now): a policy's scheduled minimums are open or closed then.")
	in.StringArrayVar(&eo.Gateways, "gateway", nil, "The /metrics of a gateway pod (the endpoint picker), for a policy with a gateway input and to warn about requests flow control holds; repeatable, one per pod.")
	in.IntVar(&eo.Starting, "starting", 0, "Pods a scale-up created that are still starting (not Ready, within the server's --startup-grace), at most 2147483647: a demand policy then serves at least the pods given and these (scale from zero in flight).")
	in.StringArrayVar(&eo.PrometheusResponses, "prometheus-response", nil, "A saved answer of Prometheus's /api/v1/query (a vector, or a range selector's matrix) to evaluate instead of /metrics files; repeatable.")
	prom.AddLabelFlags(in)
	out := fss.FlagSet("output")
	out.StringVar(&eo.Policy, "policy", eo.Policy, "Metric to evaluate: a built-in name or one of --config.")
	out.StringVarP(&eo.Output, "output", "o", eo.Output, "Output format: json or table.")
	scoring.AddFlags(fss.FlagSet("saturation (as the server's)"))
	// The server reloads --config; explain reads it once.
	fss.FlagSet("saturation (as the server's)").Lookup("config").Usage = "Policy configuration file (YAML), as the server's --config: " +
		"metrics beside the built-in ones, each with its terms, set points and rules."
	help.Set(cmd, fss)
	return cmd
}

// explainRun validates explain's flags (every bad one at once), evaluates the
// PODs or the saved Prometheus answers, and writes the explanation as a table or
// as indented JSON.
func explainRun(cmd *cobra.Command, args []string, scoring *ScoringOptions, prom PrometheusOptions, eo ExplainOptions) error {
	var errs []error
	errs = append(errs, scoring.Validate()...)
	errs = append(errs, prom.ValidateLabels()...)
	if eo.Interval <= 0 || eo.Interval > MaxScrapeInterval {
		errs = append(errs, fmt.Errorf("--interval=%s: must be > 0 and at most %s", eo.Interval, MaxScrapeInterval))
	}
	if eo.Starting < 0 || eo.Starting > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("--starting=%d: must be in [0, %d] (an HPA's maxReplicas is an int32)", eo.Starting, math.MaxInt32))
	}
	if eo.Output != "json" && eo.Output != "table" {
		errs = append(errs, fmt.Errorf("-o=%q: must be json or table", eo.Output))
	}
	if len(errs) > 0 {
		return utilerrors.NewAggregate(errs)
	}
	var ex Explanation
	var err error
	if len(eo.PrometheusResponses) > 0 {
		ex, err = ExplainPrometheus(eo.PrometheusResponses, *scoring, prom, eo, cmd.InOrStdin())
	} else {
		ex, err = Explain(args, *scoring, eo, cmd.InOrStdin())
	}
	if err != nil {
		return err
	}
	if eo.Output == "table" {
		return writeExplainTable(cmd.OutOrStdout(), ex)
	}
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(ex)
}

// Explain evaluates pods as the server evaluates them: each argument is one
// Ready pod, its files its scrapes in time order, read by the server's
// extractor into the server's History and pooled by the same
// policy.PoolBuilder under the same catalog (built-in and --config). The
// evaluation happens at the newest reading of any pod; a pod whose newest
// reading is older than 3 × interval before that is stale, as in the server
// with its default --max-sample-age. It fails on the first file that cannot
// be read or parsed, or that carries no supported engine metrics, naming it.
func Explain(pods []string, scoring ScoringOptions, eo ExplainOptions, stdin io.Reader) (Explanation, error) {
	catalog, pol, err := explainPolicy(scoring, eo)
	if err != nil {
		return Explanation{}, err
	}
	if eo.Interval <= 0 {
		eo.Interval = 2 * time.Second
	}
	if eo.At.IsZero() {
		eo.At = time.Now()
	}
	// Files without timestamps: the newest of the pod with the most files
	// was taken at eo.At, and each pod's k-th file k intervals after the
	// first of that pod.
	most := 0
	for _, arg := range pods {
		most = max(most, strings.Count(arg, ",")+1)
	}
	first := eo.At.Add(-time.Duration(most-1) * eo.Interval)
	e := signals.NewExtractor()
	hopts := history.HistoryOptions{Needs: catalog.Needs(), StateWindow: scoring.StateWindow}
	gateways, err := explainGateways(catalog, eo.Gateways, stdin)
	if err != nil {
		return Explanation{}, err
	}
	inputs := make([]explainInput, len(pods))
	for i, arg := range pods {
		inputs[i].source = arg
		var prev *signals.Reading
		var prevFile string
		for k, f := range strings.Split(arg, ",") {
			body, err := readFile(f, stdin)
			if err != nil {
				return Explanation{}, err
			}
			r, err := e.Extract(body)
			if err != nil {
				return Explanation{}, fmt.Errorf("%s: %w", f, err)
			}
			r.Time = first.Add(time.Duration(k) * eo.Interval)
			if !r.SampleTime.IsZero() {
				r.Time = r.SampleTime
			}
			// Times of files without timestamps are made up (--interval
			// apart): they cannot be ordered against real ones.
			if prev != nil && prev.SampleTime.IsZero() != r.SampleTime.IsZero() {
				stamped, bare := f, prevFile
				if r.SampleTime.IsZero() {
					stamped, bare = prevFile, f
				}
				return Explanation{}, fmt.Errorf("%s: its samples carry timestamps and those of %s do not: give one pod's scrapes all with timestamps or all without", stamped, bare)
			}
			// The server drops a scrape older than the pod's newest (and a
			// scrape as old replaces it: the engine has not updated); here the
			// order is the user's, so an older one is a mistake to name.
			if prev != nil && r.Time.Before(prev.Time) {
				return Explanation{}, fmt.Errorf("%s: its samples are from %s, before those of %s (%s): give one pod's scrapes in time order",
					f, r.Time.UTC().Format(time.RFC3339Nano), prevFile, prev.Time.UTC().Format(time.RFC3339Nano))
			}
			prev, prevFile = &r, f
			inputs[i].add(&r, hopts)
		}
	}
	return explainReplayed(catalog, pol, inputs, gateways, eo.Interval, eo.Starting, eo.At), nil
}

// explainGateways reads the --gateway files with the server's extractor, reading
// the catalog's gateway queue metrics and the inference extension's default one.
func explainGateways(catalog *policy.Catalog, files []string, stdin io.Reader) ([]*signals.Reading, error) {
	metrics := catalog.Needs().GatewayMetrics
	if !slices.Contains(metrics, signals.DefaultGatewayQueueMetric) {
		metrics = append(slices.Clone(metrics), signals.DefaultGatewayQueueMetric)
	}
	e := signals.NewExtractorWith(signals.ExtractOptions{GatewayMetrics: metrics})
	var out []*signals.Reading
	for _, f := range files {
		body, err := readFile(f, stdin)
		if err != nil {
			return nil, err
		}
		r, err := e.Extract(body)
		if err != nil {
			return nil, fmt.Errorf("--gateway %s: %w", f, err)
		}
		if len(r.Gateway) == 0 && len(r.FlowControl) == 0 {
			// Flow-control families without a queue series are a gateway with
			// nothing held (the endpoint picker deletes idle flows' series), as
			// the server reads it.
			return nil, fmt.Errorf("--gateway %s: no series of %s: is it the endpoint picker's /metrics, with flow control on?", f, strings.Join(metrics, ", "))
		}
		out = append(out, &r)
	}
	return out, nil
}

// ExplainPrometheus evaluates saved Prometheus answers as the server does with
// --source=prometheus: each answer is decoded as the Prometheus HTTP API's
// JSON by the server's decoder (pkg/prometheus.ReadingsOf), its series are
// joined to pods by the namespace and pod labels, and each pod's readings
// (one per Prometheus scrape) are read by the server's extractor into the
// server's History and pooled by the same PoolBuilder, at the newest reading,
// with the server's default max sample age (3 × --prometheus-scrape-interval).
// It fails on an answer that cannot be read, one without a pod's series, or a
// pod without engine metrics, naming it.
func ExplainPrometheus(files []string, scoring ScoringOptions, prom PrometheusOptions, eo ExplainOptions, stdin io.Reader) (Explanation, error) {
	catalog, pol, err := explainPolicy(scoring, eo)
	if err != nil {
		return Explanation{}, err
	}
	e := signals.NewExtractor()
	byPod := map[types.NamespacedName][]*signals.Reading{}
	for _, f := range files {
		body, err := readFile(f, stdin)
		if err != nil {
			return Explanation{}, err
		}
		rs, errs, err := promsource.ReadingsOf(body, prom.Labels(), e)
		if err != nil {
			if qerr := (*promsource.QueryError)(nil); errors.As(err, &qerr) {
				return Explanation{}, fmt.Errorf("%s: Prometheus's error answer: %w", f, err)
			}
			return Explanation{}, fmt.Errorf("%s: %w", f, err)
		}
		if len(errs) > 0 {
			bad := make([]string, 0, len(errs))
			for pod, err := range errs {
				bad = append(bad, fmt.Sprintf("pod %s: %v", pod, err))
			}
			slices.Sort(bad)
			return Explanation{}, fmt.Errorf("%s: %s", f, strings.Join(bad, "; "))
		}
		for pod, r := range rs {
			byPod[pod] = append(byPod[pod], r...)
		}
	}
	if len(byPod) == 0 {
		return Explanation{}, fmt.Errorf("%s: no series with the labels %s and %s: no pod to evaluate (check --prometheus-namespace-label and --prometheus-pod-label)",
			strings.Join(files, ", "), prom.NamespaceLabel, prom.PodLabel)
	}
	names := make([]types.NamespacedName, 0, len(byPod))
	for pod := range byPod {
		names = append(names, pod)
	}
	slices.SortFunc(names, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	hopts := history.HistoryOptions{Needs: catalog.Needs(), StateWindow: max(scoring.StateWindow, 3*prom.ScrapeInterval)}
	inputs := make([]explainInput, len(names))
	for i, pod := range names {
		rs := byPod[pod]
		slices.SortStableFunc(rs, func(a, b *signals.Reading) int { return a.Time.Compare(b.Time) })
		inputs[i] = explainInput{source: pod.String()}
		for _, r := range rs {
			inputs[i].add(r, hopts)
		}
	}
	return explainReplayed(catalog, pol, inputs, nil, prom.ScrapeInterval, eo.Starting, eo.At), nil
}

// explainPolicy returns the catalog of the scoring options and the policy
// explain evaluates.
func explainPolicy(scoring ScoringOptions, eo ExplainOptions) (*policy.Catalog, *policy.Policy, error) {
	catalog, err := scoring.Catalog()
	if err != nil {
		return nil, nil, err
	}
	if eo.Policy == "" {
		eo.Policy = policy.MetricSaturation
	}
	pol := catalog.Lookup(eo.Policy)
	if pol == nil {
		return nil, nil, fmt.Errorf("--policy=%s: not in the catalog (%s)", eo.Policy, strings.Join(catalog.Names(), ", "))
	}
	return catalog, pol, nil
}

// explainInput is one pod to explain: its name in the output, its number of
// readings and its history; steps is the history after each reading, oldest
// first (the last is h), for the replay of a policy that remembers.
type explainInput struct {
	source  string
	scrapes int
	h       *history.History
	steps   []*history.History
}

// add appends r, newer than the pod's readings, to its history.
func (in *explainInput) add(r *signals.Reading, o history.HistoryOptions) {
	in.h = in.h.Append(r, o)
	in.steps = append(in.steps, in.h)
	in.scrapes++
}

// minExplainAt is the earliest --at taken: 1970-01-01T00:00:00Z, the Unix
// epoch (the zero time.Time, year 1, means the clock).
var minExplainAt = time.Unix(0, 0).UTC()

// maxExplainAnswers bounds the answers explain replays for a policy that
// remembers (explainReplayed): at most one per 1/1024 of its memory, so that a
// saved Prometheus answer of many readings costs at most 1,024 evaluations of
// the pool, whatever --prometheus-scrape-interval says.
const maxExplainAnswers = 1024

// explainReplayed explains the pods at their newest reading (explain, a
// reading older than 3 × interval then being stale) with a pool state that
// has seen the pool's answer at earlier reading times, as if the HPA had asked
// then: a policy with a peak hold or a trend remembers the demand it served
// (policy.PoolState), and the server fits its trend and holds its peak over
// those answers. The answers start once every pod has a reading (the pool is
// then whole), lie within the policy's memory (Policy.Memory) before the
// newest, and are at least interval/2 apart (one per round of scrapes however
// the pods' scrapes are staggered: 300 pods of 150 readings each make about
// 150 answers, not 45,000) and at most maxExplainAnswers to the memory. The
// --gateway files and --starting count at every answer, as they are the only
// ones given. Without a peak hold or a trend there is nothing to replay: one
// evaluation, at the newest reading (at idle, without pods).
func explainReplayed(catalog *policy.Catalog, pol *policy.Policy, pods []explainInput, gateways []*signals.Reading, interval time.Duration, starting int, idle time.Time) Explanation {
	maxAge := 3 * interval
	st := &policy.PoolState{}
	var times []time.Time
	if pol.Remembers() && len(pods) > 0 {
		var start time.Time // every pod has a reading from start on
		for _, p := range pods {
			if at := p.steps[0].Latest().At(); at.After(start) {
				start = at
			}
		}
		for _, p := range pods {
			for _, h := range p.steps {
				if at := h.Latest().At(); !at.Before(start) {
					times = append(times, at)
				}
			}
		}
		slices.SortFunc(times, time.Time.Compare)
		// The newest is the explanation's own answer; an earlier one counts
		// within the policy's memory before it (older ones are forgotten by
		// then), at least gap (and a nanosecond: one answer per reading time)
		// after the previous and before the newest.
		newest := times[len(times)-1]
		gap := max(interval/2, pol.Memory()/maxExplainAnswers, 1)
		kept := times[:0]
		for _, at := range times[:len(times)-1] {
			if newest.Sub(at) < pol.Memory() && newest.Sub(at) >= gap && (len(kept) == 0 || at.Sub(kept[len(kept)-1]) >= gap) {
				kept = append(kept, at)
			}
		}
		times = append(kept, newest)
	}
	step := make([]explainInput, len(pods))
	for k, at := range times {
		if k == len(times)-1 {
			break // the newest: the explanation itself
		}
		for i, p := range pods {
			n, _ := slices.BinarySearchFunc(p.steps, at, func(h *history.History, at time.Time) int {
				if h.Latest().At().After(at) {
					return 1
				}
				return -1
			})
			step[i] = explainInput{source: p.source, scrapes: n, h: p.steps[n-1]}
		}
		explain(catalog, pol, step, gateways, maxAge, starting, st, idle)
	}
	ex := explain(catalog, pol, pods, gateways, maxAge, starting, st, idle)
	if pol.Remembers() {
		ex.Pool.Answers = max(len(times), 1)
		if len(times) > 1 {
			ex.Pool.AnswersSpan = times[len(times)-1].Sub(times[0]).String()
		}
		if n, fit := st.TrendSamples(); pol.Trend != nil && ex.Pool.Ahead != nil && !ex.Pool.Ahead.Unremembered && (n < 3 || 2*fit < pol.Trend.Window) {
			ex.Pool.TrendUnfit = fmt.Sprintf("no rise fitted: the fit needs 3 answers within the trend's window spanning at least %s, half of it (one kept per 1/64 of it); it holds %d spanning %s",
				pol.Trend.Window/2, n, fit)
		}
	}
	return ex
}

// explain pools the pods as one pool of Ready pods at the newest reading of
// any, a reading older than maxAge before that being stale, with the gateway's
// queue when the policy has a gateway input; a pool without pods at idle. The
// pool's answer goes through st (its peak hold and trend).
func explain(catalog *policy.Catalog, pol *policy.Policy, pods []explainInput, gateways []*signals.Reading, maxAge time.Duration, starting int, st *policy.PoolState, idle time.Time) Explanation {
	var now time.Time
	if len(pods) == 0 {
		now = idle
	}
	for _, p := range pods {
		if at := p.h.Latest().At(); at.After(now) {
			now = at
		}
	}
	sat, demand := catalog.Lookup(policy.MetricSaturation), catalog.Lookup(policy.MetricDemandReplicas)
	chosen, satPool, demandPool := pol.NewPool(now, maxAge), sat.NewPool(now, maxAge), demand.NewPool(now, maxAge)
	var ex Explanation
	for _, in := range pods {
		h := in.h
		r := h.Latest()
		rep := pol.ExplainPod(h, "", now, maxAge)
		t := ExplainPod{
			Source: in.source, Scrapes: in.scrapes, Dialect: r.Dialect, Models: r.Models, Metrics: r.Sources, Engines: r.Engines,
			QueueDepth: r.Ptr(signals.QueueDepth), QueueDeferred: r.Ptr(signals.QueueDeferred), Running: r.Ptr(signals.Running),
			KVCacheUsage: r.Ptr(signals.KVCacheUsage), KVCacheUsageMax: r.KVCacheUsageMax, Preemptions: r.Ptr(signals.Preemptions),
			State: rep.State, EngineStates: rep.Engines, Terms: rep.Terms, Dominant: rep.Dominant,
			Counted: rep.Counted, Why: rep.Why, Invalid: r.Invalid, Duplicates: r.Duplicates, Warnings: r.Warnings,
		}
		if v := chosen.Add(h, ""); v.Present {
			t.Saturation = &v.Value
		}
		satPool.Add(h, "")
		demandPool.Add(h, "")
		ex.Pods = append(ex.Pods, t)
	}
	gwErr := ""
	if g := pol.Gateway; g != nil {
		if q, err := g.Queue(gateways...); err == nil {
			chosen.AddGateway(q)
			ex.Pool.GatewayQueue = &q
		} else if len(gateways) == 0 {
			gwErr = fmt.Sprintf("%s has a gateway input (pods %s): its queue is unknown without --gateway FILE (the server would answer 503 and the HPA would hold)", pol.Name, g.Selector)
		} else {
			gwErr = fmt.Sprintf("the --gateway files: %v: the gateway's queue is unknown (the server would answer 503 and the HPA would hold)", err)
		}
	}
	chosen.AddStarting(starting)
	p := chosen.Pool()
	if pol.HasAhead() {
		p = pol.Ahead(now, st, p)
		ex.Pool.Ahead = p.Ahead
	}
	ex.Pool.Pods, ex.Pool.Unknown, ex.Pool.Policy, ex.Pool.Latency = p.Pods, p.Pods-p.Known, pol.Name, p.Latency
	ex.Pool.Starting, ex.Pool.InFlight = p.Starting, p.InFlight
	ex.Pool.Saturation, ex.Pool.DemandReplicas = satPool.Pool().Value, demandPool.Pool().Value
	switch {
	case gwErr != "":
		ex.Pool.Error = gwErr
	case len(pods) == 0 && pol.Gateway == nil:
		ex.Pool.Error = fmt.Sprintf("no pods: the server would answer 404, and an HPA at zero replicas would never wake on %s; scale from zero needs a policy with a gateway input", pol.Name)
	case p.Value == nil:
		ex.Pool.Error = fmt.Sprintf("no pod has a value for %s: the server would answer 503 and the HPA would hold", pol.Name)
	default:
		ex.Pool.Value = p.Value
	}
	ex.Pool.Warnings = gatewayWarnings(pol, gateways, p)
	if pol.Gateway != nil {
		ex.Pool.Warnings = append(ex.Pool.Warnings, pol.Gateway.Notes(gateways...)...)
	}
	for _, cp := range catalog.Policies() {
		ex.Warnings = append(ex.Warnings, cp.Warnings()...)
	}
	if pol.Role != "" {
		ex.Warnings = append(ex.Warnings, fmt.Sprintf("policy %s counts only pods labelled %s=%s; explain cannot read pod labels offline, so every pod given counts as one of them",
			pol.Name, catalog.RoleLabel(), pol.Role))
	}
	return ex
}

// gatewayWarnings says what an HPA on policy would miss: requests the gateway
// holds in series that the policy's gateway input does not select (none, when
// it has no input), and a mean policy read at zero Ready pods,
// which a Value target turns into 0 replicas whatever the demand (NC-08).
func gatewayWarnings(pol *policy.Policy, gateways []*signals.Reading, p policy.Pool) []string {
	var out []string
	for _, r := range gateways {
		mirrors := map[string]bool{} // queue-size series already counted or warned, by labels
		for i := range r.Gateway {
			if s := &r.Gateway[i]; pol.Gateway != nil && pol.Gateway.Reads(s.Metric) {
				mirrors[gatewayLabels(s.Labels)] = true
			}
		}
		for i := range r.Gateway {
			s := &r.Gateway[i]
			if s.Value <= 0 || !strings.HasSuffix(s.Metric, "_queue_size") || (pol.Gateway != nil && pol.Gateway.Reads(s.Metric) && s.Matches(pol.Gateway.Match)) {
				continue
			}
			if id := gatewayLabels(s.Labels); strings.HasSuffix(s.Metric, "_flow_control_queue_size") {
				// llm-d exports each queue series under its own and the upstream
				// name (llm_d_epp_flow_control_queue_size and
				// inference_extension_flow_control_queue_size): the same requests.
				if pol.Gateway == nil || !pol.Gateway.Reads(s.Metric) {
					if mirrors[id] {
						continue
					}
					mirrors[id] = true
				}
			}
			why := "it has no gateway input"
			if pol.Gateway != nil {
				why = "its gateway input does not select this series"
			}
			out = append(out, fmt.Sprintf("the gateway holds %g requests in %s%s that %s does not count (%s): its HPA scales on the engines alone, which sit at their set points while requests wait",
				s.Value, s.Metric, gatewayLabels(s.Labels), pol.Name, why))
		}
	}
	if pol.Gateway != nil && pol.Kind == policy.KindMean && p.Pods == 0 && p.Value != nil && *p.Value > 0 {
		out = append(out, fmt.Sprintf("%s is a mean: with target type Value the HPA multiplies it by the Ready pods, 0 here, and computes 0 replicas from any demand; use a demand policy with target type AverageValue", pol.Name))
	}
	return out
}

// gatewayLabels renders a gateway series' labels as PromQL does, sorted.
func gatewayLabels(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, l[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// writeExplainTable prints the human summary of -o table.
func writeExplainTable(w io.Writer, ex Explanation) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tDIALECT\tSTATE\tQUEUE\tRUNNING\tKV\tTERMS (value/set point = ratio)\tSATURATION\tCOUNTED")
	for _, p := range ex.Pods {
		var terms []string
		for _, t := range p.Terms {
			mark := ""
			if t.Term == p.Dominant {
				mark = "*"
			}
			if t.Capped {
				mark += " (capped)"
			}
			if t.Dropped {
				terms = append(terms, fmt.Sprintf("%s dropped", t.Term))
				continue
			}
			terms = append(terms, fmt.Sprintf("%s %.4g/%.4g=%.3g%s", t.Term, t.Value, t.SetPoint, t.Ratio, mark))
		}
		if len(terms) == 0 {
			terms = []string{"-"}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.3g\n", p.Source, p.Dialect, p.State, num(p.QueueDepth), num(p.Running), num(p.KVCacheUsage),
			strings.Join(terms, ", "), num(p.Saturation), p.Counted)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range ex.Pods {
		for _, e := range p.EngineStates {
			switch {
			case e.State != policy.StateOK:
				fmt.Fprintf(w, "%s engine %q: %s (%s)\n", p.Source, e.ID, e.State, e.Reason)
			case e.Reason != "": // "state not judged: 1 scrape, need 3"
				fmt.Fprintf(w, "%s engine %q: %s\n", p.Source, e.ID, e.Reason)
			}
		}
		if p.Why != "" {
			fmt.Fprintf(w, "%s: %s\n", p.Source, p.Why)
		}
		for _, warn := range p.Warnings {
			fmt.Fprintf(w, "%s: warning: %s\n", p.Source, warn)
		}
	}
	if ex.Pool.GatewayQueue != nil {
		fmt.Fprintf(w, "pool %s: gateway queue %g\n", ex.Pool.Policy, *ex.Pool.GatewayQueue)
	}
	if ex.Pool.InFlight != "" {
		fmt.Fprintf(w, "pool %s: %s\n", ex.Pool.Policy, ex.Pool.InFlight)
	}
	for _, warn := range ex.Pool.Warnings {
		fmt.Fprintf(w, "pool %s: warning: %s\n", ex.Pool.Policy, warn)
	}
	for _, warn := range ex.Warnings {
		fmt.Fprintf(w, "config: warning: %s\n", warn)
	}
	for _, l := range ex.Pool.Latency {
		fmt.Fprintf(w, "pool %s: %.4gs / SLO %.4gs = %.3g (%s)\n", l.Term, l.Value, l.SetPoint, l.Ratio, l.Note)
	}
	if a := ex.Pool.Ahead; a != nil {
		line := fmt.Sprintf("pool %s: demand %.4g replicas", ex.Pool.Policy, a.Demand)
		if a.Peak != nil {
			line += fmt.Sprintf(", held peak %.4g", *a.Peak)
		}
		if a.Trend != nil {
			line += fmt.Sprintf(", with its trend %.4g", *a.Trend)
			if ex.Pool.TrendUnfit != "" {
				line += " (" + ex.Pool.TrendUnfit + ")"
			}
		}
		if a.Scheduled != nil {
			line += fmt.Sprintf(", scheduled minimum %.4g (%s)", *a.Scheduled, a.Window)
		}
		fmt.Fprintf(w, "%s: serves %.4g replicas\n", line, a.Served)
		if a.Unremembered {
			fmt.Fprintf(w, "pool %s: a demand above %d replicas is more than an HPA takes: served once, neither held nor fitted\n", ex.Pool.Policy, math.MaxInt32)
		}
		if ex.Pool.Answers > 0 && (a.Peak != nil || a.Trend != nil) {
			over := "1 answer, at the newest reading"
			if ex.Pool.Answers > 1 {
				over = fmt.Sprintf("%d answers over %s, one per reading time", ex.Pool.Answers, ex.Pool.AnswersSpan)
			}
			what := "peak and trend"
			switch {
			case a.Trend == nil:
				what = "held peak"
			case a.Peak == nil:
				what = "trend"
			}
			fmt.Fprintf(w, "pool %s: %s of these readings' %s (the server keeps its own, one per request)\n", ex.Pool.Policy, what, over)
		}
	}
	if ex.Pool.Value == nil {
		_, err := fmt.Fprintf(w, "pool %s: no value over %d pods (%d unknown): %s\n", ex.Pool.Policy, ex.Pool.Pods, ex.Pool.Unknown, ex.Pool.Error)
		return err
	}
	_, err := fmt.Fprintf(w, "pool %s = %.4g over %d pods (%d unknown)\n", ex.Pool.Policy, *ex.Pool.Value, ex.Pool.Pods, ex.Pool.Unknown)
	return err
}

func num(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.4g", *p)
}

func readFile(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return b, nil
}
