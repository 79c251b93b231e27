// Package app is the saturation-adapter command: its options (grouped flag
// sets, Complete → Validate → Run), the API server and the explain subcommand.
package app

import (
	"crypto/tls"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	certutil "k8s.io/client-go/util/cert"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// ScrapeOptions say where and how engines' /metrics are read.
type ScrapeOptions struct {
	Interval     time.Duration
	Timeout      time.Duration
	MaxBodyBytes int64
	Concurrency  int
	Port         int
	Path         string
	Scheme       string
	// MaxSampleAge is the age beyond which a reading is stale; 0 means 3 intervals.
	MaxSampleAge time.Duration
	// CAFile, ServerName and InsecureSkipVerify verify https engines.
	CAFile             string
	ServerName         string
	InsecureSkipVerify bool
}

// TLSConfig returns the TLS configuration for https engines: nil (system roots,
// pod IP as server name) unless a flag sets one. Errors name the CA file.
func (s ScrapeOptions) TLSConfig() (*tls.Config, error) {
	if s.CAFile == "" && s.ServerName == "" && !s.InsecureSkipVerify {
		return nil, nil
	}
	c := &tls.Config{ServerName: s.ServerName, InsecureSkipVerify: s.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if s.CAFile != "" {
		pool, err := certutil.NewPool(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--scrape-ca-file=%s: %w", s.CAFile, err)
		}
		c.RootCAs = pool
	}
	return c, nil
}

// FusionOptions are the set points of the saturation score.
type FusionOptions struct {
	QueueDepthTarget   float64
	KVCacheUsageTarget float64
	UnknownSaturation  float64
}

// AddFlags adds the fusion flags; explain and the server share them.
func (o *FusionOptions) AddFlags(fs *pflag.FlagSet) {
	fs.Float64Var(&o.QueueDepthTarget, "queue-depth-target", o.QueueDepthTarget,
		"Waiting requests per pod (at least 0.001) at which a pod counts as saturated (saturation 1.0). Default from the Gateway API inference extension's saturation detector.")
	fs.Float64Var(&o.KVCacheUsageTarget, "kv-cache-usage-target", o.KVCacheUsageTarget,
		"KV-cache usage ratio, in [0.001, 1], at which a pod counts as saturated (saturation 1.0).")
	fs.Float64Var(&o.UnknownSaturation, "unknown-pod-saturation", o.UnknownSaturation,
		"Saturation counted for a Ready pod without fresh data (scrape failing, stale, nothing valid). 1.0 treats it as at its set point.")
}

// Validate returns one error per bad fusion flag, naming the flag and its value.
func (o *FusionOptions) Validate() []error {
	var errs []error
	if !(o.QueueDepthTarget >= signals.MinTarget) || math.IsInf(o.QueueDepthTarget, 0) {
		errs = append(errs, fmt.Errorf("--queue-depth-target=%g: must be a finite number >= %g", o.QueueDepthTarget, signals.MinTarget))
	}
	if !(o.KVCacheUsageTarget >= signals.MinTarget) || o.KVCacheUsageTarget > 1 {
		errs = append(errs, fmt.Errorf("--kv-cache-usage-target=%g: must be in [%g, 1]", o.KVCacheUsageTarget, signals.MinTarget))
	}
	if !(o.UnknownSaturation >= 0) || math.IsInf(o.UnknownSaturation, 0) {
		errs = append(errs, fmt.Errorf("--unknown-pod-saturation=%g: must be a finite number >= 0", o.UnknownSaturation))
	}
	return errs
}

// Targets returns the fusion set points.
func (o *FusionOptions) Targets() signals.Targets {
	return signals.Targets{QueueDepth: o.QueueDepthTarget, KVCacheUsage: o.KVCacheUsageTarget}
}

// Options are all options of the adapter server.
type Options struct {
	// Base carries custom-metrics-apiserver's options: secure serving, delegated
	// authentication and authorization, audit, features, and the kubeconfig.
	Base *basecmd.AdapterBase
	Logs *logsapi.LoggingConfiguration

	Namespaces          []string
	SelectorIdleTimeout time.Duration
	Scrape              ScrapeOptions
	Fusion              FusionOptions
}

// NewOptions returns Options with their defaults.
func NewOptions() *Options {
	d := signals.DefaultTargets()
	o := &Options{
		Base: &basecmd.AdapterBase{Name: "saturation-adapter"},
		Logs: logsapi.NewLoggingConfiguration(),
		// Long enough to outlive an HPA whose sync period was raised a lot, short
		// enough that a deleted HPA's pods stop being scraped soon after.
		SelectorIdleTimeout: 10 * time.Minute,
		Scrape: ScrapeOptions{
			Interval:     2 * time.Second,
			Timeout:      time.Second,
			MaxBodyBytes: 4 << 20,
			Concurrency:  64,
			Port:         8000, // vLLM's default --port
			Path:         "/metrics",
			Scheme:       "http",
		},
		Fusion: FusionOptions{QueueDepthTarget: d.QueueDepth, KVCacheUsageTarget: d.KVCacheUsage, UnknownSaturation: 1},
	}
	return o
}

// Flags returns the flags in named sets, for grouped help output.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets

	generic := fss.FlagSet("generic API server (secure serving, authentication, authorization, kubeconfig)")
	o.Base.FlagSet = generic
	o.Base.InstallFlags()
	// An unprivileged container cannot bind the library's default 443.
	o.Base.SecureServing.BindPort = 6443
	generic.Lookup("secure-port").DefValue = "6443"
	generic.StringVar(&o.Base.RemoteKubeConfigFile, "kubeconfig", o.Base.RemoteKubeConfigFile,
		"Kubeconfig for reading pods and HorizontalPodAutoscalers; in-cluster configuration when empty (same as --lister-kubeconfig).")

	disc := fss.FlagSet("discovery")
	disc.StringSliceVar(&o.Namespaces, "namespaces", o.Namespaces,
		"Namespaces whose pods and HorizontalPodAutoscalers are watched; all namespaces when empty.")
	disc.DurationVar(&o.SelectorIdleTimeout, "selector-idle-timeout", o.SelectorIdleTimeout,
		"How long the pods of a selector keep being scraped after the last request that used it.")

	s := fss.FlagSet("scrape")
	s.DurationVar(&o.Scrape.Interval, "scrape-interval", o.Scrape.Interval, "How often each engine's /metrics is scraped.")
	s.DurationVar(&o.Scrape.Timeout, "scrape-timeout", o.Scrape.Timeout, "Deadline of one scrape, connection to last byte.")
	s.Int64Var(&o.Scrape.MaxBodyBytes, "scrape-max-body-bytes", o.Scrape.MaxBodyBytes, "Largest /metrics body accepted, in bytes.")
	s.IntVar(&o.Scrape.Concurrency, "scrape-concurrency", o.Scrape.Concurrency, "Scrapes in flight at once.")
	s.IntVar(&o.Scrape.Port, "scrape-port", o.Scrape.Port, "Port of /metrics for pods without the prometheus.io/port annotation.")
	s.StringVar(&o.Scrape.Path, "scrape-path", o.Scrape.Path, "Path of /metrics for pods without the prometheus.io/path annotation.")
	s.StringVar(&o.Scrape.Scheme, "scrape-scheme", o.Scrape.Scheme, "Scheme (http or https) for pods without the prometheus.io/scheme annotation.")
	s.StringVar(&o.Scrape.CAFile, "scrape-ca-file", o.Scrape.CAFile, "PEM CA bundle that verifies engines scraped over https; the system roots when empty.")
	s.StringVar(&o.Scrape.ServerName, "scrape-tls-server-name", o.Scrape.ServerName, "Name to verify in the certificates of https engines; the pod IP when empty.")
	s.BoolVar(&o.Scrape.InsecureSkipVerify, "scrape-insecure-skip-verify", o.Scrape.InsecureSkipVerify, "Do not verify the certificates of https engines (traffic stays encrypted; a pod can then be impersonated).")
	s.DurationVar(&o.Scrape.MaxSampleAge, "max-sample-age", o.Scrape.MaxSampleAge,
		"Age beyond which a pod's last reading is stale and the pod unknown; 0 means 3 scrape intervals.")

	o.Fusion.AddFlags(fss.FlagSet("saturation"))

	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))
	return fss
}

// Complete fills in defaults that depend on other options.
func (o *Options) Complete() {
	if o.Scrape.MaxSampleAge == 0 {
		o.Scrape.MaxSampleAge = 3 * o.Scrape.Interval
	}
	o.Scrape.Path = strings.TrimSpace(o.Scrape.Path)
}

// Validate returns every invalid option at once, each naming its flag and value.
func (o *Options) Validate() error {
	var errs []error
	s := o.Scrape
	if s.Interval <= 0 {
		errs = append(errs, fmt.Errorf("--scrape-interval=%s: must be > 0", s.Interval))
	}
	if s.Timeout <= 0 || s.Timeout > s.Interval {
		errs = append(errs, fmt.Errorf("--scrape-timeout=%s: must be > 0 and at most --scrape-interval (%s)", s.Timeout, s.Interval))
	}
	if s.MaxBodyBytes <= 0 || s.MaxBodyBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("--scrape-max-body-bytes=%d: must be in 1..1073741824 (1 GiB)", s.MaxBodyBytes))
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
	if s.MaxSampleAge < s.Interval {
		errs = append(errs, fmt.Errorf("--max-sample-age=%s: must be at least --scrape-interval (%s)", s.MaxSampleAge, s.Interval))
	}
	if _, err := s.TLSConfig(); err != nil {
		errs = append(errs, err)
	}
	if s.InsecureSkipVerify && s.CAFile != "" {
		errs = append(errs, fmt.Errorf("--scrape-insecure-skip-verify and --scrape-ca-file=%s: choose one", s.CAFile))
	}
	if o.SelectorIdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--selector-idle-timeout=%s: must be > 0", o.SelectorIdleTimeout))
	}
	for _, ns := range o.Namespaces {
		if ns == "" {
			errs = append(errs, fmt.Errorf("--namespaces=%s: empty namespace name", strings.Join(o.Namespaces, ",")))
			break
		}
	}
	errs = append(errs, o.Fusion.Validate()...)
	errs = append(errs, o.Base.CustomMetricsAdapterServerOptions.Validate()...)
	if err := logsapi.ValidateAndApply(o.Logs, nil); err != nil {
		errs = append(errs, err)
	}
	return utilerrors.NewAggregate(errs)
}
