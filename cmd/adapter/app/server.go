package app

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/term"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/pkg/discovery"
	"github.com/saturation-adapter/saturation-adapter/pkg/provider"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/selfmetrics"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// NewCommand returns the adapter command: it serves the External metrics API
// until ctx is done; its explain subcommand evaluates /metrics files offline.
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
			o.Complete()
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(ctx)
		},
	}
	for _, fs := range fss.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	// Grouped help for the server only; explain keeps cobra's own (its three flags).
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
		fmt.Fprintf(c.OutOrStdout(), "%s\n\nUsage:\n  %s\n  %s explain FILE...\n", c.Long, c.UseLine(), c.CommandPath())
		cliflag.PrintSections(c.OutOrStdout(), fss, cols)
	})
	cmd.AddCommand(newExplainCommand())
	return cmd
}

// Run builds the server and its pipeline (informers → discovery → scraper →
// provider) and serves until ctx is done.
func (o *Options) Run(ctx context.Context) error {
	// Serve the adapter's own registry beside the API server's on /metrics.
	o.Base.CustomMetricsAdapterServerOptions.EnableMetrics = false
	restConfig, err := o.Base.ClientConfig()
	if err != nil {
		return fmt.Errorf("building Kubernetes client config: %w", err)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("building Kubernetes client: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := selfmetrics.New(reg)
	if err != nil {
		return err
	}

	tlsConfig, err := o.Scrape.TLSConfig()
	if err != nil {
		return err
	}
	clk := clock.RealClock{}
	inf := discovery.NewInformers(client, o.Namespaces)
	disc := discovery.New(discovery.Options{
		Port: o.Scrape.Port, Path: o.Scrape.Path, Scheme: o.Scrape.Scheme,
		IdleTimeout: o.SelectorIdleTimeout, Metrics: provider.Catalog(),
		OnIdle: metrics.ForgetSelector,
	}, inf.Pods(), inf.HPAs(), clk)
	scraper := scrape.New(scrape.Options{
		Timeout: o.Scrape.Timeout, MaxBodyBytes: o.Scrape.MaxBodyBytes, Concurrency: o.Scrape.Concurrency,
		Targets: o.Fusion.Targets(),
	}, scrape.NewHTTPClient(o.Scrape.Timeout, tlsConfig), signals.NewExtractor(), clk, metrics)
	prov := provider.New(provider.Options{
		UnknownSaturation: o.Fusion.UnknownSaturation,
		MaxAge:            o.Scrape.MaxSampleAge,
		ColdScrapeTimeout: o.Scrape.Timeout,
	}, disc, scraper, clk, metrics)

	o.Base.WithExternalMetrics(prov)
	o.Base.WithCustomMetrics(prov)
	server, err := o.Base.Server()
	if err != nil {
		return fmt.Errorf("building API server: %w", err)
	}
	gatherers := prometheus.Gatherers{legacyregistry.DefaultGatherer, reg}
	server.GenericAPIServer.Handler.NonGoRestfulMux.Handle("/metrics", promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{}))

	synced := make(chan struct{})
	if err := server.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck("informer-sync", func(*http.Request) error {
		select {
		case <-synced:
			return nil
		default:
			return fmt.Errorf("pod and HPA caches not synced yet")
		}
	})); err != nil {
		return err
	}

	go func() {
		if err := inf.Start(ctx); err != nil {
			klog.ErrorS(err, "starting informers")
			return
		}
		close(synced)
		klog.InfoS("informer caches synced; scraping", "interval", o.Scrape.Interval, "namespaces", o.Namespaces)
		scraper.Run(ctx, o.Scrape.Interval, disc.Targets)
	}()
	klog.InfoS("serving", "securePort", o.Base.SecureServing.BindPort, "pid", os.Getpid())
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}
