// Package app is the saturation-adapter command. Its composition root follows
// k8s.io/sample-apiserver's shape: Options (flags, Complete, Validate) →
// Config() → Complete().New() → Server.Run(ctx). Beside the server it has the
// explain subcommand, which evaluates /metrics files offline through the same
// signals code.
package app

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	promconfig "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	certutil "k8s.io/client-go/util/cert"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	cmoptions "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd/options"

	"github.com/saturation-adapter/saturation-adapter/cmd/internal/setpoints"
	"github.com/saturation-adapter/saturation-adapter/pkg/apiservice"
	"github.com/saturation-adapter/saturation-adapter/pkg/config"
	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	promsource "github.com/saturation-adapter/saturation-adapter/pkg/prometheus"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/servingcert"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// ScrapeOptions say where and how engines' /metrics are read.
type ScrapeOptions struct {
	Interval     time.Duration
	Timeout      time.Duration
	MaxBodyBytes int64
	// MaxSeries and MaxEngines bound what one body may hold (signals.ExtractOptions).
	MaxSeries   int
	MaxEngines  int
	Concurrency int
	// InflightBytes and ReadingsBytes bound the memory of readings in flight
	// (all namespaces) and kept (per namespace); see scrape.Options.
	InflightBytes int64
	ReadingsBytes int64
	Port          int
	Path          string
	Scheme        string
	// MaxSampleAge is the age beyond which a reading is stale; 0 means 3 intervals.
	MaxSampleAge time.Duration
	// HostNetworkPods allows scraping pods with spec.hostNetwork (at the node's IP).
	HostNetworkPods bool
	// CAFile, ServerName and InsecureSkipVerify verify https engines.
	CAFile             string
	ServerName         string
	InsecureSkipVerify bool
}

// TLSConfig returns the TLS settings for https engines, in the form of a
// Prometheus scrape config (system roots and the pod IP as server name unless a
// flag says otherwise).
func (s ScrapeOptions) TLSConfig() promconfig.TLSConfig {
	return promconfig.TLSConfig{CAFile: s.CAFile, ServerName: s.ServerName, InsecureSkipVerify: s.InsecureSkipVerify}
}

// The signal sources (--source).
const (
	// SourceDirect: the adapter scrapes each engine's /metrics itself.
	SourceDirect = "direct"
	// SourcePrometheus: the adapter reads the engines' series from Prometheus
	// (or Thanos, Mimir, VictoriaMetrics), which scrapes them.
	SourcePrometheus = "prometheus"
)

// PrometheusOptions say where and how the Prometheus source reads the engines'
// series (--source=prometheus).
type PrometheusOptions struct {
	// URL is the Prometheus HTTP API's base URL.
	URL string
	// Timeout bounds one namespace's queries; CachePeriod is how long their
	// answer serves every request of the namespace.
	Timeout     time.Duration
	CachePeriod time.Duration
	// ScrapeInterval is how often Prometheus scrapes the engines (the
	// PodMonitor's interval): the default max sample age and the shortest
	// engine-state window are 3 of them.
	ScrapeInterval time.Duration
	// NamespaceLabel and PodLabel name the series' namespace and pod labels.
	NamespaceLabel, PodLabel string
	// BearerTokenFile, CAFile, CertFile, KeyFile, ServerName and
	// InsecureSkipTLSVerify authenticate the adapter to Prometheus and verify it.
	BearerTokenFile       string
	CAFile                string
	CertFile, KeyFile     string
	ServerName            string
	InsecureSkipTLSVerify bool
	// Headers are sent with every query (Mimir's X-Scope-OrgID).
	Headers map[string]string
	// MaxResponseBytes bounds one answer.
	MaxResponseBytes int64
}

// NewPrometheusOptions returns the defaults of pkg/prometheus.
func NewPrometheusOptions() PrometheusOptions {
	l := promsource.DefaultLabels()
	return PrometheusOptions{Timeout: promsource.DefaultTimeout, CachePeriod: promsource.DefaultCachePeriod,
		ScrapeInterval: promsource.DefaultScrapeInterval, NamespaceLabel: l.Namespace, PodLabel: l.Pod,
		MaxResponseBytes: promsource.DefaultMaxResponseBytes}
}

// AddLabelFlags adds the flags that read a Prometheus answer (explain shares
// them): the namespace and pod label names and the scrape interval.
func (o *PrometheusOptions) AddLabelFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NamespaceLabel, "prometheus-namespace-label", o.NamespaceLabel, "Label of the engines' series that holds the pod's namespace (kubernetes_namespace where a scrape config relabels it so).")
	fs.StringVar(&o.PodLabel, "prometheus-pod-label", o.PodLabel, "Label of the engines' series that holds the pod's name (kubernetes_pod_name where a scrape config relabels it so).")
	fs.DurationVar(&o.ScrapeInterval, "prometheus-scrape-interval", o.ScrapeInterval,
		"How often Prometheus scrapes the engines (your PodMonitor's interval): with --source=prometheus the default --max-sample-age is 3 of them plus --prometheus-cache-period, and the shortest --engine-state-window 3 of them.")
}

// AddFlags adds every --prometheus-* flag.
func (o *PrometheusOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.URL, "prometheus-url", o.URL, "Base URL of the Prometheus HTTP API (Thanos Query, Mimir's /prometheus, VictoriaMetrics alike), e.g. http://prometheus-operated.monitoring:9090. Required with --source=prometheus.")
	fs.DurationVar(&o.Timeout, "prometheus-timeout", o.Timeout, "Deadline of one namespace's queries to Prometheus; past it the request fails and the HPA holds.")
	fs.DurationVar(&o.CachePeriod, "prometheus-cache-period", o.CachePeriod, "How long one answer from Prometheus serves every HPA and request of its namespace.")
	o.AddLabelFlags(fs)
	fs.StringVar(&o.BearerTokenFile, "prometheus-bearer-token-file", o.BearerTokenFile, "File whose content is sent as a bearer token to Prometheus, re-read on every query (a projected ServiceAccount token).")
	fs.StringVar(&o.CAFile, "prometheus-ca-file", o.CAFile, "PEM CA bundle that verifies an https Prometheus, re-read when it changes; the system roots when empty.")
	fs.StringVar(&o.CertFile, "prometheus-cert-file", o.CertFile, "Client certificate (PEM) presented to Prometheus, with --prometheus-key-file.")
	fs.StringVar(&o.KeyFile, "prometheus-key-file", o.KeyFile, "Key (PEM) of --prometheus-cert-file.")
	fs.StringVar(&o.ServerName, "prometheus-tls-server-name", o.ServerName, "Name to verify in Prometheus's certificate; the URL's host when empty.")
	fs.BoolVar(&o.InsecureSkipTLSVerify, "prometheus-insecure-skip-tls-verify", o.InsecureSkipTLSVerify, "Do not verify Prometheus's certificate (the answers could then be forged; logged as a warning at start).")
	fs.StringToStringVar(&o.Headers, "prometheus-headers", o.Headers, "Headers sent with every query, as Name=value pairs separated by commas (e.g. X-Scope-OrgID=tenant-1 for Mimir).")
	fs.Int64Var(&o.MaxResponseBytes, "prometheus-max-response-bytes", o.MaxResponseBytes, "Largest answer accepted from Prometheus, in bytes.")
}

// Labels returns the namespace and pod label names.
func (o PrometheusOptions) Labels() promsource.Labels {
	return promsource.Labels{Namespace: o.NamespaceLabel, Pod: o.PodLabel}
}

// Client returns the client settings.
func (o PrometheusOptions) Client() promsource.ClientOptions {
	return promsource.ClientOptions{URL: o.URL, BearerTokenFile: o.BearerTokenFile,
		TLS:     promconfig.TLSConfig{CAFile: o.CAFile, CertFile: o.CertFile, KeyFile: o.KeyFile, ServerName: o.ServerName, InsecureSkipVerify: o.InsecureSkipTLSVerify},
		Headers: o.Headers, MaxResponseBytes: o.MaxResponseBytes}
}

// ValidateLabels returns one error per bad label-name or interval flag.
func (o PrometheusOptions) ValidateLabels() []error {
	var errs []error
	for flag, v := range map[string]string{"--prometheus-namespace-label": o.NamespaceLabel, "--prometheus-pod-label": o.PodLabel} {
		if !model.LegacyValidation.IsValidLabelName(v) {
			errs = append(errs, fmt.Errorf("%s=%q: must be a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)", flag, v))
		}
	}
	if o.ScrapeInterval <= 0 || o.ScrapeInterval > MaxScrapeInterval {
		errs = append(errs, fmt.Errorf("--prometheus-scrape-interval=%s: must be > 0 and at most %s", o.ScrapeInterval, MaxScrapeInterval))
	}
	return errs
}

// Validate returns one error per bad --prometheus-* flag, each naming the
// flag and its value.
func (o PrometheusOptions) Validate() []error {
	errs := o.ValidateLabels()
	if o.URL == "" {
		errs = append(errs, errors.New("--prometheus-url: required with --source=prometheus"))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--prometheus-timeout=%s: must be > 0", o.Timeout))
	}
	if o.CachePeriod <= 0 {
		errs = append(errs, fmt.Errorf("--prometheus-cache-period=%s: must be > 0", o.CachePeriod))
	}
	if o.MaxResponseBytes < 1 || o.MaxResponseBytes > 4<<30 {
		errs = append(errs, fmt.Errorf("--prometheus-max-response-bytes=%d: must be in 1..4294967296 (4 GiB)", o.MaxResponseBytes))
	}
	if o.CAFile != "" {
		if _, err := certutil.NewPool(o.CAFile); err != nil {
			errs = append(errs, fmt.Errorf("--prometheus-ca-file=%s: %w", o.CAFile, err))
		}
	}
	if o.InsecureSkipTLSVerify && o.CAFile != "" {
		errs = append(errs, fmt.Errorf("--prometheus-insecure-skip-tls-verify and --prometheus-ca-file=%s: choose one", o.CAFile))
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		errs = append(errs, fmt.Errorf("--prometheus-cert-file=%q and --prometheus-key-file=%q: give both or neither", o.CertFile, o.KeyFile))
	}
	if o.URL != "" {
		if err := promsource.CheckURL(o.URL); err != nil {
			errs = append(errs, fmt.Errorf("--prometheus-url: %w", err))
		}
	}
	if len(o.Headers) > 0 {
		if err := (promsource.ClientOptions{URL: "http://prometheus", Headers: o.Headers, MaxResponseBytes: 1}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--prometheus-headers: %w", err))
		}
	}
	return errs
}

// ScoringOptions are the set points of the built-in saturation policies, the
// saturation of a pod without fresh data, how long a pod that stopped answering
// keeps its last good value, the policy configuration file and the engine-state
// window.
type ScoringOptions struct {
	// SetPoints are the set-point flags the lab tool shares.
	SetPoints      setpoints.Flags
	UnknownPodHold time.Duration
	// ConfigFile is the policy configuration (--config); none when empty.
	ConfigFile string
	// StateWindow is the span over which engine states are judged.
	StateWindow time.Duration
}

// NewScoringOptions returns the defaults of policy.DefaultSetPoints,
// policy.DefaultUnknownSaturation, policy.DefaultHoldLastGood and
// history.DefaultStateWindow.
func NewScoringOptions() ScoringOptions {
	return ScoringOptions{SetPoints: setpoints.New(), UnknownPodHold: policy.DefaultHoldLastGood, StateWindow: history.DefaultStateWindow}
}

// AddFlags adds the scoring flags; explain and the server share them: the set
// points (setpoints.Flags) and the policy flags (--config, --unknown-pod-hold,
// --engine-state-window).
func (o *ScoringOptions) AddFlags(fs *pflag.FlagSet) {
	o.SetPoints.AddFlags(fs)
	fs.DurationVar(&o.UnknownPodHold, "unknown-pod-hold", o.UnknownPodHold,
		"How long a pod that stopped answering keeps counting at its last good value when that is higher than the unknown-pod value, so a partial outage never scales a pool down; 0 turns it off.")
	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile,
		"Policy configuration file (YAML): metrics served beside the built-in ones, each with its terms, set points and rules. Reloaded when it changes; a bad new file keeps the previous one.")
	fs.DurationVar(&o.StateWindow, "engine-state-window", o.StateWindow,
		"How long an engine must make no progress (no token, nothing finished) while requests wait before it is judged wedged or frozen; at least 3 scrapes spanning at least half of it must show it.")
}

// Validate returns one error per bad scoring flag, naming the flag and its value.
func (o *ScoringOptions) Validate() []error {
	errs := o.SetPoints.Validate()
	if o.UnknownPodHold < 0 {
		errs = append(errs, fmt.Errorf("--unknown-pod-hold=%s: must be >= 0", o.UnknownPodHold))
	}
	if o.StateWindow < time.Second {
		errs = append(errs, fmt.Errorf("--engine-state-window=%s: must be at least 1s", o.StateWindow))
	}
	if o.ConfigFile != "" {
		// The whole file is checked here, so a bad one stops the start with every
		// bad field named.
		if f, err := config.ReadFile(o.ConfigFile); err != nil {
			errs = append(errs, fmt.Errorf("--config=%s: %w", o.ConfigFile, err))
		} else if _, err := f.Catalog(o.Builtin()); err != nil {
			errs = append(errs, fmt.Errorf("--config=%s: %w", o.ConfigFile, err))
		}
	}
	return errs
}

// Builtin returns the built-in policies with these set points.
func (o *ScoringOptions) Builtin() []policy.Policy {
	return policy.BuiltinPolicies(o.SetPoints.SetPoints, o.SetPoints.UnknownSaturation, o.UnknownPodHold)
}

// Catalog returns the metric catalog: the built-in policies and those of the
// configuration file, if any.
func (o *ScoringOptions) Catalog() (*policy.Catalog, error) {
	var f *config.File
	if o.ConfigFile != "" {
		var err error
		if f, err = config.ReadFile(o.ConfigFile); err != nil {
			return nil, fmt.Errorf("--config=%s: %w", o.ConfigFile, err)
		}
	}
	return f.Catalog(o.Builtin())
}

// Options are all options of the adapter server. NewOptions fills every
// default, including the library's, so Validate and Config work whether or not
// Flags was called.
type Options struct {
	// Server carries custom-metrics-apiserver's options: secure serving,
	// delegated authentication and authorization, audit, features.
	Server *cmoptions.CustomMetricsAdapterServerOptions
	Logs   *logsapi.LoggingConfiguration

	// Kubeconfig, ClientQPS and ClientBurst configure the client that reads pods
	// and HorizontalPodAutoscalers; in-cluster configuration when Kubeconfig is
	// empty.
	Kubeconfig  string
	ClientQPS   float32
	ClientBurst int

	Namespaces          []string
	SelectorIdleTimeout time.Duration
	// StartupGrace is how long a pod that is not Ready yet counts as starting
	// (provider.Options.StartupGrace); 0 turns it off.
	StartupGrace time.Duration
	// MaxRequestSelectors bounds the selectors remembered from requests that no
	// HPA's External metric explains.
	MaxRequestSelectors int
	// MaxSelectorBytes bounds a request's label and field selectors.
	MaxSelectorBytes int
	// Source is SourceDirect or SourcePrometheus; Prometheus configures the
	// latter.
	Source     string
	Prometheus PrometheusOptions
	Scrape     ScrapeOptions
	Scoring    ScoringOptions
	// Identity names the adapter's Service and the APIServices that should
	// route to it (ownership check, caBundle of the managed certificate).
	Identity *apiservice.Options
	// ManagedTLS manages the serving certificate in a Secret when enabled.
	ManagedTLS *servingcert.Options
	// PrintVersion prints the version and exits.
	PrintVersion bool
}

// NewOptions returns Options with their defaults.
func NewOptions() *Options {
	server := cmoptions.NewCustomMetricsAdapterServerOptions()
	// An unprivileged container cannot bind the library's default 443.
	server.SecureServing.BindPort = 6443
	// The adapter serves /metrics itself: the API server's registry and its own.
	server.EnableMetrics = false
	return &Options{
		Server:      server,
		Logs:        logsapi.NewLoggingConfiguration(),
		ClientQPS:   20,
		ClientBurst: 30,
		// Long enough to outlive an HPA whose sync period was raised a lot, short
		// enough that a deleted HPA's pods stop being scraped soon after.
		SelectorIdleTimeout: 10 * time.Minute,
		MaxRequestSelectors: podselect.DefaultMaxRequestSelectors,
		// vLLM's cold start is minutes: a model load takes 2 to 10 (DOMAIN.md §5).
		StartupGrace:     10 * time.Minute,
		MaxSelectorBytes: DefaultMaxSelectorBytes,
		Scrape: ScrapeOptions{
			Interval:      2 * time.Second,
			Timeout:       time.Second,
			MaxBodyBytes:  4 << 20,
			MaxSeries:     signals.DefaultMaxSeries,
			MaxEngines:    signals.DefaultMaxEngines,
			Concurrency:   64,
			InflightBytes: scrape.DefaultInflightBytes,
			ReadingsBytes: scrape.DefaultReadingsBytes,
			Port:          8000, // vLLM's default --port
			Path:          "/metrics",
			Scheme:        "http",
		},
		Source:     SourceDirect,
		Prometheus: NewPrometheusOptions(),
		Scoring:    NewScoringOptions(),
		Identity:   apiservice.NewOptions(),
		ManagedTLS: servingcert.NewOptions(),
	}
}

// Flags returns the flags in named sets, for grouped help output: the
// adapter's own first (pod selection, signal source, scrape, saturation,
// aggregation, Kubernetes client), then the API server library's, logging and
// misc.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets

	sel := fss.FlagSet("pod selection")
	sel.StringSliceVar(&o.Namespaces, "namespaces", o.Namespaces,
		"Namespaces whose pods and HorizontalPodAutoscalers are watched; all namespaces when empty.")
	sel.DurationVar(&o.SelectorIdleTimeout, "selector-idle-timeout", o.SelectorIdleTimeout,
		"How long the pods of a selector keep being scraped after the last request that used it.")
	sel.IntVar(&o.MaxRequestSelectors, "max-request-selectors", o.MaxRequestSelectors,
		"Most selectors remembered from requests that no HPA's External metric explains (kubectl, HPAs of type Pods); past it the least recently asked of the namespace holding the most is forgotten. Selectors longer than 4096 bytes are never remembered.")
	sel.DurationVar(&o.StartupGrace, "startup-grace", o.StartupGrace,
		"How long after its creation a pod that is not Ready yet counts as starting (loading its model): while one is, a demand metric serves at least the pods counted and starting, so the HPA never deletes it before it served (scale from zero in flight); 0 turns it off.")
	sel.IntVar(&o.MaxSelectorBytes, "max-selector-bytes", o.MaxSelectorBytes,
		"Longest label or field selector a request may carry, in bytes; a longer one is refused (400) before authentication and authorization, whose cache would keep it.")

	src := fss.FlagSet("signal source")
	src.StringVar(&o.Source, "source", o.Source, "Where engines' signals come from: direct (the adapter scrapes each pod's /metrics) or prometheus (it reads their series from --prometheus-url, which scrapes them).")
	o.Prometheus.AddFlags(src)

	s := fss.FlagSet("scrape")
	s.DurationVar(&o.Scrape.Interval, "scrape-interval", o.Scrape.Interval, "How often each engine's /metrics is scraped, each pod at its own phase; failing pods back off up to 8 intervals.")
	s.DurationVar(&o.Scrape.Timeout, "scrape-timeout", o.Scrape.Timeout, "Deadline of one scrape, connection to last byte.")
	s.Int64Var(&o.Scrape.MaxBodyBytes, "scrape-max-body-bytes", o.Scrape.MaxBodyBytes, "Largest /metrics body accepted, in bytes.")
	s.IntVar(&o.Scrape.MaxSeries, "scrape-max-series", o.Scrape.MaxSeries, "Most series of the engine metric families read in one /metrics body; a body with more fails its scrape (reason too_many_series).")
	s.IntVar(&o.Scrape.MaxEngines, "scrape-max-engines", o.Scrape.MaxEngines, "Most engines (data-parallel ranks, Triton models) in one /metrics body; more fails the scrape (reason too_many_engines).")
	s.IntVar(&o.Scrape.Concurrency, "scrape-concurrency", o.Scrape.Concurrency, "Scrapes in flight at once, scheduled and on-demand together, shared fairly between namespaces and pools.")
	s.Int64Var(&o.Scrape.InflightBytes, "scrape-inflight-bytes", o.Scrape.InflightBytes, "Memory the scrapes in flight may hold while they read and extract bodies (16 bytes per byte of body), one namespace at most a quarter of it; a scrape waits for room within its timeout.")
	s.Int64Var(&o.Scrape.ReadingsBytes, "scrape-readings-budget-bytes", o.Scrape.ReadingsBytes, "Memory each namespace's kept readings may hold; a pod whose new reading would take its namespace past it is not stored (reason over_budget) and turns unknown.")
	s.IntVar(&o.Scrape.Port, "scrape-port", o.Scrape.Port, "Port of /metrics for pods without the prometheus.io/port annotation.")
	s.StringVar(&o.Scrape.Path, "scrape-path", o.Scrape.Path, "Path of /metrics for pods without the prometheus.io/path annotation.")
	s.StringVar(&o.Scrape.Scheme, "scrape-scheme", o.Scrape.Scheme, "Scheme (http or https) for pods without the prometheus.io/scheme annotation.")
	s.StringVar(&o.Scrape.CAFile, "scrape-ca-file", o.Scrape.CAFile, "PEM CA bundle that verifies engines scraped over https, re-read when it changes; the system roots when empty.")
	s.StringVar(&o.Scrape.ServerName, "scrape-tls-server-name", o.Scrape.ServerName, "Name to verify in the certificates of https engines; the pod IP when empty.")
	s.BoolVar(&o.Scrape.InsecureSkipVerify, "scrape-insecure-skip-verify", o.Scrape.InsecureSkipVerify, "Do not verify the certificates of https engines (traffic stays encrypted; a pod can then be impersonated).")
	s.DurationVar(&o.Scrape.MaxSampleAge, "max-sample-age", o.Scrape.MaxSampleAge,
		"Age beyond which a pod's last reading is stale and the pod unknown; 0 means 3 scrape intervals (with --source=prometheus, 3 × --prometheus-scrape-interval + --prometheus-cache-period).")
	s.BoolVar(&o.Scrape.HostNetworkPods, "scrape-host-network-pods", o.Scrape.HostNetworkPods,
		"Scrape pods with hostNetwork: true. Their IP is the node's, so their annotations could aim the adapter at any port of the node; off, such a pod counts as unknown.")

	o.Scoring.AddFlags(fss.FlagSet("saturation"))

	agg := fss.FlagSet("aggregation (APIService ownership, managed serving certificate)")
	o.Identity.AddFlags(agg)
	o.ManagedTLS.AddFlags(agg)

	kube := fss.FlagSet("Kubernetes client")
	kube.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig,
		"Kubeconfig for reading pods and HorizontalPodAutoscalers; in-cluster configuration when empty.")
	kube.StringVar(&o.Kubeconfig, "lister-kubeconfig", o.Kubeconfig, "Same as --kubeconfig.")
	_ = kube.MarkDeprecated("lister-kubeconfig", "use --kubeconfig")
	kube.Float32Var(&o.ClientQPS, "client-qps", o.ClientQPS, "Queries per second to the API server (list and watch of pods and HPAs).")
	kube.IntVar(&o.ClientBurst, "client-burst", o.ClientBurst, "Burst of queries to the API server above --client-qps.")

	// The API server library's own flags come after the adapter's: most users
	// never touch them.
	generic := fss.FlagSet("generic API server (secure serving, authentication, authorization)")
	o.Server.AddFlags(generic)

	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))

	misc := fss.FlagSet("misc")
	misc.BoolVar(&o.PrintVersion, "version", o.PrintVersion, "Print the version and exit.")
	return fss
}

// Complete fills in defaults that depend on other options.
func (o *Options) Complete() {
	if o.Scrape.MaxSampleAge == 0 {
		o.Scrape.MaxSampleAge = 3 * o.Scrape.Interval
		if o.Source == SourcePrometheus {
			// Answers are served from memory for up to a cache period
			// (refreshed in the background), so the data a request reads is
			// that much older than Prometheus's newest: the default tolerates
			// three missed Prometheus scrapes either way.
			o.Scrape.MaxSampleAge = 3*o.Prometheus.ScrapeInterval + max(o.Prometheus.CachePeriod, 0)
		}
	}
	o.Scrape.Path = strings.TrimSpace(o.Scrape.Path)
	o.Identity.Complete()
}

// Validate returns every invalid option at once, each naming its flag and value.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.Scrape.validate()...)
	errs = append(errs, o.validateSource()...)
	errs = append(errs, o.Scrape.validateTLS()...)
	errs = append(errs, o.validateSelection()...)
	errs = append(errs, o.Scoring.Validate()...)
	errs = append(errs, o.Identity.Validate()...)
	// Before Config: its ApplyTo points --tls-cert-file at the self-signed pair
	// it writes into --cert-dir, which this check would then reject.
	errs = append(errs, o.ManagedTLS.Validate(o.Identity, o.Server.SecureServing.ServerCert.CertKey.CertFile)...)
	errs = append(errs, o.Server.Validate()...)
	// Validate only: applying the logging configuration is Run's, once per process.
	errs = append(errs, logsapi.Validate(o.Logs, nil, field.NewPath("logging")).ToAggregate())
	return utilerrors.NewAggregate(errs)
}

// MaxScrapeInterval bounds --scrape-interval, --prometheus-scrape-interval and
// explain's --interval: an HPA syncs every 15 s, so readings an hour apart
// steer nothing, and the default maximum sample age (3 intervals) stays far
// from time.Duration's overflow (about 292 years), which once served a
// negative age.
const MaxScrapeInterval = time.Hour

// validate returns one error per bad scrape flag (limits, port, path, scheme).
func (s ScrapeOptions) validate() []error {
	var errs []error
	if s.Interval <= 0 || s.Interval > MaxScrapeInterval {
		errs = append(errs, fmt.Errorf("--scrape-interval=%s: must be > 0 and at most %s", s.Interval, MaxScrapeInterval))
	}
	if s.Timeout <= 0 || s.Timeout > s.Interval {
		errs = append(errs, fmt.Errorf("--scrape-timeout=%s: must be > 0 and at most --scrape-interval (%s)", s.Timeout, s.Interval))
	}
	if s.MaxBodyBytes <= 0 || s.MaxBodyBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("--scrape-max-body-bytes=%d: must be in 1..1073741824 (1 GiB)", s.MaxBodyBytes))
	}
	if s.MaxSeries < 1 || s.MaxSeries > 1_000_000 {
		errs = append(errs, fmt.Errorf("--scrape-max-series=%d: must be in 1..1000000", s.MaxSeries))
	}
	if s.MaxEngines < 1 || s.MaxEngines > 100_000 {
		errs = append(errs, fmt.Errorf("--scrape-max-engines=%d: must be in 1..100000", s.MaxEngines))
	}
	if s.InflightBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("--scrape-inflight-bytes=%d: must be at least 1048576 (1 MiB)", s.InflightBytes))
	}
	if s.ReadingsBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("--scrape-readings-budget-bytes=%d: must be at least 1048576 (1 MiB)", s.ReadingsBytes))
	}
	if s.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("--scrape-concurrency=%d: must be >= 1", s.Concurrency))
	}
	if s.Port < 1 || s.Port > 65535 {
		errs = append(errs, fmt.Errorf("--scrape-port=%d: must be a port number 1-65535", s.Port))
	}
	if u, err := url.Parse(s.Path); err != nil || !strings.HasPrefix(s.Path, "/") || u.Host != "" {
		errs = append(errs, fmt.Errorf("--scrape-path=%q: must be an absolute path such as /metrics", s.Path))
	}
	if s.Scheme != "http" && s.Scheme != "https" {
		errs = append(errs, fmt.Errorf("--scrape-scheme=%q: must be http or https", s.Scheme))
	}
	return errs
}

// validateTLS checks the https scrape flags: a CA file that can verify, and not
// both a CA file and no verification.
func (s ScrapeOptions) validateTLS() []error {
	var errs []error
	if s.CAFile != "" {
		// Fail at start-up on a CA file that cannot verify anything, rather than on
		// the first https scrape.
		if _, err := certutil.NewPool(s.CAFile); err != nil {
			errs = append(errs, fmt.Errorf("--scrape-ca-file=%s: %w", s.CAFile, err))
		}
	}
	if s.InsecureSkipVerify && s.CAFile != "" {
		errs = append(errs, fmt.Errorf("--scrape-insecure-skip-verify and --scrape-ca-file=%s: choose one", s.CAFile))
	}
	return errs
}

// validateSource checks --source and the flags of the source chosen, with
// --max-sample-age against the interval that source refreshes at.
func (o *Options) validateSource() []error {
	var errs []error
	s := o.Scrape
	switch o.Source {
	case SourceDirect:
		if s.MaxSampleAge < s.Interval {
			errs = append(errs, fmt.Errorf("--max-sample-age=%s: must be at least --scrape-interval (%s)", s.MaxSampleAge, s.Interval))
		}
	case SourcePrometheus:
		errs = append(errs, o.Prometheus.Validate()...)
		if s.MaxSampleAge < o.Prometheus.ScrapeInterval {
			errs = append(errs, fmt.Errorf("--max-sample-age=%s: must be at least --prometheus-scrape-interval (%s)", s.MaxSampleAge, o.Prometheus.ScrapeInterval))
		}
	default:
		errs = append(errs, fmt.Errorf("--source=%q: must be %s or %s", o.Source, SourceDirect, SourcePrometheus))
	}
	return errs
}

// validateSelection checks the pod-selection and Kubernetes client flags.
func (o *Options) validateSelection() []error {
	var errs []error
	if o.StartupGrace < 0 {
		errs = append(errs, fmt.Errorf("--startup-grace=%s: must be >= 0", o.StartupGrace))
	}
	if o.SelectorIdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--selector-idle-timeout=%s: must be > 0", o.SelectorIdleTimeout))
	}
	if o.MaxSelectorBytes < 256 || o.MaxSelectorBytes > 1<<20 {
		errs = append(errs, fmt.Errorf("--max-selector-bytes=%d: must be in 256..1048576", o.MaxSelectorBytes))
	}
	if o.MaxRequestSelectors < 1 {
		errs = append(errs, fmt.Errorf("--max-request-selectors=%d: must be >= 1", o.MaxRequestSelectors))
	}
	if o.ClientQPS <= 0 || o.ClientBurst < 1 {
		errs = append(errs, fmt.Errorf("--client-qps=%g and --client-burst=%d: must be > 0", o.ClientQPS, o.ClientBurst))
	}
	for _, ns := range o.Namespaces {
		if ns == "" {
			errs = append(errs, fmt.Errorf("--namespaces=%s: empty namespace name", strings.Join(o.Namespaces, ",")))
			break
		}
	}
	return errs
}
