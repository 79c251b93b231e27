package app

import (
	"strings"
	"testing"
	"time"

	promconfig "github.com/prometheus/common/config"
	"github.com/spf13/pflag"

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
		{"zero queue set point", func(o *Options) { o.Scoring.QueueDepthSetPoint = 0 }, []string{"--queue-depth-set-point=0"}},
		{"KV set point above 1", func(o *Options) { o.Scoring.KVCacheUsageSetPoint = 80 }, []string{"--kv-cache-usage-set-point=80"}},
		{"negative unknown saturation", func(o *Options) { o.Scoring.UnknownSaturation = -1 }, []string{"--unknown-pod-saturation=-1"}},
		{"client rate", func(o *Options) { o.ClientQPS = 0 }, []string{"--client-qps=0"}},
		{"max age below interval", func(o *Options) { o.Scrape.MaxSampleAge = time.Second }, []string{"--max-sample-age=1s"}},
		{"body limit", func(o *Options) { o.Scrape.MaxBodyBytes = 0 }, []string{"--scrape-max-body-bytes=0"}},
		{"empty namespace", func(o *Options) { o.Namespaces = []string{"llm", ""} }, []string{"--namespaces=llm,"}},
		{"unreadable CA file", func(o *Options) { o.Scrape.CAFile = "/nonexistent/ca.pem" }, []string{"--scrape-ca-file=/nonexistent/ca.pem"}},
		{"CA and skip-verify together", func(o *Options) { o.Scrape.CAFile = "testdata/ca.pem"; o.Scrape.InsecureSkipVerify = true },
			[]string{"--scrape-insecure-skip-verify and --scrape-ca-file=testdata/ca.pem: choose one"}},
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
	if o.Scoring.QueueDepthSetPoint != 25 || o.Scoring.KVCacheUsageSetPoint != 0.9 {
		t.Errorf("set points %+v, want 25 and 0.9 from the deprecated flags", o.Scoring)
	}
	if f := fs.Lookup("queue-depth-target"); f == nil || !strings.Contains(f.Deprecated, "--queue-depth-set-point") {
		t.Errorf("--queue-depth-target is not marked deprecated in favour of --queue-depth-set-point: %+v", f)
	}
}
