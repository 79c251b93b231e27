package policy

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Kind says how a Policy turns the pods of a pool into one value.
type Kind string

// The kinds of policy.
const (
	// KindMean is the mean per-pod saturation over the pool's pods: the value for
	// an HPA target of type Value (e.g. value: "1"), which the HPA multiplies by
	// the Ready pods of its scale target.
	KindMean Kind = "mean"
	// KindDemand is the sum of per-pod saturations: the replicas needed to bring
	// every pod to its set point, for an HPA target of type AverageValue
	// (averageValue: "1"), which the HPA divides by its target per pod.
	KindDemand Kind = "demand"
	// KindSignal is one raw signal pooled by its own rule: counts (queue depth,
	// running) add up, ratios (KV-cache usage) are averaged.
	KindSignal Kind = "signal"
)

// The names of the built-in policies, as served to HPAs. Names are lower-case
// because the HPA's client lower-cases the metric name in the request path.
const (
	// MetricSaturation is the mean per-pod saturation (1.0 = at the set point).
	MetricSaturation = "llm_saturation"
	// MetricDemandReplicas is the sum of per-pod saturations: replicas needed.
	MetricDemandReplicas = "llm_demand_replicas"
	// MetricQueueDepth is the pool's total queue depth (waiting requests).
	MetricQueueDepth = "llm_num_requests_waiting"
	// MetricRunning is the pool's total of running requests.
	MetricRunning = "llm_num_requests_running"
	// MetricKVCacheUsage is the pool's mean KV-cache usage ratio (0..1).
	MetricKVCacheUsage = "llm_kv_cache_usage"
)

// TermKind names one term of a saturation policy.
type TermKind string

// The terms. Each is "value / set point" per pod (latency terms: per pool),
// fused by max as the Gateway API inference extension's saturation detector
// does (release-1.5, pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/detector.go).
const (
	// TermQueueDepth: waiting requests (capacity waits only, when the engine
	// splits them by reason) / set point in requests.
	TermQueueDepth TermKind = "queueDepth"
	// TermKVCacheUsage: KV-cache usage ratio / set point ratio.
	TermKVCacheUsage TermKind = "kvCacheUsage"
	// TermBatchSlots: batch-slot occupancy / set point ratio. Occupancy is
	// running / max concurrent sequences (the engine's own limit where it exposes
	// one, else the term's MaxNumSeqs per engine), or a hybrid model's state-pool
	// usage (SGLang mamba_usage) when higher: a pool can be saturated at 20 % KV.
	TermBatchSlots TermKind = "batchSlots"
	// TermPreemptionRate: preemptions per second over the term's window / set
	// point per second.
	TermPreemptionRate TermKind = "preemptionRate"
	// TermDemandRate: requests arriving at the pod per second over the term's
	// window / set point, the requests per second one replica serves at its
	// target (configured, or measured by lab calibrate). Arrivals are what the
	// engine finished (aborts and rejections included) plus the growth of what
	// it holds (waiting + running) over the window: demand before the queue or
	// the KV cache move. Its ratio summed over a pool is replicas needed.
	TermDemandRate TermKind = "demandRate"
	// TermTTFT, TermE2ELatency, TermInterTokenLatency: the term's quantile of
	// time to first token, end-to-end or inter-token latency over its window,
	// pooled over the pool's pods / the SLO (set point) in seconds.
	TermTTFT              TermKind = "ttft"
	TermE2ELatency        TermKind = "e2eLatency"
	TermInterTokenLatency TermKind = "interTokenLatency"
)

// TermKinds lists every TermKind, in documentation order.
func TermKinds() []TermKind {
	return []TermKind{TermQueueDepth, TermKVCacheUsage, TermBatchSlots, TermPreemptionRate, TermDemandRate, TermTTFT, TermE2ELatency, TermInterTokenLatency}
}

// Histo returns the histogram a latency term reads; ok is false for the
// other terms.
func (k TermKind) Histo() (signals.Histo, bool) { return k.histo() }

// histo returns the histogram of a latency term.
func (k TermKind) histo() (signals.Histo, bool) {
	switch k {
	case TermTTFT:
		return signals.TTFT, true
	case TermE2ELatency:
		return signals.E2ELatency, true
	case TermInterTokenLatency:
		return signals.InterTokenLatency, true
	}
	return 0, false
}

// IsLatency reports whether the term is a latency guardrail (pooled over pods).
func (k TermKind) IsLatency() bool { _, ok := k.histo(); return ok }

// windowed reports whether the term is computed over a window.
func (k TermKind) windowed() bool {
	return k == TermPreemptionRate || k == TermDemandRate || k.IsLatency()
}

// Term is one term of a saturation policy.
type Term struct {
	// Kind is what the term measures.
	Kind TermKind
	// SetPoint is the value at which the term's ratio is 1: requests
	// (queueDepth), ratio (kvCacheUsage, batchSlots), per second
	// (preemptionRate; demandRate: requests per second per replica) or the SLO
	// in seconds (latency terms).
	SetPoint float64
	// MaxRatio caps a pod's ratio of this term (0: no cap), so that one hot or
	// broken pod cannot pin a pool at maxReplicas. At least 1.
	MaxRatio float64
	// Window is the span of rates and latency quantiles (preemptionRate,
	// demandRate and the latency terms; DefaultTermWindow when 0).
	Window time.Duration
	// Quantile is the latency quantile, in (0, 1) (latency terms;
	// DefaultQuantile when 0).
	Quantile float64
	// MaxNumSeqs is the number of batch slots per engine (batchSlots), for
	// engines that do not expose their limit: vLLM's --max-num-seqs. 0 uses the
	// engine's own limit only.
	MaxNumSeqs float64
}

// Defaults of Term fields.
const (
	// DefaultTermWindow is the window of rate and latency terms: 1 minute, four
	// Prometheus scrapes at 15 s, the span the field's alert rules use for rates.
	DefaultTermWindow = time.Minute
	// DefaultQuantile is the latency quantile: p95, as the production guides'
	// latency alerts use (DOMAIN: "p95 > SLO for 2 m").
	DefaultQuantile = 0.95
)

// withDefaults returns the term with its defaults filled.
func (t Term) withDefaults() Term {
	if t.Kind.windowed() && t.Window == 0 {
		t.Window = DefaultTermWindow
	}
	if t.Kind.IsLatency() && t.Quantile == 0 {
		t.Quantile = DefaultQuantile
	}
	return t
}

// FieldError is a validation error that names the field (relative to the
// object validated, e.g. "terms[1].quantile") and the value.
type FieldError struct {
	Field string
	Value any
	Msg   string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %v: %s", e.Field, e.Value, e.Msg) }

func fieldErr(field string, value any, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Value: value, Msg: fmt.Sprintf(format, args...)}
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// ratio is the term's ratio for value v: v / SetPoint, capped at MaxRatio
// when the term has a cap (capped then says so). A pod's terms and a pool's
// pooled latency terms are capped by this one rule.
func (t *Term) ratio(v float64) (ratio float64, capped bool) {
	ratio = v / t.SetPoint
	if t.MaxRatio > 0 && ratio > t.MaxRatio {
		return t.MaxRatio, true
	}
	return ratio, false
}

// Validate returns the first invalid field of the term (field names are
// relative to the term), or nil.
func (t Term) Validate() *FieldError {
	switch t.Kind {
	case TermQueueDepth:
		if !(t.SetPoint >= MinSetPoint) || !finite(t.SetPoint) {
			return fieldErr("setPoint", t.SetPoint, "queue depth set point must be a finite number >= %g (requests)", MinSetPoint)
		}
	case TermKVCacheUsage, TermBatchSlots:
		if !(t.SetPoint >= MinSetPoint) || t.SetPoint > 1 {
			return fieldErr("setPoint", t.SetPoint, "%s set point must be a ratio in [%g, 1]", t.Kind, MinSetPoint)
		}
	case TermPreemptionRate:
		if !(t.SetPoint >= MinSetPoint) || !finite(t.SetPoint) {
			return fieldErr("setPoint", t.SetPoint, "preemption rate set point must be a finite number >= %g per second", MinSetPoint)
		}
	case TermDemandRate:
		if !(t.SetPoint >= MinSetPoint) || !finite(t.SetPoint) {
			return fieldErr("setPoint", t.SetPoint, "demand rate set point must be a finite number >= %g requests per second per replica", MinSetPoint)
		}
	case TermTTFT, TermE2ELatency, TermInterTokenLatency:
		if !(t.SetPoint >= MinSetPoint) || !finite(t.SetPoint) {
			return fieldErr("slo", t.SetPoint, "the SLO must be a finite number of seconds >= %g", MinSetPoint)
		}
		if !(t.Quantile > 0 && t.Quantile < 1) {
			return fieldErr("quantile", t.Quantile, "must be in (0, 1), e.g. 0.95")
		}
	default:
		return fieldErr("kind", t.Kind, "unknown term; one of %v", TermKinds())
	}
	if t.Kind.windowed() && t.Window < time.Second {
		return fieldErr("window", t.Window, "must be at least 1s")
	}
	if !t.Kind.windowed() && t.Window != 0 {
		return fieldErr("window", t.Window, "only rate and latency terms have a window")
	}
	if t.MaxRatio != 0 && (!(t.MaxRatio >= 1) || !finite(t.MaxRatio)) {
		return fieldErr("maxRatio", t.MaxRatio, "must be 0 (no cap) or a finite number >= 1")
	}
	if t.MaxNumSeqs != 0 && (t.Kind != TermBatchSlots || !(t.MaxNumSeqs >= 1) || t.MaxNumSeqs > signals.MaxRequests) {
		return fieldErr("maxNumSeqs", t.MaxNumSeqs, "only batchSlots has it; a number of sequences in [1, %g]", signals.MaxRequests)
	}
	return nil
}

// SetPoints are the per-pod values of the classic fused signals at which a pod
// counts as exactly saturated (saturation 1.0).
type SetPoints struct {
	// QueueDepth is the number of waiting requests per pod at saturation 1.0;
	// at least MinSetPoint. Unit: requests.
	QueueDepth float64 `json:"queueDepth"`
	// KVCacheUsage is the KV-cache usage ratio at saturation 1.0; in
	// [MinSetPoint, 1]. Unit: ratio.
	KVCacheUsage float64 `json:"kvCacheUsage"`
}

// DefaultSetPoints returns 5 waiting requests and 0.8 KV-cache usage: the per-pod
// thresholds of the Gateway API inference extension's saturation detector
// (release-1.5, pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization/detector.go:
// a pod is saturated at max(queue/5, kv/0.8) >= 1) and of llm-d's
// workload-variant-autoscaler (saturated at KV >= 0.80 or queue >= 5). They are
// starting points: measure each model's and GPU's saturation point with a
// stepped load test (lab calibrate). Every default of the adapter and of
// explain comes from here.
func DefaultSetPoints() SetPoints {
	return SetPoints{QueueDepth: 5, KVCacheUsage: 0.8}
}

// Terms returns the queue-depth and KV-cache-usage terms of the set points.
func (sp SetPoints) Terms() []Term {
	return []Term{{Kind: TermQueueDepth, SetPoint: sp.QueueDepth}, {Kind: TermKVCacheUsage, SetPoint: sp.KVCacheUsage}}
}

// Validate returns an error naming the first set point that is not a finite
// number of at least MinSetPoint, or a KV-cache set point above 1.
func (sp SetPoints) Validate() error {
	for _, t := range sp.Terms() {
		if err := t.Validate(); err != nil {
			if t.Kind == TermQueueDepth {
				return fmt.Errorf("queue depth set point must be a finite number >= %g, got %g", MinSetPoint, sp.QueueDepth)
			}
			return fmt.Errorf("KV-cache usage set point must be in [%g, 1], got %g", MinSetPoint, sp.KVCacheUsage)
		}
	}
	return nil
}

// DefaultUnknownSaturation is the saturation counted for a pod without fresh
// data: 1.0, as the Gateway API inference extension's saturation detector
// (release-1.5, same file as DefaultSetPoints) counts a pod with stale or
// missing metrics as saturated, so a pool whose engines stop reporting never
// looks idle.
const DefaultUnknownSaturation = 1.0

// MaxUnknownSaturation is the largest unknown-pod saturation accepted: 1000
// times the set point, far beyond any pod's honest reading (a pod counted at it
// is a scale-up by itself) and small enough that a pool of any size stays a
// servable number.
const MaxUnknownSaturation = 1000.0

// DefaultHoldLastGood is how long a pod that stopped answering keeps counting
// at its last good value when that is higher than the unknown-pod value: 5
// minutes, the HPA's default scale-down stabilization window
// (kube-controller-manager --horizontal-pod-autoscaler-downscale-stabilization),
// so that an outage shorter than it never lets the HPA scale down on missing
// data.
const DefaultHoldLastGood = 5 * time.Minute

// MinSetPoint is the smallest set point accepted: it keeps every ratio, and a
// pool's sum of them, finite (MaxRequests / MinSetPoint = 1e12).
const MinSetPoint = 0.001

// Policy is one entry of the metric catalog: a name an HPA asks for and how its
// value is computed from the pods of a pool.
type Policy struct {
	// Name is the metric name served (lower-case).
	Name string
	// Kind is how pods pool into one value.
	Kind Kind
	// Signal is the raw signal of a KindSignal policy.
	Signal signals.Signal
	// Terms score each pod of a KindMean or KindDemand policy; the pod's
	// saturation is the maximum of their ratios.
	Terms []Term
	// Model, when set, restricts the policy to the engines serving that model
	// (model_name, or Triton's model label; compared with ':' and '_' alike, as
	// SGLang's router rewrites one into the other). An HPA never puts a model
	// name in its selector; a pod serving several models is scored per policy.
	Model string
	// Role, when set, restricts the pool to pods whose role label (see
	// Catalog.RoleLabel) has this value: prefill and decode pods of a
	// disaggregated deployment need one HPA each.
	Role string
	// UnknownSaturation is the saturation counted for a pod without a fresh
	// reading, or in a state that cannot serve (wedged, frozen, sleeping)
	// (KindMean and KindDemand); finite and >= 0.
	UnknownSaturation float64
	// HoldLastGood is how long a pod that stopped answering counts at its last
	// good value when that is higher than the unknown-pod value (0: not at
	// all). See PoolBuilder for the rule per kind.
	HoldLastGood time.Duration
	// QueueCap is the engine's admission cap on waiting + running requests
	// (vLLM --max-num-queued-reqs), 0 when unknown: a queue at the cap is
	// clipped and the pod counts as saturated.
	QueueCap float64
	// Gateway, when set, is the gateway queue that feeds the pool: its waiting
	// requests add to the pool's demand and let a pool of zero pods scale up.
	Gateway *GatewayInput
	// Peak, when set, holds the pool's demand at its own recent peak
	// (KindMean and KindDemand; see Ahead).
	Peak *PeakHold
	// Trend, when set, adds the pool's rising demand extrapolated over a
	// lookahead (KindMean and KindDemand; see Ahead).
	Trend *Trend
	// Minimums are scheduled windows of least demand (KindMean and
	// KindDemand; see Ahead).
	Minimums []ScheduledMinimum

	// base is a digest of the policy's exported fields as JSON (set by
	// NewCatalog), definition that and, for a policy with a Role, the
	// catalog's role label: Definition.
	base, definition [sha256.Size]byte
}

// Definition returns a digest of the policy's definition as its catalog
// holds it (every exported field, defaults applied, and for a policy with a
// Role the catalog's role label, which decides its pods), so that what is
// remembered for a policy (a held peak, a trend's samples: PoolState) is not
// read under an edited one of the same name; the zero digest for a policy not
// from NewCatalog.
func (p *Policy) Definition() [sha256.Size]byte { return p.definition }

// GatewayInput names where a policy reads the pool's gateway-held backlog; the
// provider resolves it to a number (see PoolBuilder.AddGateway).
type GatewayInput struct {
	// Namespace and Selector find the gateway's (endpoint picker's) pods.
	Namespace string
	Selector  string
	// Port and Path override the pods' scrape annotations; 0 and "" keep them.
	Port int
	Path string
	// Metric is the queue gauge (signals.DefaultGatewayQueueMetric when empty).
	Metric string
	// Match selects the pool's series: label → value (e.g. inference_pool).
	Match map[string]string
	// QueueSetPoint converts waiting requests into replicas; the policy's queue
	// depth set point when 0.
	QueueSetPoint float64
	// BearerTokenFile, when set, holds the bearer token sent to the gateway's
	// pods (re-read on every scrape). It is sent only to pods a tenant cannot
	// forge: pods of Namespace (which must then be set: the request's
	// namespace is a tenant's) running as ServiceAccount (which must then be
	// set); never to any pod whose labels match.
	BearerTokenFile string
	// ServiceAccount, when set, is the endpoint picker's ServiceAccount: only
	// pods running as it are the gateway's (others matching the selector are
	// not scraped, and leave the queue unknown). Required with a token.
	ServiceAccount string
}

// Queue returns the waiting requests of the gateway series that a gateway
// input selects: the sum over the series of its metric whose labels match,
// over the readings given (one per gateway pod). Each reading counts the
// first family of signals.GatewayQueueMetrics(Metric) it has, never two: with
// the inference extension's default gauge, llm-d-router's
// llm_d_epp_flow_control_queue_size first, so the default input works when an
// endpoint picker exports only the new name. A reading whose
// series exist but none match counts 0 (flow control holds nothing for this
// pool), and so does a gateway reading with no series of the metric but other
// flow-control families (Reading.FlowControl): the endpoint picker deletes an
// idle flow's series after its GC timeout (FlowGCTimeout, 5 min by default).
//
// Errors, never a silent 0: no reading at all; a reading with no series of the metric and no
// flow-control family (flow control off, or not the gateway's /metrics); one
// that exports another *_flow_control_queue_size family instead (the metric
// misnamed); series of the metric none of which carries every label of
// Match (a match that can select nothing: upstream's gauge is labelled
// fairness_id and priority only before PR #1714); and a selected series whose
// value the engines' validity rules rejected (NaN, ±Inf, negative, absurd:
// signals.GatewaySeries.Invalid), which leaves the queue unknown as a pod's
// rejected queue depth leaves its term out.
func (g *GatewayInput) Queue(readings ...*signals.Reading) (float64, error) {
	var queue float64
	series, labelled, read := 0, 0, 0
	names := signals.GatewayQueueMetrics(g.Metric)
	for _, r := range readings {
		if r == nil {
			continue
		}
		read++
		metric := readFamily(r, names)
		n := 0
		for i := range r.Gateway {
			s := &r.Gateway[i]
			if s.Metric != metric {
				continue
			}
			n++
			if s.HasLabels(g.Match) {
				labelled++
			}
			if !s.Matches(g.Match) {
				continue
			}
			if s.Invalid != "" {
				return 0, fmt.Errorf("the gateway's %s series %s was rejected (%s): the pool's gateway queue is unknown",
					g.Metric, excerpt.String(describeMatch(s.Labels), 200), s.Invalid)
			}
			queue += s.Value
		}
		if n == 0 {
			if other := otherQueueFamily(r, names); other != "" {
				return 0, fmt.Errorf("the gateway exports %s, not %s: set the gateway input's metric", other, g.Metric)
			}
			if len(r.FlowControl) == 0 {
				return 0, fmt.Errorf("the gateway's metrics have no %s series and no flow-control family: is flow control on, and the metric's name right?", g.Metric)
			}
		}
		series += n
	}
	if read == 0 {
		return 0, errors.New("no reading of the gateway's metrics")
	}
	if series > 0 && labelled == 0 && len(g.Match) > 0 {
		keys := make([]string, 0, len(g.Match))
		for k := range g.Match {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return 0, fmt.Errorf("no %s series carries the match labels %v: the gateway input's match can select none of them", g.Metric, keys)
	}
	return queue, nil
}

// Reads reports whether a gateway series of the family metric is one the input
// may count (one of signals.GatewayQueueMetrics(Metric)).
func (g *GatewayInput) Reads(metric string) bool {
	return slices.Contains(signals.GatewayQueueMetrics(g.Metric), metric)
}

// readFamily returns the first of names that r has gateway series of ("" when
// none).
func readFamily(r *signals.Reading, names []string) string {
	for _, name := range names {
		if slices.ContainsFunc(r.Gateway, func(s signals.GatewaySeries) bool { return s.Metric == name }) {
			return name
		}
	}
	return ""
}

// The NVIDIA Dynamo frontend's gauges (ai-dynamo/dynamo metrics guide; hazard
// NC-25): the router's scheduler queue, the backlog a gateway input reads
// (labelled worker_type; registered only when the frontend runs with
// --router-queue-threshold), and the count of requests from HTTP entry to
// their first token, which includes requests prefilling on workers and is
// no queue.
const (
	DynamoRouterQueueMetric = "dynamo_frontend_router_queue_pending_requests"
	DynamoQueuedMetric      = "dynamo_frontend_queued_requests"
)

// Notes says what a gateway's readings tell about its queue beyond the
// number: endpoints the endpoint picker scores saturated because their
// metrics are stale (llm_d_epp_flow_control_stale_endpoints > 0, hazard
// NC-20: its dispatch stopped, the queue grows because nothing is
// dispatched, and its pool saturation reads 1.0 for want of data, not of
// capacity); a Dynamo frontend without its router queue gauge (router
// queueing off: no gateway queue, counted 0).
func (g *GatewayInput) Notes(readings ...*signals.Reading) []string {
	var out []string
	for _, r := range readings {
		if r == nil {
			continue
		}
		if g.Metric == DynamoRouterQueueMetric && readFamily(r, []string{DynamoRouterQueueMetric}) == "" {
			out = append(out, fmt.Sprintf("the Dynamo frontend exports no %s: its router does not queue (no --router-queue-threshold), so the gateway holds no queue: 0", DynamoRouterQueueMetric))
		}
		for i := range r.Gateway {
			if s := &r.Gateway[i]; s.Metric == signals.LLMDStaleEndpointsMetric && s.Value > 0 {
				out = append(out, fmt.Sprintf("the endpoint picker scores %g endpoints saturated because their metrics are missing or stale (%s%s): "+
					"flow control stopped dispatching to them, so its queue grows for want of engine metrics, not of capacity; check the endpoint picker's scrapes of the engines",
					s.Value, s.Metric, labelsSuffix(s.Labels)))
			}
		}
	}
	return out
}

func labelsSuffix(l map[string]string) string {
	if len(l) == 0 {
		return ""
	}
	return describeMatch(l)
}

// describeMatch renders labels as {k="v",...}, sorted.
func describeMatch(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(m[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// otherQueueFamily returns a flow-control queue-size family of r other than
// names, "" when none.
func otherQueueFamily(r *signals.Reading, names []string) string {
	for _, f := range r.FlowControl {
		if strings.HasSuffix(f, "_flow_control_queue_size") && !slices.Contains(names, f) {
			return f
		}
	}
	for i := range r.Gateway {
		if f := r.Gateway[i].Metric; !slices.Contains(names, f) && strings.HasSuffix(f, "_flow_control_queue_size") {
			return f
		}
	}
	return ""
}

// PerPod reports whether the policy has a value per pod (served on
// custom.metrics.k8s.io for HPA metrics of type Pods): every kind but
// KindDemand, which only exists for a pool, and but a policy with a gateway
// input, whose backlog belongs to the pool and to no pod (per-pod values
// without it would read "at target" while the gateway holds hundreds of
// requests, hazard NC-04).
func (p *Policy) PerPod() bool { return p.Kind != KindDemand && p.Gateway == nil }

// dns1123Label is Kubernetes' DNS-1123 label (k8s.io/apimachinery
// pkg/util/validation, IsDNS1123Label), which configured policy names follow.
var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ValidName reports whether name can name a configured policy: a DNS-1123
// label (lower-case alphanumerics and '-', at most 63 characters), so that it is
// valid as a metric name in an HPA, a URL path segment and a label value.
func ValidName(name string) bool { return len(name) <= 63 && dns1123Label.MatchString(name) }

// Validate returns the first invalid field of the policy, named relative to it
// (e.g. "terms[1].quantile"), or nil. Names are checked for lower case only:
// the built-in names (llm_saturation) predate the DNS-1123 rule that ValidName
// applies to configured ones.
func (p *Policy) Validate() *FieldError {
	if p.Name == "" || p.Name != strings.ToLower(p.Name) {
		return fieldErr("name", p.Name, "must be non-empty and lower-case (the HPA lower-cases metric names)")
	}
	switch p.Kind {
	case KindMean, KindDemand:
		if len(p.Terms) == 0 {
			return fieldErr("terms", "[]", "a %s policy needs at least one term", p.Kind)
		}
		seen := map[TermKind]bool{}
		for i, t := range p.Terms {
			if err := t.withDefaults().Validate(); err != nil {
				err.Field = fmt.Sprintf("terms[%d].%s", i, err.Field)
				return err
			}
			if seen[t.Kind] {
				return fieldErr(fmt.Sprintf("terms[%d].kind", i), t.Kind, "term given twice")
			}
			seen[t.Kind] = true
		}
		if !(p.UnknownSaturation >= 0) || p.UnknownSaturation > MaxUnknownSaturation {
			return fieldErr("unknownPodSaturation", p.UnknownSaturation, "must be a number in [0, %g]", MaxUnknownSaturation)
		}
	case KindSignal:
		if p.Signal != signals.QueueDepth && p.Signal != signals.Running && p.Signal != signals.KVCacheUsage && p.Signal != signals.QueueDeferred {
			return fieldErr("signal", p.Signal.String(), "cannot be served as a pool value; one of queueDepth, running, kvCacheUsage, queueDeferred")
		}
		if len(p.Terms) > 0 {
			return fieldErr("terms", len(p.Terms), "a signal policy has no terms")
		}
		if p.Gateway != nil {
			return fieldErr("gateway", p.Gateway.Selector, "only mean and demand policies take a gateway input")
		}
	default:
		return fieldErr("kind", p.Kind, "unknown kind; one of mean, demand, signal")
	}
	if p.HoldLastGood < 0 {
		return fieldErr("holdLastGood", p.HoldLastGood, "must be >= 0")
	}
	if p.QueueCap != 0 && (!(p.QueueCap >= 1) || p.QueueCap > signals.MaxRequests) {
		return fieldErr("queueCap", p.QueueCap, "must be 0 (unknown) or a number of requests in [1, %g]", signals.MaxRequests)
	}
	if g := p.Gateway; g != nil {
		if strings.HasSuffix(g.Metric, "_pool_saturation") {
			return fieldErr("gateway.metric", g.Metric, "is the pool's saturation (a ratio per stage: prefill, decode, effective), not a queue of requests; "+
				"read the queue (%s, the default)", signals.DefaultGatewayQueueMetric)
		}
		if g.Metric == DynamoQueuedMetric {
			return fieldErr("gateway.metric", g.Metric, "counts requests from HTTP entry to their first token, prefilling ones included, not a queue; "+
				"read the router's queue, %s", DynamoRouterQueueMetric)
		}
		if g.QueueSetPoint != 0 && (!(g.QueueSetPoint >= MinSetPoint) || !finite(g.QueueSetPoint)) {
			return fieldErr("gateway.queueSetPoint", g.QueueSetPoint, "must be 0 (the queue depth term's) or a finite number >= %g", MinSetPoint)
		}
		if g.QueueSetPoint == 0 && p.term(TermQueueDepth) == nil {
			return fieldErr("gateway.queueSetPoint", 0, "required when the policy has no queueDepth term")
		}
		if g.BearerTokenFile != "" && g.Namespace == "" {
			return fieldErr("gateway.namespace", "", "required with bearerTokenFile: the token goes only to the endpoint picker's pods in a namespace the operator controls, never to pods of the HPA's namespace, which a tenant controls")
		}
		if g.BearerTokenFile != "" && g.ServiceAccount == "" {
			return fieldErr("gateway.serviceAccountName", "", "required with bearerTokenFile: the token goes only to pods running as the endpoint picker's ServiceAccount, never to any pod whose labels match")
		}
	}
	return p.validateAhead()
}

// withDefaults returns the policy with its terms' defaults filled and sorted in
// documentation order.
func (p Policy) withDefaults() Policy {
	terms := make([]Term, len(p.Terms))
	for i, t := range p.Terms {
		terms[i] = t.withDefaults()
	}
	order := TermKinds()
	slices.SortStableFunc(terms, func(a, b Term) int { return slices.Index(order, a.Kind) - slices.Index(order, b.Kind) })
	p.Terms = terms
	if p.Gateway != nil {
		g := *p.Gateway
		if g.Metric == "" {
			g.Metric = signals.DefaultGatewayQueueMetric
		}
		if g.QueueSetPoint == 0 {
			if t := p.term(TermQueueDepth); t != nil {
				g.QueueSetPoint = t.SetPoint
			}
		}
		p.Gateway = &g
	}
	return p
}

// term returns the policy's term of a kind, or nil.
func (p *Policy) term(k TermKind) *Term {
	for i := range p.Terms {
		if p.Terms[i].Kind == k {
			return &p.Terms[i]
		}
	}
	return nil
}

// Warnings returns configuration choices that are valid but probably wrong:
// a queue set point the capped queue can never reach.
func (p *Policy) Warnings() []string {
	var out []string
	if t := p.term(TermQueueDepth); t != nil && p.QueueCap > 0 && t.SetPoint >= p.QueueCap {
		out = append(out, fmt.Sprintf("policy %s: queue depth set point %g is at or above the admission cap %g: the queue term can never exceed its set point", p.Name, t.SetPoint, p.QueueCap))
	}
	return out
}

// Catalog is the set of policies served, in documentation order. It is
// immutable once built.
type Catalog struct {
	policies  []Policy
	roleLabel string
}

// DefaultRoleLabel is the pod label that carries a disaggregated pod's role, as
// llm-d's model-service charts set it.
const DefaultRoleLabel = "llm-d.ai/role"

// NewCatalog returns a catalog of the policies, or an error naming the first
// invalid or duplicate one.
func NewCatalog(policies ...Policy) (*Catalog, error) {
	c := &Catalog{policies: make([]Policy, 0, len(policies)), roleLabel: DefaultRoleLabel}
	for _, p := range policies {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.Name, err)
		}
		if c.Lookup(p.Name) != nil {
			return nil, fmt.Errorf("policy %s is defined twice", p.Name)
		}
		q := p.withDefaults()
		def, err := json.Marshal(q)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.Name, err)
		}
		q.base = sha256.Sum256(def)
		c.policies = append(c.policies, q)
	}
	c.define()
	return c, nil
}

// WithRoleLabel returns a copy of the catalog whose policies' Role is read from
// the pod label key (DefaultRoleLabel when empty).
func (c *Catalog) WithRoleLabel(key string) *Catalog {
	out := *c
	out.roleLabel = key
	if key == "" {
		out.roleLabel = DefaultRoleLabel
	}
	out.policies = slices.Clone(c.policies)
	out.define()
	return &out
}

// define sets each policy's Definition: its base digest, and for a policy
// with a Role the digest of that and the role label.
func (c *Catalog) define() {
	for i := range c.policies {
		p := &c.policies[i]
		p.definition = p.base
		if p.Role != "" {
			h := sha256.New()
			h.Write(p.base[:])
			h.Write([]byte(c.roleLabel))
			h.Sum(p.definition[:0])
		}
	}
}

// RoleLabel returns the pod label that carries a pod's role.
func (c *Catalog) RoleLabel() string { return c.roleLabel }

// BuiltinPolicies returns the built-in policies: llm_saturation (KindMean),
// llm_demand_replicas (KindDemand) with the queue-depth and KV-cache terms of
// the given set points and the unknown-pod saturation, and the raw signals
// llm_num_requests_waiting, llm_num_requests_running and llm_kv_cache_usage.
func BuiltinPolicies(sp SetPoints, unknownSaturation float64, hold time.Duration) []Policy {
	return []Policy{
		{Name: MetricSaturation, Kind: KindMean, Terms: sp.Terms(), UnknownSaturation: unknownSaturation, HoldLastGood: hold},
		{Name: MetricDemandReplicas, Kind: KindDemand, Terms: sp.Terms(), UnknownSaturation: unknownSaturation, HoldLastGood: hold},
		{Name: MetricQueueDepth, Kind: KindSignal, Signal: signals.QueueDepth, HoldLastGood: hold},
		{Name: MetricRunning, Kind: KindSignal, Signal: signals.Running, HoldLastGood: hold},
		{Name: MetricKVCacheUsage, Kind: KindSignal, Signal: signals.KVCacheUsage, HoldLastGood: hold},
	}
}

// BuiltinCatalog returns the catalog of BuiltinPolicies with
// DefaultHoldLastGood. Errors as for NewCatalog.
func BuiltinCatalog(sp SetPoints, unknownSaturation float64) (*Catalog, error) {
	return NewCatalog(BuiltinPolicies(sp, unknownSaturation, DefaultHoldLastGood)...)
}

// Lookup returns the policy named name (case-insensitively, as the HPA
// lower-cases names), or nil.
func (c *Catalog) Lookup(name string) *Policy {
	for i := range c.policies {
		if strings.EqualFold(c.policies[i].Name, name) {
			return &c.policies[i]
		}
	}
	return nil
}

// Policies returns the policies, in catalog order. The slice is shared.
func (c *Catalog) Policies() []Policy { return c.policies }

// Names returns the names of the policies, in catalog order.
func (c *Catalog) Names() []string {
	out := make([]string, len(c.policies))
	for i := range c.policies {
		out[i] = c.policies[i].Name
	}
	return out
}

// PerPodNames returns the names of the policies with a per-pod value.
func (c *Catalog) PerPodNames() []string {
	var out []string
	for i := range c.policies {
		if c.policies[i].PerPod() {
			out = append(out, c.policies[i].Name)
		}
	}
	return out
}

// Needs returns what the catalog's policies need kept per pod: whether any
// reads latency histograms, and the windows of their terms per model
// restriction, so that scrapes precompute them (see History).
func (c *Catalog) Needs() history.Needs {
	var n history.Needs
	for i := range c.policies {
		p := &c.policies[i]
		for _, t := range p.Terms {
			if t.Kind.IsLatency() {
				n.Histograms = true
			}
			if t.Kind.windowed() {
				n.Add(history.WindowKey{Window: t.Window, Model: p.Model})
			}
		}
		if g := p.Gateway; g != nil && !slices.Contains(n.GatewayMetrics, g.Metric) {
			n.GatewayMetrics = append(n.GatewayMetrics, g.Metric) // the extractor adds llm-d's names (signals.GatewayQueueMetrics)
		}
	}
	return n
}
