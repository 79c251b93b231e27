package app

import (
	"fmt"
	"net/http"
	"time"

	promconfig "github.com/prometheus/common/config"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/utils/clock"
	cmapiserver "sigs.k8s.io/custom-metrics-apiserver/pkg/apiserver"
	generatedcore "sigs.k8s.io/custom-metrics-apiserver/pkg/generated/openapi/core"
	generatedcustommetrics "sigs.k8s.io/custom-metrics-apiserver/pkg/generated/openapi/custommetrics"
	generatedexternalmetrics "sigs.k8s.io/custom-metrics-apiserver/pkg/generated/openapi/externalmetrics"

	"github.com/saturation-adapter/saturation-adapter/pkg/apiservice"
	"github.com/saturation-adapter/saturation-adapter/pkg/config"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	promsource "github.com/saturation-adapter/saturation-adapter/pkg/prometheus"
	"github.com/saturation-adapter/saturation-adapter/pkg/provider"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/servingcert"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Name is the adapter's name in its OpenAPI document and logs.
const Name = "saturation-adapter"

// Config is everything the server is built from: the generic API server's
// configuration, the Kubernetes client and the settings of each pipeline stage
// (pod selection → scrape → signals → provider). Tests may replace fields (a
// fake Client, a fake Clock) between Options.Config and Complete.
type Config struct {
	// Generic is the generic API server's configuration (secure serving,
	// delegated authentication and authorization, audit, OpenAPI).
	Generic *genericapiserver.RecommendedConfig
	// Client reads pods and HorizontalPodAutoscalers (and, with ManagedTLS,
	// writes the serving certificate's Secret).
	Client kubernetes.Interface
	// Dynamic reads the APIServices (ownership check) and writes their
	// caBundle (ManagedTLS).
	Dynamic dynamic.Interface
	// Clock timestamps readings and ages them, and ticks the APIService check
	// and certificate rotation.
	Clock clock.WithTicker

	// APIServices should route to Self. The ownership check runs when both
	// are known (Self.Namespace is empty outside a pod without
	// --adapter-namespace).
	APIServices []string
	Self        apiservice.Service
	// ManagedTLS, when not nil, is the managed serving certificate; it
	// replaces the generic server's certificate.
	ManagedTLS *servingcert.Config

	// Namespaces watched; all when empty.
	Namespaces []string
	// MaxSelectorBytes bounds a request's label and field selectors; longer
	// ones are refused before authentication and authorization (see
	// withSelectorLimit).
	MaxSelectorBytes int
	// Builtin are the built-in policies; ConfigFile, when set, adds the
	// policies of that file, reloaded every ConfigReloadInterval.
	Builtin              []policy.Policy
	ConfigFile           string
	ConfigReloadInterval time.Duration
	// StateWindow is the span over which engine states are judged.
	StateWindow time.Duration
	// Extract bounds what one body may hold.
	Extract signals.ExtractOptions
	// Select configures which pods are pooled and scraped.
	Select podselect.Options
	// Scrape bounds each scrape; ScrapeTLS verifies https engines;
	// ScrapeInterval is the period of the scrape loop; ColdScrapeTimeout bounds
	// the on-demand scrape of pods a request finds never scraped.
	Scrape            scrape.Options
	ScrapeTLS         promconfig.TLSConfig
	ScrapeInterval    time.Duration
	ColdScrapeTimeout time.Duration
	// Provider configures the answers.
	Provider provider.Options

	// Source is SourceDirect (the scrape loop) or SourcePrometheus: then
	// PrometheusClient reaches Prometheus and PrometheusSource says how its
	// answers are read, and nothing is scraped.
	Source           string
	PrometheusClient promsource.ClientOptions
	PrometheusSource promsource.Options
}

// Config builds the server configuration from validated, completed options:
// it writes a self-signed serving certificate to --cert-dir when none is given,
// and builds the delegated authentication and authorization clients. Errors
// name what could not be built.
func (o *Options) Config() (*Config, error) {
	if _, err := o.Scoring.Catalog(); err != nil {
		return nil, err
	}
	restConfig, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("building Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("building Kubernetes dynamic client: %w", err)
	}
	generic := genericapiserver.NewRecommendedConfig(cmapiserver.Codecs)
	generic.ClientConfig = restConfig
	o.Server.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openAPIDefinitions, openapinamer.NewDefinitionNamer(cmapiserver.Scheme))
	o.Server.OpenAPIConfig.Info.Title, o.Server.OpenAPIConfig.Info.Version = Name, "1.0.0"
	o.Server.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openAPIDefinitions, openapinamer.NewDefinitionNamer(cmapiserver.Scheme))
	o.Server.OpenAPIV3Config.Info.Title, o.Server.OpenAPIV3Config.Info.Version = Name, "1.0.0"
	if err := o.Server.ApplyTo(generic); err != nil {
		return nil, fmt.Errorf("configuring the API server: %w", err)
	}
	var managed *servingcert.Config
	if o.ManagedTLS.Enabled() {
		c := o.ManagedTLS.Config(o.Identity)
		managed = &c
	}
	var self apiservice.Service
	if o.Identity.Enabled() {
		self = o.Identity.Self()
	}
	stateWindow := o.Scoring.StateWindow
	if o.Source == SourcePrometheus {
		// A state of no progress needs at least 3 readings in the window: 3 of
		// Prometheus's scrapes.
		stateWindow = max(stateWindow, 3*o.Prometheus.ScrapeInterval)
	}
	return &Config{
		Generic:          generic,
		Client:           client,
		Dynamic:          dyn,
		Clock:            clock.RealClock{},
		APIServices:      o.Identity.APIServices,
		Self:             self,
		ManagedTLS:       managed,
		Namespaces:       o.Namespaces,
		MaxSelectorBytes: o.MaxSelectorBytes,
		Builtin:          o.Scoring.Builtin(),
		ConfigFile:       o.Scoring.ConfigFile, ConfigReloadInterval: config.DefaultReloadInterval,
		StateWindow: stateWindow,
		Extract:     signals.ExtractOptions{MaxSeries: o.Scrape.MaxSeries, MaxEngines: o.Scrape.MaxEngines},
		Select: podselect.Options{
			Port: o.Scrape.Port, Path: o.Scrape.Path, Scheme: o.Scrape.Scheme,
			IdleTimeout:         o.SelectorIdleTimeout,
			MaxRequestSelectors: o.MaxRequestSelectors,
			ScrapeHostNetwork:   o.Scrape.HostNetworkPods,
		},
		Scrape: scrape.Options{Timeout: o.Scrape.Timeout, MaxBodyBytes: o.Scrape.MaxBodyBytes, Concurrency: o.Scrape.Concurrency,
			InflightBytes: o.Scrape.InflightBytes, ReadingsBytes: o.Scrape.ReadingsBytes},
		ScrapeTLS:         o.Scrape.TLSConfig(),
		ScrapeInterval:    o.Scrape.Interval,
		ColdScrapeTimeout: o.Scrape.Timeout,
		Provider:          provider.Options{MaxAge: o.Scrape.MaxSampleAge, StartupGrace: o.StartupGrace},
		Source:            o.Source,
		PrometheusClient:  o.Prometheus.Client(),
		PrometheusSource: promsource.Options{
			URL: o.Prometheus.URL, Labels: o.Prometheus.Labels(), Timeout: o.Prometheus.Timeout, CachePeriod: o.Prometheus.CachePeriod,
			ScrapeInterval: o.Prometheus.ScrapeInterval, MaxAge: o.Scrape.MaxSampleAge, StateWindow: stateWindow,
			Extract: signals.ExtractOptions{MaxSeries: o.Scrape.MaxSeries, MaxEngines: o.Scrape.MaxEngines},
			// Every answer held at once: 8 times the largest one.
			MaxHeldBytes: 8 * o.Prometheus.MaxResponseBytes,
		},
	}, nil
}

// restConfig returns the client configuration of --kubeconfig, or the
// in-cluster one.
func (o *Options) restConfig() (*rest.Config, error) {
	var (
		c   *rest.Config
		err error
	)
	if o.Kubeconfig != "" {
		c, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: o.Kubeconfig}, &clientcmd.ConfigOverrides{}).ClientConfig()
	} else {
		c, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client configuration (--kubeconfig=%q): %w", o.Kubeconfig, err)
	}
	c.QPS, c.Burst = o.ClientQPS, o.ClientBurst
	c.UserAgent = Name
	// client-go retries a refused watch at -v=4 only: log outages at the default level.
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return podselect.NewOutageReporter(rt, clock.RealClock{}, klog.Background())
	})
	return c, nil
}

// openAPIDefinitions are the OpenAPI definitions of the served groups, as
// custom-metrics-apiserver's AdapterBase assembles them
// (sigs.k8s.io/custom-metrics-apiserver v1.37.0, pkg/cmd/builder.go).
func openAPIDefinitions(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
	out := map[string]openapicommon.OpenAPIDefinition{}
	for _, defs := range []openapicommon.GetOpenAPIDefinitions{
		generatedcore.GetOpenAPIDefinitions, generatedcustommetrics.GetOpenAPIDefinitions, generatedexternalmetrics.GetOpenAPIDefinitions,
	} {
		for k, v := range defs(ref) {
			out[k] = v
		}
	}
	return out
}

type completedConfig struct {
	*Config
}

// CompletedConfig is a Config with every default filled; only Complete makes one.
type CompletedConfig struct {
	*completedConfig
}

// Complete fills the defaults a test may have left out.
func (c *Config) Complete() CompletedConfig {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.MaxSelectorBytes <= 0 {
		c.MaxSelectorBytes = DefaultMaxSelectorBytes
	}
	if c.Generic.BuildHandlerChainFunc == nil {
		c.Generic.BuildHandlerChainFunc = genericapiserver.DefaultBuildHandlerChain
	}
	return CompletedConfig{&completedConfig{c}}
}
