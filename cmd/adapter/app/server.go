package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	apimetrics "k8s.io/apiserver/pkg/endpoints/metrics"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/term"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	cmapiserver "sigs.k8s.io/custom-metrics-apiserver/pkg/apiserver"

	"github.com/saturation-adapter/saturation-adapter/pkg/advisor"
	"github.com/saturation-adapter/saturation-adapter/pkg/apiservice"
	"github.com/saturation-adapter/saturation-adapter/pkg/config"
	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/hpaindex"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	promsource "github.com/saturation-adapter/saturation-adapter/pkg/prometheus"
	"github.com/saturation-adapter/saturation-adapter/pkg/provider"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/servingcert"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// NewCommand returns the adapter command: it serves the External metrics API
// until ctx is done; its explain subcommand evaluates /metrics files offline.
// drain, simulate and calibrate moved to the drain and lab binaries; the
// adapter keeps them for one release as deprecated, hidden commands (movedCommands).
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewOptions()
	fss := o.Flags()
	cmd := &cobra.Command{
		Use:   "adapter",
		Short: "Serve LLM saturation metrics (queue depth, KV-cache usage) to HorizontalPodAutoscalers",
		Long: `saturation-adapter is a Kubernetes aggregated API server for external.metrics.k8s.io.
It scrapes the /metrics of LLM inference engines (vLLM, SGLang, Triton, TGI, llama.cpp),
fuses queue depth and KV-cache usage into a saturation score per pod, and serves pool
values such as llm_saturation and llm_demand_replicas to autoscaling/v2 HPAs.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.PrintVersion {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), versionString())
				return err
			}
			o.Complete()
			if err := o.Validate(); err != nil {
				return err
			}
			if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
				return err
			}
			c, err := o.Config()
			if err != nil {
				return err
			}
			s, err := c.Complete().New()
			if err != nil {
				return err
			}
			return s.Run(ctx)
		},
	}
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	// Grouped help for the server only; subcommands keep cobra's own.
	root := cmd
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	defaultUsage, defaultHelp := cmd.UsageFunc(), cmd.HelpFunc()
	cmd.SetUsageFunc(func(c *cobra.Command) error {
		if c != root {
			return defaultUsage(c)
		}
		fmt.Fprintf(c.OutOrStderr(), "Usage:\n  %s\n", c.UseLine())
		cliflag.PrintSections(c.OutOrStderr(), fss, cols)
		return nil
	})
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		if c != root {
			defaultHelp(c, args)
			return
		}
		fmt.Fprintf(c.OutOrStdout(), "%s\n\nUsage:\n  %s\n  %s explain POD... [flags]\n",
			c.Long, c.UseLine(), c.CommandPath())
		cliflag.PrintSections(c.OutOrStdout(), fss, cols)
	})
	cmd.AddCommand(newExplainCommand())
	cmd.AddCommand(movedCommands()...)
	return cmd
}

// versionString is what --version prints: the version stamped at build (see
// the Makefile's LDFLAGS), its commit and date, and the Go toolchain.
func versionString() string {
	v := version.Get()
	return fmt.Sprintf("%s %s (commit %s, built %s, %s %s)", Name, v.GitVersion, v.GitCommit, v.BuildDate, v.GoVersion, v.Platform)
}

// Server is the assembled adapter: the API server and the pipeline behind it.
type Server struct {
	generic   *genericapiserver.GenericAPIServer
	informers *podselect.Informers
	pools     *podselect.Selection
	scraper   *scrape.Scraper     // nil with --source=prometheus
	source    *promsource.Source  // nil in direct mode
	checker   *apiservice.Checker // nil when the adapter does not know its Service
	catalogs  *config.Loader
	events    record.EventBroadcaster
	config    CompletedConfig
	// synced is closed once the pod and HPA caches are filled.
	synced chan struct{}
}

// New builds the pipeline (informers → pod selection → scraper → provider) and
// the API server that serves it. Nothing starts until Run: the informers start
// in a post-start hook, and /readyz reports ready once their caches are synced
// and delegated authentication has loaded the aggregator's client CA.
func (c CompletedConfig) New() (*Server, error) {
	reg := prometheus.NewRegistry()
	scrapeMetrics, err := scrape.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	providerMetrics, err := provider.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	configMetrics, err := config.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	catalogs, err := config.NewLoader(c.ConfigFile, c.Builtin, c.Clock, configMetrics)
	if err != nil {
		return nil, err
	}
	inf, err := podselect.NewInformers(c.Client, c.Namespaces)
	if err != nil {
		return nil, err
	}
	// One index of HPAs: the pod selection and the advisor read it, and a
	// deleted HPA's self-metric series go with it.
	hpas := hpaindex.New()
	hpas.Subscribe(func(old, cur *hpaindex.HPA) {
		if cur == nil {
			providerMetrics.ForgetHPA(old.Key)
		}
	})
	sel := c.Select
	sel.HPAs = hpas
	sel.Serves = func(m string) bool { return catalogs.Catalog().Lookup(m) != nil }
	sel.Gateway = func(m string) *podselect.Gateway { return gatewayOf(catalogs.Catalog().Lookup(m)) }
	pools := podselect.New(sel, inf.Pods(), c.Clock)
	advisorMetrics, err := advisor.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	events := record.NewBroadcaster(record.WithContext(context.Background()))
	adv := advisor.New(events.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{Component: Name}), catalogs, advisorMetrics, hpas)
	if err := inf.AddHPAHandler(hpas.Handler()); err != nil {
		return nil, err
	}
	scraper, source, readings, err := c.readings(catalogs, reg, scrapeMetrics)
	if err != nil {
		return nil, err
	}
	popts := c.Provider
	popts.Advice = adv
	prov := provider.New(popts, catalogs, pools, readings, c.Clock, providerMetrics)
	checker, err := c.apiServices(reg)
	if err != nil {
		return nil, err
	}

	// Long selectors are refused before the chain: see withSelectorLimit.
	c.Generic.BuildHandlerChainFunc = withSelectorLimit(c.Generic.BuildHandlerChainFunc, c.MaxSelectorBytes, cmapiserver.Codecs)
	// No SharedInformerFactory for the generic server: the adapter's informers
	// are its own, and the library would register a second informer-sync check.
	cmConfig := &cmapiserver.Config{GenericConfig: &c.Generic.Config}
	cm, err := cmConfig.Complete(nil).New(Name, prov, prov)
	if err != nil {
		return nil, fmt.Errorf("building the API server: %w", err)
	}
	s := &Server{generic: cm.GenericAPIServer, informers: inf, pools: pools, scraper: scraper, source: source, checker: checker, catalogs: catalogs, events: events, config: c, synced: make(chan struct{})}
	if err := s.install(reg); err != nil {
		return nil, err
	}
	return s, nil
}

// readings builds where the provider's readings come from: Prometheus with
// --source=prometheus (source), the scraper otherwise (scraper).
func (c CompletedConfig) readings(catalogs *config.Loader, reg *prometheus.Registry, scrapeMetrics *scrape.Metrics) (*scrape.Scraper, *promsource.Source, provider.Readings, error) {
	if c.Source == SourcePrometheus {
		// One validation path: rejected and duplicate series read from
		// Prometheus are counted on the scrape path's self-metrics.
		c.PrometheusSource.Count = scrapeMetrics.Count
		if c.PrometheusSource.IdleTimeout <= 0 {
			c.PrometheusSource.IdleTimeout = c.Select.IdleTimeout
		}
		source, err := c.prometheusSource(catalogs, reg)
		if err != nil {
			return nil, nil, nil, err
		}
		return nil, source, source, nil
	}
	httpClient, err := scrape.NewHTTPClient(c.ScrapeTLS)
	if err != nil {
		return nil, nil, nil, err
	}
	scraper := scrape.New(c.Scrape, httpClient, c.reader(catalogs.Catalog()), c.Clock, scrapeMetrics)
	catalogs.OnChange(func(cat *policy.Catalog) { scraper.SetReader(c.reader(cat)) })
	return scraper, nil, provider.Scraped(scraper, c.ColdScrapeTimeout), nil
}

// apiServices sets up the self-managed serving certificate (--tls-managed-secret)
// and returns the APIService ownership checker (nil outside a pod).
func (c CompletedConfig) apiServices(reg *prometheus.Registry) (*apiservice.Checker, error) {
	if c.ManagedTLS != nil {
		// The generic server runs it (RunOnce before listening, then Run): it is
		// a dynamiccertificates.ControllerRunner.
		cert, err := servingcert.New(*c.ManagedTLS, c.Client, apiservice.NewPublisher(c.Dynamic, c.APIServices, c.Self), c.Clock)
		if err != nil {
			return nil, err
		}
		c.Generic.SecureServing.Cert = cert
	}
	if c.Self.Namespace == "" || c.Dynamic == nil {
		return nil, nil
	}
	return apiservice.NewChecker(c.Dynamic, c.APIServices, c.Self, c.Clock, reg)
}

// install adds the adapter's /metrics, readiness checks and post-start hooks
// to the generic server.
func (s *Server) install(reg *prometheus.Registry) error {
	c, checker := s.config, s.checker
	// /metrics serves the API server's own metrics (request latencies, Go and
	// process collectors, from component-base's registry) beside the adapter's.
	// The generic server's own /metrics is off (EnableMetrics false): it would
	// install a second handler on the same path.
	apimetrics.Register()
	s.generic.Handler.NonGoRestfulMux.Handle("/metrics", promhttp.HandlerFor(
		prometheus.Gatherers{legacyregistry.DefaultGatherer, reg}, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))

	if err := s.generic.AddReadyzChecks(healthz.NamedCheck("informer-sync", s.checkSynced),
		authenticationLoaded(c.Generic.Authentication.RequestHeaderConfig), configCheck{s.catalogs}); err != nil {
		return err
	}
	if err := s.generic.AddPostStartHook("saturation-adapter-start-pipeline", s.startPipeline); err != nil {
		return err
	}
	if checker == nil {
		return nil
	}
	return s.generic.AddPostStartHook("saturation-adapter-apiservice-check", func(ctx genericapiserver.PostStartHookContext) error {
		go checker.Run(ctx, apiservice.DefaultCheckInterval)
		return nil
	})
}

// checkSynced is the readiness check of the pod and HPA caches. Readiness never
// depends on engines: an adapter whose engines are all down still answers
// (with errors the HPA shows) and must stay behind its Service.
func (s *Server) checkSynced(*http.Request) error {
	select {
	case <-s.synced:
		return nil
	default:
		return errors.New("pod and HorizontalPodAutoscaler caches not synced yet")
	}
}

// authenticationLoaded is the readiness check of delegated authentication.
// The aggregator's requests authenticate with its front-proxy client
// certificate, verified against the request-header CA, which
// k8s.io/apiserver loads from kube-system/extension-apiserver-authentication
// by an informer only after the server starts: until then every forwarded
// request is anonymous and gets 403. Ready waits for that CA (once loaded it
// stays); without a request-header configuration (--requestheader-client-ca-file
// given as a file, or no in-cluster lookup) there is nothing to wait for.
func authenticationLoaded(rh *authenticatorfactory.RequestHeaderConfig) healthz.HealthChecker {
	var loaded atomic.Bool
	return healthz.NamedCheck("delegated-authentication", func(*http.Request) error {
		if rh == nil || rh.CAContentProvider == nil || loaded.Load() {
			return nil
		}
		if len(rh.CAContentProvider.CurrentCABundleContent()) == 0 {
			return errors.New("request-header client CA not loaded yet from kube-system/extension-apiserver-authentication")
		}
		loaded.Store(true)
		return nil
	})
}

// startPipeline starts the informers and, once they are synced, the scrape
// loop. It returns at once: informer sync can take long in a large cluster, and
// a post-start hook that has not returned fails /livez.
func (s *Server) startPipeline(ctx genericapiserver.PostStartHookContext) error {
	go func() {
		if err := s.informers.Start(ctx); err != nil {
			klog.ErrorS(err, "Starting informers")
			return
		}
		close(s.synced)
		if s.scraper == nil {
			klog.InfoS("Informer caches synced; reading the engines' series from Prometheus", "url", promsource.Redact(s.config.PrometheusClient.URL),
				"cachePeriod", s.config.PrometheusSource.CachePeriod, "namespaces", s.config.Namespaces)
			s.source.Run(ctx)
			return
		}
		klog.InfoS("Informer caches synced; scraping", "interval", s.config.ScrapeInterval, "namespaces", s.config.Namespaces)
		s.scraper.Run(ctx, s.config.ScrapeInterval, s.pools.Targets)
	}()
	go s.catalogs.Run(ctx, s.config.ConfigReloadInterval)
	// Events on HPAs (pkg/advisor) go to the API server from here on, in the
	// HPA's namespace (RBAC: create and patch events in the watched namespaces).
	s.events.StartStructuredLogging(2)
	s.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.config.Client.CoreV1().Events("")})
	go func() { <-ctx.Done(); s.events.Shutdown() }()
	return nil
}

// gatewayOf returns where a policy's gateway pods are, for the scrape set; nil
// without a gateway input (or with a selector that does not parse, which the
// configuration's validation already refused).
func gatewayOf(p *policy.Policy) *podselect.Gateway {
	if p == nil || p.Gateway == nil {
		return nil
	}
	sel, err := labels.Parse(p.Gateway.Selector)
	if err != nil {
		return nil
	}
	return &podselect.Gateway{Namespace: p.Gateway.Namespace, Selector: sel, Override: gatewayOverride(p.Gateway)}
}

// gatewayOverride is how a gateway input's pods are scraped: its port, path,
// token, and the namespace and ServiceAccount the token is confined to. The
// provider builds the same one (provider.gateway), so both find one interest.
func gatewayOverride(g *policy.GatewayInput) podselect.Override {
	return podselect.Override{Port: g.Port, Path: g.Path, BearerTokenFile: g.BearerTokenFile, ServiceAccount: g.ServiceAccount, Namespace: g.Namespace}
}

// prometheusSource returns the Prometheus source, its metrics on reg, following
// the catalog and the configuration file's prometheus section through reloads.
func (c CompletedConfig) prometheusSource(catalogs *config.Loader, reg prometheus.Registerer) (*promsource.Source, error) {
	if c.PrometheusClient.TLS.InsecureSkipVerify {
		klog.InfoS("Warning: Prometheus's certificate is not verified (--prometheus-insecure-skip-tls-verify): a machine in the path can forge the values HPAs scale on",
			"url", promsource.Redact(c.PrometheusClient.URL))
	}
	client, err := promsource.NewClient(c.PrometheusClient)
	if err != nil {
		return nil, err
	}
	m, err := promsource.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	src, err := promsource.New(c.PrometheusSource, client, catalogs.Catalog(), queries(catalogs.Prometheus()), c.Clock, m)
	if err != nil {
		return nil, err
	}
	catalogs.OnChange(func(cat *policy.Catalog) {
		// The file passed config's validation: this fails only on a bug.
		if err := src.SetCatalog(cat, queries(catalogs.Prometheus())); err != nil {
			klog.ErrorS(err, "Prometheus queries not updated to the new configuration")
		}
	})
	return src, nil
}

// queries returns the configuration file's prometheus section as the
// source's Queries.
func queries(p config.Prometheus) promsource.Queries {
	return promsource.Queries{Matchers: p.Matchers, Series: p.Series}
}

// reader returns how bodies become readings under a catalog: the families its
// policies need (histograms only for latency terms) and the windows they read.
func (c CompletedConfig) reader(cat *policy.Catalog) scrape.Reader {
	needs := cat.Needs()
	opts := c.Extract
	opts.Histograms = needs.Histograms
	opts.GatewayMetrics = needs.GatewayMetrics
	return scrape.Reader{
		Extractor: signals.NewExtractorWith(opts),
		History:   history.HistoryOptions{Needs: needs, StateWindow: c.StateWindow},
	}
}

// configCheck is the readiness check of the policy configuration. It never
// fails: a bad new file keeps the last good one in force, and failing
// readiness would take every replica (they read the same ConfigMap) out of
// the APIService's endpoints, breaking API discovery cluster-wide (hazard
// NC-11). Instead its name in /readyz?verbose says that the last reload failed
// ("[+]policy-config-reload-failed ok"); the log has the error and
// saturation_adapter_config_last_reload_successful is 0.
type configCheck struct{ l *config.Loader }

func (c configCheck) Name() string {
	if _, err := c.l.Status(); err != nil {
		return "policy-config-reload-failed"
	}
	return "policy-config"
}

func (c configCheck) Check(*http.Request) error { return nil }

// Run serves until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	klog.InfoS("Serving", "version", version.Get().GitVersion, "securePort", s.config.Generic.SecureServing.Listener.Addr().String(), "pid", os.Getpid())
	return s.generic.PrepareRun().RunWithContext(ctx)
}
