package app

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	promconfig "github.com/prometheus/common/config"
	"github.com/spf13/pflag"

	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
)

func TestValidateNamesFlagAndValue(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Options)
		want   []string
	}{
		{"defaults are valid", func(*Options) {}, nil},
		{"timeout above interval", func(o *Options) { o.Scrape.Timeout = 5 * time.Second }, []string{"--scrape-timeout=5s"}},
		{"bad port and scheme together", func(o *Options) { o.Scrape.Port = 0; o.Scrape.Scheme = "ftp" },
			[]string{"--scrape-port=0", `--scrape-scheme="ftp"`}},
		{"relative path", func(o *Options) { o.Scrape.Path = "metrics" }, []string{`--scrape-path="metrics"`}},
		{"zero queue set point", func(o *Options) { o.Scoring.SetPoints.SetPoints.QueueDepth = 0 }, []string{"--queue-depth-set-point=0"}},
		{"KV set point above 1", func(o *Options) { o.Scoring.SetPoints.SetPoints.KVCacheUsage = 80 }, []string{"--kv-cache-usage-set-point=80"}},
		{"negative unknown saturation", func(o *Options) { o.Scoring.SetPoints.UnknownSaturation = -1 }, []string{"--unknown-pod-saturation=-1"}},
		{"client rate", func(o *Options) { o.ClientQPS = 0 }, []string{"--client-qps=0"}},
		{"max age below interval", func(o *Options) { o.Scrape.MaxSampleAge = time.Second }, []string{"--max-sample-age=1s"}},
		{"body limit", func(o *Options) { o.Scrape.MaxBodyBytes = 0 }, []string{"--scrape-max-body-bytes=0"}},
		{"empty namespace", func(o *Options) { o.Namespaces = []string{"llm", ""} }, []string{"--namespaces=llm,"}},
		{"no request selectors", func(o *Options) { o.MaxRequestSelectors = 0 }, []string{"--max-request-selectors=0"}},
		{"unreadable CA file", func(o *Options) { o.Scrape.CAFile = "/nonexistent/ca.pem" }, []string{"--scrape-ca-file=/nonexistent/ca.pem"}},
		{"CA and skip-verify together", func(o *Options) { o.Scrape.CAFile = "testdata/ca.pem"; o.Scrape.InsecureSkipVerify = true },
			[]string{"--scrape-insecure-skip-verify and --scrape-ca-file=testdata/ca.pem: choose one"}},
		{"unknown source", func(o *Options) { o.Source = "kafka" }, []string{`--source="kafka": must be direct or prometheus`}},
		{"prometheus without a URL", func(o *Options) { o.Source = SourcePrometheus }, []string{"--prometheus-url: required with --source=prometheus"}},
		{"prometheus flags, all at once", func(o *Options) {
			o.Source, o.Prometheus.URL, o.Prometheus.PodLabel, o.Prometheus.CachePeriod, o.Prometheus.Timeout = SourcePrometheus, "prom:9090", "pod-name", 0, -time.Second
			o.Prometheus.Headers = map[string]string{"Authorization": "Bearer x"}
		}, []string{`--prometheus-url: the Prometheus URL "prom:9090" must be an http or https URL`, `--prometheus-pod-label="pod-name": must be a Prometheus label name`,
			"--prometheus-cache-period=0s: must be > 0", "--prometheus-timeout=-1s: must be > 0", `--prometheus-headers: settings of the Prometheus client: setting header "Authorization" is not allowed`}},
		{"prometheus TLS", func(o *Options) {
			o.Source, o.Prometheus.URL = SourcePrometheus, "https://user:hunter2@prom:9090"
			o.Prometheus.CAFile, o.Prometheus.InsecureSkipTLSVerify, o.Prometheus.CertFile = "testdata/ca.pem", true, "client.pem"
		}, []string{"--prometheus-insecure-skip-tls-verify and --prometheus-ca-file=testdata/ca.pem: choose one",
			`--prometheus-cert-file="client.pem" and --prometheus-key-file="": give both or neither`}},
		{"max age below Prometheus's interval", func(o *Options) {
			o.Source, o.Prometheus.URL, o.Scrape.MaxSampleAge = SourcePrometheus, "http://prom:9090", 10*time.Second
		}, []string{"--max-sample-age=10s: must be at least --prometheus-scrape-interval (30s)"}},
		{"prometheus flags are not checked in direct mode", func(o *Options) { o.Prometheus.CachePeriod = 0 }, nil},
		// 3 × a million hours overflowed into a negative maximum sample age.
		{"scrape interval past an hour", func(o *Options) { o.Scrape.Interval = 1000000 * time.Hour }, []string{"--scrape-interval=1000000h0m0s: must be > 0 and at most 1h0m0s"}},
		{"prometheus scrape interval past an hour", func(o *Options) {
			o.Source, o.Prometheus.URL, o.Prometheus.ScrapeInterval = SourcePrometheus, "http://prom:9090", 2*time.Hour
		}, []string{"--prometheus-scrape-interval=2h0m0s: must be > 0 and at most 1h0m0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No Flags(): NewOptions alone holds every default, the library's too.
			o := NewOptions()
			tt.mutate(o)
			o.Complete()
			err := o.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to name %q", err, w)
				}
			}
		})
	}
}

func TestCompleteDefaultsMaxAge(t *testing.T) {
	o := NewOptions()
	o.Scrape.Interval = 5 * time.Second
	o.Complete()
	if o.Scrape.MaxSampleAge != 15*time.Second {
		t.Errorf("MaxSampleAge = %s, want 3 intervals (15s)", o.Scrape.MaxSampleAge)
	}
	o = NewOptions()
	o.Source, o.Prometheus.ScrapeInterval, o.Prometheus.CachePeriod = SourcePrometheus, 15*time.Second, 2*time.Second
	o.Complete()
	if o.Scrape.MaxSampleAge != 47*time.Second {
		t.Errorf("prometheus mode: MaxSampleAge = %s, want 3 of Prometheus's scrape intervals and the cache period (47s): answers are served from memory for up to a cache period", o.Scrape.MaxSampleAge)
	}
}

func TestScrapeTLSConfig(t *testing.T) {
	if c := (ScrapeOptions{}).TLSConfig(); c != (promconfig.TLSConfig{}) {
		t.Errorf("no TLS flags: %+v; want the zero config (system roots, pod IP as server name)", c)
	}
	c := ScrapeOptions{CAFile: "testdata/ca.pem", ServerName: "vllm.llm.svc"}.TLSConfig()
	if c.CAFile != "testdata/ca.pem" || c.ServerName != "vllm.llm.svc" || c.InsecureSkipVerify {
		t.Errorf("CA file and server name: %+v", c)
	}
	// The client the adapter builds from it verifies against that CA.
	if _, err := scrape.NewHTTPClient(c); err != nil {
		t.Errorf("building the scrape client: %v", err)
	}
}

// The flag names before the set-point rename still work, and say what to use.
func TestDeprecatedSetPointFlags(t *testing.T) {
	o := NewOptions()
	fss := o.Flags()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	for _, f := range fss.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse([]string{"--queue-depth-target=25", "--kv-cache-usage-target=0.9"}); err != nil {
		t.Fatal(err)
	}
	if o.Scoring.SetPoints.SetPoints.QueueDepth != 25 || o.Scoring.SetPoints.SetPoints.KVCacheUsage != 0.9 {
		t.Errorf("set points %+v, want 25 and 0.9 from the deprecated flags", o.Scoring)
	}
	if f := fs.Lookup("queue-depth-target"); f == nil || !strings.Contains(f.Deprecated, "--queue-depth-set-point") {
		t.Errorf("--queue-depth-target is not marked deprecated in favour of --queue-depth-set-point: %+v", f)
	}
}

// The flags reference (flagsDoc) lists every flag of the adapter's own flag sets
// in its tables (not the generic API server's or logging's, which it
// summarises), each with its real default where it gives a literal one, and no
// flag that does not exist.
func TestServerFlagsDocumented(t *testing.T) {
	section := docText(t, flagsDoc)
	documented := map[string]string{} // flag → default cell
	for _, m := range regexp.MustCompile("(?m)^\\| `(--[a-z0-9-]+)` \\| ([^|]*) \\|").FindAllStringSubmatch(section, -1) {
		documented[m[1]] = strings.TrimSpace(m[2])
	}
	o := NewOptions()
	fss := o.Flags()
	own := map[string]bool{}
	for name, fs := range fss.FlagSets {
		if strings.HasPrefix(name, "generic API server") || name == "logging" || name == "misc" {
			continue
		}
		fs.VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Deprecated != "" {
				return
			}
			own["--"+f.Name] = true
			cell, ok := documented["--"+f.Name]
			if !ok {
				t.Errorf("%s's tables lack --%s (%s)", flagsDoc, f.Name, f.Usage)
				return
			}
			// A literal default in backquotes must be the flag's; prose
			// defaults ("in-cluster", "3 × interval") describe empty ones.
			if lit, ok := strings.CutPrefix(cell, "`"); ok {
				lit, _, _ = strings.Cut(lit, "`")
				d1, err1 := time.ParseDuration(lit)
				d2, err2 := time.ParseDuration(f.DefValue)
				sameDuration := err1 == nil && err2 == nil && d1 == d2
				if lit != f.DefValue && lit != strings.Trim(f.DefValue, "[]") && !sameDuration {
					t.Errorf("%s: the default of --%s is %q, the flag's is %q", flagsDoc, f.Name, lit, f.DefValue)
				}
			}
		})
	}
	for f := range documented {
		if !own[f] {
			t.Errorf("%s's tables list %s, which is not a flag of the adapter's own flag sets", flagsDoc, f)
		}
	}
}

// The pod-selection flags reach podselect through Config.
func TestConfigSelectOptions(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args         []string
		hostNetwork  bool
		maxSelectors int
	}{
		{args: nil, hostNetwork: false, maxSelectors: 1000},
		{args: []string{"--scrape-host-network-pods", "--max-request-selectors=7"}, hostNetwork: true, maxSelectors: 7},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			for _, f := range o.Flags().FlagSets {
				fs.AddFlagSet(f)
			}
			if err := fs.Parse(append([]string{"--kubeconfig=" + kubeconfig, "--cert-dir=" + dir, "--secure-port=0",
				"--authentication-skip-lookup"}, tt.args...)); err != nil {
				t.Fatal(err)
			}
			o.Server.Authentication.RemoteKubeConfigFileOptional = true
			o.Server.Authorization.RemoteKubeConfigFileOptional = true
			o.Complete()
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			cfg, err := o.Config()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Select.ScrapeHostNetwork != tt.hostNetwork || cfg.Select.MaxRequestSelectors != tt.maxSelectors {
				t.Errorf("Select = host network %v, max request selectors %d; want %v, %d",
					cfg.Select.ScrapeHostNetwork, cfg.Select.MaxRequestSelectors, tt.hostNetwork, tt.maxSelectors)
			}
		})
	}
}

// The client that lists and watches pods and HPAs reports API server outages
// at the default log level (podselect.OutageReporter).
func TestRestConfigReportsOutages(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.Kubeconfig = kubeconfig
	c, err := o.restConfig()
	if err != nil {
		t.Fatal(err)
	}
	if c.WrapTransport == nil {
		t.Fatal("no transport wrapper")
	}
	if _, ok := c.WrapTransport(http.DefaultTransport).(*podselect.OutageReporter); !ok {
		t.Errorf("the client's transport is not wrapped by podselect.OutageReporter")
	}
}
