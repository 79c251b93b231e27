// Package config reads the adapter's policy configuration file (--config): the
// metric catalog a platform engineer shapes per workload, on top of the
// built-in one. It decodes strictly (unknown and duplicate fields are errors),
// validates every field with its path, turns the file into pkg/signals policies,
// and keeps the catalog in force, reloading the file when it changes (a mounted
// ConfigMap) and keeping the last good one when a new one is bad.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	promparser "github.com/prometheus/prometheus/promql/parser"
	goyaml "go.yaml.in/yaml/v3"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// APIVersion and Kind identify the file format.
const (
	APIVersion = "saturation-adapter.io/v1alpha1"
	Kind       = "PolicyConfig"
)

// File is the configuration file.
type File struct {
	// APIVersion must be APIVersion and Kind must be Kind.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// RoleLabel is the pod label whose value a policy's role selects
	// (policy.DefaultRoleLabel when empty).
	RoleLabel string `json:"roleLabel,omitempty"`
	// Policies are served beside the built-in catalog, under their own names.
	Policies []Policy `json:"policies"`
	// Prometheus says where the engine series are in Prometheus when the
	// adapter reads them there (--source=prometheus); ignored otherwise.
	Prometheus *Prometheus `json:"prometheus,omitempty"`
}

// Prometheus is where the Prometheus source finds each engine metric family.
type Prometheus struct {
	// Matchers are label matchers added to every query, in PromQL selector
	// syntax (`{cluster="prod"}`), for a Thanos or Mimir that holds several
	// clusters.
	Matchers string `json:"matchers,omitempty"`
	// Series maps an engine metric family (its name as the engine exposes it,
	// e.g. vllm:num_requests_waiting; a histogram's base name) to the series
	// selector that holds it in Prometheus: a renamed metric
	// (vllm_num_requests_waiting), a recording rule, extra matchers. For a
	// histogram, the selector of its _bucket series.
	Series map[string]string `json:"series,omitempty"`
}

// Policy is one served metric.
type Policy struct {
	// Name is the metric name an HPA asks for: a DNS-1123 label.
	Name string `json:"name"`
	// Kind is mean (HPA target type Value), demand (replicas needed, type
	// AverageValue) or signal (one raw signal).
	Kind string `json:"kind"`
	// Signal is the raw signal of a signal policy: queueDepth, running,
	// kvCacheUsage or queueDeferred.
	Signal string `json:"signal,omitempty"`
	// Model restricts the policy to the engines serving that model.
	Model string `json:"model,omitempty"`
	// Role restricts the pool to pods whose role label has this value.
	Role string `json:"role,omitempty"`
	// UnknownPodSaturation is the saturation of a pod without fresh data or in
	// a state that cannot serve (default policy.DefaultUnknownSaturation).
	UnknownPodSaturation *float64 `json:"unknownPodSaturation,omitempty"`
	// HoldLastGood is how long a pod that stopped answering counts at its last
	// good value when higher (default policy.DefaultHoldLastGood; "0s" turns it
	// off).
	HoldLastGood *Duration `json:"holdLastGood,omitempty"`
	// QueueCap is the engines' admission cap on waiting + running requests
	// (vLLM --max-num-queued-reqs), for the clipped state.
	QueueCap float64 `json:"queueCap,omitempty"`
	// Terms are the saturation terms of a mean or demand policy.
	Terms []Term `json:"terms,omitempty"`
	// Gateway is the gateway queue that feeds the pool.
	Gateway *Gateway `json:"gateway,omitempty"`
	// Peak holds the pool's demand at no less than its own recent peak × (1 +
	// headroom) (mean and demand policies).
	Peak *Peak `json:"peak,omitempty"`
	// Trend serves a rising demand as it will be a lookahead from now (mean
	// and demand policies).
	Trend *Trend `json:"trend,omitempty"`
	// Minimums are scheduled windows of least demand (mean and demand
	// policies).
	Minimums []Minimum `json:"minimums,omitempty"`
}

// Peak is a policy's peak hold (policy.PeakHold).
type Peak struct {
	// Window is how long a peak counts, e.g. 10m. Required.
	Window *Duration `json:"window"`
	// Headroom is the fraction above the peak that is held, e.g. 0.2.
	Headroom float64 `json:"headroom,omitempty"`
	// HalfLife, when set, decays a held peak: its weight halves every HalfLife.
	HalfLife *Duration `json:"halfLife,omitempty"`
}

// Trend is a policy's trend (policy.Trend).
type Trend struct {
	// Window is the span the demand's slope is fitted over, e.g. 2m. Required.
	Window *Duration `json:"window"`
	// Lookahead is how far a rising demand is extrapolated, e.g. 4m: the pods'
	// cold start plus the HPA's scale-up stabilization window. Required.
	Lookahead *Duration `json:"lookahead"`
}

// Minimum is a scheduled window of least demand (policy.ScheduledMinimum).
type Minimum struct {
	// Schedule is a 5-field cron expression of the window's openings, e.g.
	// "0 9 * * 1-5" (09:00 on weekdays). Required.
	Schedule string `json:"schedule"`
	// Duration is how long each window stays open, e.g. 8h. Required.
	Duration *Duration `json:"duration"`
	// TimeZone is the IANA time zone of the schedule, e.g. Europe/Berlin;
	// UTC when empty.
	TimeZone string `json:"timeZone,omitempty"`
	// Demand is the least demand in replicas while the window is open.
	Demand float64 `json:"demand"`
}

// Term is one saturation term. Latency terms (ttft, e2eLatency,
// interTokenLatency) take slo, quantile and window; the others setPoint.
type Term struct {
	Kind       string    `json:"kind"`
	SetPoint   *float64  `json:"setPoint,omitempty"`
	SLO        *Duration `json:"slo,omitempty"`
	Quantile   float64   `json:"quantile,omitempty"`
	Window     *Duration `json:"window,omitempty"`
	MaxRatio   float64   `json:"maxRatio,omitempty"`
	MaxNumSeqs float64   `json:"maxNumSeqs,omitempty"`
}

// Gateway names the endpoint picker whose flow-control queue holds the pool's
// backlog.
type Gateway struct {
	// Namespace of the gateway's pods; the HPA's namespace when empty.
	Namespace string `json:"namespace,omitempty"`
	// Selector selects the gateway's pods (label selector syntax, e.g.
	// "app=epp").
	Selector string `json:"selector"`
	// Port and Path of its /metrics; the pods' prometheus.io annotations (else
	// the scrape defaults) when unset.
	Port int    `json:"port,omitempty"`
	Path string `json:"path,omitempty"`
	// Metric is the queue gauge (signals.DefaultGatewayQueueMetric when empty).
	Metric string `json:"metric,omitempty"`
	// Match selects this pool's series by label (e.g. inference_pool: my-pool).
	Match map[string]string `json:"match"`
	// QueueSetPoint converts waiting requests to replicas; the policy's
	// queueDepth set point when unset.
	QueueSetPoint float64 `json:"queueSetPoint,omitempty"`
	// BearerTokenFile, when set, is an absolute path whose content (re-read on
	// every scrape, so a rotated token is picked up) is sent as
	// "Authorization: Bearer" to the gateway's pods: the inference extension's
	// endpoint picker protects /metrics by default (--metrics-endpoint-auth).
	// It must lie under TokenDir (a mounted Secret), outside the adapter's own
	// credentials (ForbiddenTokenDir), with no ".." element; and Namespace and
	// ServiceAccountName must name the endpoint picker, since the token goes
	// only to its pods (see policy.GatewayInput).
	BearerTokenFile string `json:"bearerTokenFile,omitempty"`
	// ServiceAccountName is the endpoint picker's ServiceAccount: only pods
	// running as it are the gateway's. Required with bearerTokenFile.
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// TokenDir is where a gateway input's bearerTokenFile must lie: where
// Kubernetes mounts secrets (mount the token's Secret at e.g.
// /var/run/secrets/epp-metrics). The file's content is sent to the gateway's
// pods, so a configuration must not be able to name any other file of the
// adapter's: its serving key (/etc/saturation-adapter/tls), the policy file,
// /etc/passwd.
const TokenDir = "/var/run/secrets/"

// ForbiddenTokenDir holds the adapter's own ServiceAccount token (and other
// kubernetes.io credentials): never sent to a gateway.
const ForbiddenTokenDir = "/var/run/secrets/kubernetes.io/"

// tokenFileProblem says what is wrong with a bearerTokenFile path, "" when
// nothing: it must be absolute, have no ".." element, and, cleaned, lie under
// TokenDir and outside ForbiddenTokenDir.
func tokenFileProblem(p string) string {
	if !filepath.IsAbs(p) {
		return "must be an absolute path under " + TokenDir
	}
	for _, el := range strings.Split(filepath.ToSlash(p), "/") {
		if el == ".." {
			return "must not contain '..': the path is confined to " + TokenDir
		}
	}
	clean := filepath.Clean(p)
	if !strings.HasPrefix(clean, TokenDir) || len(clean) == len(TokenDir) {
		return "must lie under " + TokenDir + " (a mounted Secret): the file's content is sent to the gateway's pods"
	}
	if strings.HasPrefix(clean+"/", ForbiddenTokenDir) {
		return "must not be the adapter's own credentials (" + ForbiddenTokenDir + "): give the gateway a token of its own"
	}
	return ""
}

// Duration is a time.Duration written as a Go duration string ("30s", "2m").
type Duration struct{ time.Duration }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration must be a string such as \"30s\": %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// Parse decodes and validates a configuration file (YAML or JSON). The error
// lists every problem, each naming the field path and value, e.g.
// `policies[0].terms[1].quantile: Invalid value: 1.5: must be in (0, 1), e.g. 0.95`.
func Parse(data []byte) (*File, error) {
	doc, err := oneDocument(data)
	if err != nil {
		return nil, err
	}
	if doc != nil {
		if path, value, why, ok := badNumber(doc); ok {
			return nil, field.ErrorList{field.Invalid(path, value, why)}.ToAggregate()
		}
	}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("decoding the configuration: %w", err)
	}
	var f File
	strict, err := sigsjson.UnmarshalStrict(j, &f)
	if err != nil {
		return nil, fmt.Errorf("decoding the configuration: %w", err)
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("decoding the configuration: %s", strings.Join(msgs, "; "))
	}
	_, errs := f.policies(nil)
	errs = append(errs, f.Prometheus.validate(field.NewPath("prometheus"))...)
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return &f, nil
}

// oneDocument returns the file's one YAML document as a node, refusing a
// file of more than one: the decoding in Parse reads the first alone, so the
// policies of a second ("---") would vanish, and HPAs asking for them get
// "metric not found". Empty documents (a leading or trailing "---") are not
// counted. It returns no node and no error when the first document is not
// YAML (the decoding in Parse says what is wrong with it) or there is none.
func oneDocument(data []byte) (*goyaml.Node, error) {
	dec := goyaml.NewDecoder(bytes.NewReader(data))
	var first *goyaml.Node
	for {
		var n goyaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return first, nil
		}
		if err != nil {
			if first == nil {
				return nil, nil
			}
			return nil, fmt.Errorf("decoding the configuration: a second YAML document after \"---\", which is not YAML either (%w): the file must be one document", err)
		}
		if len(n.Content) == 0 || (len(n.Content) == 1 && n.Content[0].Tag == "!!null") {
			continue
		}
		if first != nil {
			return nil, fmt.Errorf("decoding the configuration: a second YAML document starts at line %d: the file must be one document, its policies in one list (a second document's would never be read)", n.Line)
		}
		first = &n
	}
}

// badNumber finds the first scalar of doc that is written as a number no
// 64-bit float holds, and returns its path, its text as written and why:
//
//   - a NaN or an infinity (.nan, .inf, -.Inf, ...), which the conversion to
//     JSON refuses with "json: unsupported value: NaN" and no field;
//   - an unquoted number past float64's range (1e400, -1e400), which YAML
//     reads as text, so that the decoding said "cannot unmarshal string"
//     about a number;
//   - an unquoted number too small for a float64 (1e-400), which reads as 0
//     without a word: a quantile of 0 is "unset" and took its default.
//
// Unquoted scalars are checked whatever their field: text that reads as
// such a number must be quoted. It does not follow aliases: an anchored node
// is walked where it is defined, once (a self-referencing anchor or nested
// aliases would otherwise recurse without end, or for minutes).
func badNumber(doc *goyaml.Node) (*field.Path, string, string, bool) {
	var walk func(n *goyaml.Node, path *field.Path) (*field.Path, string, string, bool)
	walk = func(n *goyaml.Node, path *field.Path) (*field.Path, string, string, bool) {
		switch n.Kind {
		case goyaml.DocumentNode:
			for _, c := range n.Content {
				if p, v, why, ok := walk(c, path); ok {
					return p, v, why, ok
				}
			}
		case goyaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				child := field.NewPath(n.Content[i].Value)
				if path != nil {
					child = path.Child(n.Content[i].Value)
				}
				if p, v, why, ok := walk(n.Content[i+1], child); ok {
					return p, v, why, ok
				}
			}
		case goyaml.SequenceNode:
			for i, c := range n.Content {
				child := field.NewPath("").Index(i)
				if path != nil {
					child = path.Index(i)
				}
				if p, v, why, ok := walk(c, child); ok {
					return p, v, why, ok
				}
			}
		case goyaml.ScalarNode:
			if why := scalarNumberProblem(n); why != "" {
				return path, n.Value, why, true
			}
		}
		return nil, "", "", false
	}
	return walk(doc, nil)
}

// scalarNumberProblem says what is wrong with n as a number (badNumber), or
// "" when nothing is: quoted scalars are text and never a problem.
func scalarNumberProblem(n *goyaml.Node) string {
	if n.Style&(goyaml.DoubleQuotedStyle|goyaml.SingleQuotedStyle|goyaml.LiteralStyle|goyaml.FoldedStyle) != 0 {
		return ""
	}
	var f float64
	if n.ShortTag() == "!!float" && n.Decode(&f) == nil && (math.IsNaN(f) || math.IsInf(f, 0)) {
		return "must be a finite number"
	}
	text := strings.ReplaceAll(n.Value, "_", "")
	if text == "" || strings.ContainsAny(text[:1], "iInN") || strings.ContainsAny(text, "xXpP") {
		return "" // inf, nan, hexadecimal: text to YAML, and no number here
	}
	f, err := strconv.ParseFloat(text, 64)
	var numErr *strconv.NumError
	switch {
	case errors.As(err, &numErr) && errors.Is(numErr.Err, strconv.ErrRange):
		return "out of a 64-bit float's range: must be a finite number (quote it if it is text)"
	case err == nil && f == 0 && strings.ContainsAny(mantissa(text), "123456789"):
		return "too small for a 64-bit float, it would read as 0: write 0 if that is meant"
	}
	return ""
}

// mantissa returns a decimal number's text before its exponent.
func mantissa(s string) string {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		return s[:i]
	}
	return s
}

// validate checks the section: matchers and every selector parse as PromQL,
// the matchers leave the metric name to the adapter, and every key is a family
// the adapter reads.
func (p *Prometheus) validate(path *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	var errs field.ErrorList
	parser := promparser.NewParser(promparser.Options{})
	if strings.TrimSpace(p.Matchers) != "" {
		ms, err := parser.ParseMetricSelector(p.Matchers)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(path.Child("matchers"), p.Matchers, "not a PromQL label selector such as {cluster=\"prod\"}: "+err.Error()))
		case slices.ContainsFunc(ms, func(m *labels.Matcher) bool { return m.Name == model.MetricNameLabel }):
			errs = append(errs, field.Invalid(path.Child("matchers"), p.Matchers, "must not match the metric name: the adapter chooses the families"))
		}
	}
	families := map[string]bool{}
	var names []string
	for _, f := range signals.NewExtractor().Families() {
		families[f.Name] = true
		names = append(names, f.Name)
	}
	keys := make([]string, 0, len(p.Series))
	for k := range p.Series {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		kp := path.Child("series").Key(k)
		if !families[k] {
			errs = append(errs, field.NotSupported(kp, k, names))
			continue
		}
		if _, err := parser.ParseMetricSelector(p.Series[k]); err != nil {
			errs = append(errs, field.Invalid(kp, p.Series[k], "not a PromQL series selector such as vllm_num_requests_waiting{job=\"vllm\"}: "+err.Error()))
		}
	}
	return errs
}

// Catalog returns the catalog of the built-in policies followed by the file's
// (a nil file adds none). Errors name the field path and value.
func (f *File) Catalog(builtin []policy.Policy) (*policy.Catalog, error) {
	var role string
	if f != nil {
		role = f.RoleLabel
	}
	ps, errs := f.policies(builtin)
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	c, err := policy.NewCatalog(append(append([]policy.Policy(nil), builtin...), ps...)...)
	if err != nil {
		return nil, err
	}
	return c.WithRoleLabel(role), nil
}

// policies converts and validates the file's policies; builtin names are taken.
func (f *File) policies(builtin []policy.Policy) ([]policy.Policy, field.ErrorList) {
	if f == nil {
		return nil, nil
	}
	var errs field.ErrorList
	if f.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), f.APIVersion, []string{APIVersion}))
	}
	if f.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), f.Kind, []string{Kind}))
	}
	if f.RoleLabel != "" {
		if _, err := k8slabels.Parse(f.RoleLabel); err != nil || strings.ContainsAny(f.RoleLabel, "=!,() ") {
			errs = append(errs, field.Invalid(field.NewPath("roleLabel"), f.RoleLabel, "must be a label key"))
		}
	}
	taken := map[string]string{}
	for _, b := range builtin {
		taken[b.Name] = "a built-in metric"
	}
	var out []policy.Policy
	for i, p := range f.Policies {
		path := field.NewPath("policies").Index(i)
		sp, perrs := p.convert(path)
		errs = append(errs, perrs...)
		if prev, dup := taken[p.Name]; dup && p.Name != "" {
			errs = append(errs, field.Duplicate(path.Child("name"), fmt.Sprintf("%s (already %s)", p.Name, prev)))
			continue
		}
		taken[p.Name] = fmt.Sprintf("policies[%d]", i)
		if len(perrs) == 0 {
			out = append(out, sp)
		}
	}
	return out, errs
}

// convert turns one file policy into a policy.Policy, validating each field.
func (p *Policy) convert(path *field.Path) (policy.Policy, field.ErrorList) {
	var errs field.ErrorList
	if !policy.ValidName(p.Name) {
		errs = append(errs, field.Invalid(path.Child("name"), p.Name,
			"must be a DNS-1123 label: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters (the HPA lower-cases metric names)"))
	}
	sp := policy.Policy{Name: p.Name, Kind: policy.Kind(p.Kind), Model: p.Model, Role: p.Role,
		UnknownSaturation: policy.DefaultUnknownSaturation, HoldLastGood: policy.DefaultHoldLastGood, QueueCap: p.QueueCap}
	if p.UnknownPodSaturation != nil {
		sp.UnknownSaturation = *p.UnknownPodSaturation
	}
	if p.HoldLastGood != nil {
		sp.HoldLastGood = p.HoldLastGood.Duration
	}
	switch sp.Kind {
	case policy.KindMean, policy.KindDemand:
		if p.Signal != "" {
			errs = append(errs, field.Forbidden(path.Child("signal"), "only signal policies name a signal"))
		}
	case policy.KindSignal:
		servable := []string{"queueDepth", "running", "kvCacheUsage", "queueDeferred"}
		s, _ := signals.ParseSignal(p.Signal)
		if !slices.Contains(servable, p.Signal) {
			errs = append(errs, field.NotSupported(path.Child("signal"), p.Signal, servable))
		}
		if p.UnknownPodSaturation != nil {
			errs = append(errs, field.Forbidden(path.Child("unknownPodSaturation"),
				"a signal policy serves a raw signal, not a saturation: a pod without a fresh signal counts at the higher of its last good value and the other pods' mean"))
		}
		sp.Signal = s
	default:
		errs = append(errs, field.NotSupported(path.Child("kind"), p.Kind, []string{"mean", "demand", "signal"}))
		return sp, errs
	}
	for i, t := range p.Terms {
		st, terrs := t.convert(path.Child("terms").Index(i))
		errs = append(errs, terrs...)
		sp.Terms = append(sp.Terms, st)
	}
	if g := p.Gateway; g != nil {
		gp := path.Child("gateway")
		if strings.TrimSpace(g.Selector) == "" {
			// Blank parses as every pod of the namespace: each would be read as
			// a gateway and left out of the engine pool.
			errs = append(errs, field.Required(gp.Child("selector"), "the gateway pods' label selector, e.g. app=epp"))
		} else if _, err := k8slabels.Parse(g.Selector); err != nil {
			errs = append(errs, field.Invalid(gp.Child("selector"), g.Selector, err.Error()))
		}
		if g.Port < 0 || g.Port > 65535 {
			errs = append(errs, field.Invalid(gp.Child("port"), g.Port, "must be a port number"))
		}
		if g.Path != "" && !strings.HasPrefix(g.Path, "/") {
			errs = append(errs, field.Invalid(gp.Child("path"), g.Path, "must start with /"))
		}
		if len(g.Match) == 0 {
			errs = append(errs, field.Required(gp.Child("match"), "labels that pick this pool's series, e.g. inference_pool: my-pool"))
		}
		token := g.BearerTokenFile
		if token != "" {
			if why := tokenFileProblem(token); why != "" {
				errs = append(errs, field.Invalid(gp.Child("bearerTokenFile"), token, why))
			}
			token = filepath.Clean(token)
		}
		if g.ServiceAccountName != "" && !validName(g.ServiceAccountName) {
			errs = append(errs, field.Invalid(gp.Child("serviceAccountName"), g.ServiceAccountName, "must be a ServiceAccount name (DNS-1123 subdomain)"))
		}
		if g.Namespace != "" && !policy.ValidName(g.Namespace) {
			errs = append(errs, field.Invalid(gp.Child("namespace"), g.Namespace, "must be a namespace name (DNS-1123 label)"))
		}
		sp.Gateway = &policy.GatewayInput{Namespace: g.Namespace, Selector: g.Selector, Port: g.Port, Path: g.Path,
			Metric: g.Metric, Match: g.Match, QueueSetPoint: g.QueueSetPoint, BearerTokenFile: token, ServiceAccount: g.ServiceAccountName}
	}
	errs = append(errs, p.convertAhead(path, &sp)...)
	if len(errs) > 0 {
		return sp, errs
	}
	if err := sp.Validate(); err != nil {
		errs = append(errs, field.Invalid(fieldPath(path, err.Field), shown(err.Value), err.Msg))
	}
	return sp, errs
}

// convertAhead sets the peak hold, trend and scheduled minimums of sp, requiring
// their mandatory fields (the policy's validation checks the values).
func (p *Policy) convertAhead(path *field.Path, sp *policy.Policy) field.ErrorList {
	var errs field.ErrorList
	if pk := p.Peak; pk != nil {
		h := &policy.PeakHold{Headroom: pk.Headroom}
		if pk.Window == nil {
			errs = append(errs, field.Required(path.Child("peak", "window"), "how long a peak counts, e.g. 10m"))
		} else {
			h.Window = pk.Window.Duration
		}
		if pk.HalfLife != nil {
			h.HalfLife = pk.HalfLife.Duration
		}
		sp.Peak = h
	}
	if tr := p.Trend; tr != nil {
		t := &policy.Trend{}
		if tr.Window == nil {
			errs = append(errs, field.Required(path.Child("trend", "window"), "the span the demand's slope is fitted over, e.g. 2m"))
		} else {
			t.Window = tr.Window.Duration
		}
		if tr.Lookahead == nil {
			errs = append(errs, field.Required(path.Child("trend", "lookahead"), "how far a rising demand is extrapolated, e.g. 4m (cold start + scale-up window)"))
		} else {
			t.Lookahead = tr.Lookahead.Duration
		}
		sp.Trend = t
	}
	for i, m := range p.Minimums {
		mp := path.Child("minimums").Index(i)
		sm := policy.ScheduledMinimum{Schedule: m.Schedule, TimeZone: m.TimeZone, Demand: m.Demand}
		if m.Schedule == "" {
			errs = append(errs, field.Required(mp.Child("schedule"), `a 5-field cron expression, e.g. "0 9 * * 1-5"`))
		}
		if m.Duration == nil {
			errs = append(errs, field.Required(mp.Child("duration"), "how long each window stays open, e.g. 8h"))
		} else {
			sm.Duration = m.Duration.Duration
		}
		sp.Minimums = append(sp.Minimums, sm)
	}
	return errs
}

// fieldPath turns a policy field name ("terms[1].quantile",
// "minimums[0].schedule") into a path under path.
func fieldPath(path *field.Path, name string) *field.Path {
	for _, part := range strings.Split(name, ".") {
		if i := strings.IndexByte(part, '['); i > 0 && strings.HasSuffix(part, "]") {
			if n, err := strconv.Atoi(part[i+1 : len(part)-1]); err == nil {
				path = path.Child(part[:i]).Index(n)
				continue
			}
		}
		path = path.Child(part)
	}
	return path
}

// validName reports whether s is a DNS-1123 subdomain (a ServiceAccount's
// name): k8s.io/apimachinery's validation.IsDNS1123Subdomain.
func validName(s string) bool { return len(validation.IsDNS1123Subdomain(s)) == 0 }

// convert turns one file term into a policy.Term, validating its fields.
func (t *Term) convert(path *field.Path) (policy.Term, field.ErrorList) {
	var errs field.ErrorList
	st := policy.Term{Kind: policy.TermKind(t.Kind), Quantile: t.Quantile, MaxRatio: t.MaxRatio, MaxNumSeqs: t.MaxNumSeqs}
	if !knownTerm(st.Kind) {
		kinds := make([]string, 0, len(policy.TermKinds()))
		for _, k := range policy.TermKinds() {
			kinds = append(kinds, string(k))
		}
		return st, append(errs, field.NotSupported(path.Child("kind"), t.Kind, kinds))
	}
	if t.Window != nil {
		st.Window = t.Window.Duration
	}
	if st.Kind.IsLatency() {
		if t.SetPoint != nil {
			errs = append(errs, field.Forbidden(path.Child("setPoint"), "a latency term takes slo (a duration) instead"))
		}
		if t.SLO == nil {
			errs = append(errs, field.Required(path.Child("slo"), "the latency objective, e.g. 2s"))
		} else {
			st.SetPoint = t.SLO.Seconds()
		}
	} else {
		if t.SLO != nil {
			errs = append(errs, field.Forbidden(path.Child("slo"), "only latency terms take an slo"))
		}
		if t.Quantile != 0 {
			errs = append(errs, field.Forbidden(path.Child("quantile"), "only latency terms take a quantile"))
		}
		switch {
		case t.SetPoint != nil:
			st.SetPoint = *t.SetPoint
		case st.Kind == policy.TermQueueDepth:
			st.SetPoint = policy.DefaultSetPoints().QueueDepth
		case st.Kind == policy.TermKVCacheUsage:
			st.SetPoint = policy.DefaultSetPoints().KVCacheUsage
		default:
			errs = append(errs, field.Required(path.Child("setPoint"), fmt.Sprintf("the %s value at saturation 1.0", st.Kind)))
		}
	}
	if len(errs) > 0 {
		return st, errs
	}
	d := st
	if d.Kind.IsLatency() && d.Quantile == 0 {
		d.Quantile = policy.DefaultQuantile
	}
	if (d.Kind == policy.TermPreemptionRate || d.Kind == policy.TermDemandRate || d.Kind.IsLatency()) && d.Window == 0 {
		d.Window = policy.DefaultTermWindow
	}
	if err := d.Validate(); err != nil {
		name := err.Field
		if name == "setPoint" && st.Kind.IsLatency() {
			name = "slo"
		}
		errs = append(errs, field.Invalid(path.Child(name), shown(err.Value), err.Msg))
	}
	return st, errs
}

func knownTerm(k policy.TermKind) bool { return slices.Contains(policy.TermKinds(), k) }

// Example returns a commented example file, the one the README shows: a chat
// policy with a tight TTFT guardrail, a batch policy that tolerates a deep
// queue, and a long-context policy led by KV-cache usage. It parses (a test
// checks).
func Example() []byte {
	return bytes.TrimLeft([]byte(exampleFile), "\n")
}

const exampleFile = `
apiVersion: saturation-adapter.io/v1alpha1
kind: PolicyConfig
policies:
# Chat: short prompts, users waiting on the first token. Scale on the queue, the KV
# cache, and a TTFT p95 guardrail at 1.5 s.
- name: chat-saturation
  kind: mean
  terms:
  - {kind: queueDepth, setPoint: 4, maxRatio: 10}
  - {kind: kvCacheUsage, setPoint: 0.8}
  - {kind: ttft, slo: 1500ms, quantile: 0.95, window: 1m}
# Batch: offline work that tolerates a deep queue; replicas needed at 50 waiting per
# pod, preemptions as a warning.
- name: batch-demand
  kind: demand
  terms:
  - {kind: queueDepth, setPoint: 50}
  - {kind: kvCacheUsage, setPoint: 0.95}
  - {kind: preemptionRate, setPoint: 1, window: 2m}
# Long context: the KV cache fills before the queue grows; batch slots matter too
# (vLLM --max-num-seqs 64).
- name: long-context-saturation
  kind: mean
  terms:
  - {kind: kvCacheUsage, setPoint: 0.7}
  - {kind: queueDepth, setPoint: 2}
  - {kind: batchSlots, setPoint: 0.9, maxNumSeqs: 64}
  - {kind: e2eLatency, slo: 60s, quantile: 0.9, window: 5m}
`

// ExampleAhead returns a commented example of the controls that see ahead, the
// one docs/scoreboard.md shows: the fused score with a demand-rate term, a held
// peak and a scheduled minimum, for an HPA with target Value 1. It parses (a
// test checks).
func ExampleAhead() []byte {
	return bytes.TrimLeft([]byte(exampleAheadFile), "\n")
}

const exampleAheadFile = `
apiVersion: saturation-adapter.io/v1alpha1
kind: PolicyConfig
policies:
# Chat that sees ahead: the fused score, the arrival rate against what one
# replica serves (lab calibrate measures it), the last burst's demand held for
# 10 minutes with 20 % headroom, and at least 6 replicas on weekday mornings.
# HPA: External chat-ahead, target type Value, value "1".
- name: chat-ahead
  kind: mean
  terms:
  - {kind: queueDepth, setPoint: 3}
  - {kind: kvCacheUsage, setPoint: 0.3}
  - {kind: demandRate, setPoint: 12, window: 30s}
  peak: {window: 10m, headroom: 0.2, halfLife: 5m}
  minimums:
  - {schedule: "0 8 * * 1-5", duration: 4h, timeZone: Europe/Berlin, demand: 6}
`

// shown is a policy error's value as the message shows it: a duration as
// written ("-1s"), where field.Invalid would print its nanoseconds.
func shown(v any) any {
	if d, ok := v.(time.Duration); ok {
		return d.String()
	}
	return v
}
