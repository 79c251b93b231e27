package app

import (
	"strings"
	"testing"
	"time"
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
		{"zero queue target", func(o *Options) { o.Fusion.QueueDepthTarget = 0 }, []string{"--queue-depth-target=0"}},
		{"KV target above 1", func(o *Options) { o.Fusion.KVCacheUsageTarget = 80 }, []string{"--kv-cache-usage-target=80"}},
		{"negative unknown saturation", func(o *Options) { o.Fusion.UnknownSaturation = -1 }, []string{"--unknown-pod-saturation=-1"}},
		{"max age below interval", func(o *Options) { o.Scrape.MaxSampleAge = time.Second }, []string{"--max-sample-age=1s"}},
		{"body limit", func(o *Options) { o.Scrape.MaxBodyBytes = 0 }, []string{"--scrape-max-body-bytes=0"}},
		{"empty namespace", func(o *Options) { o.Namespaces = []string{"llm", ""} }, []string{"--namespaces=llm,"}},
		{"unreadable CA file", func(o *Options) { o.Scrape.CAFile = "/nonexistent/ca.pem" }, []string{"--scrape-ca-file=/nonexistent/ca.pem"}},
		{"CA and skip-verify together", func(o *Options) { o.Scrape.CAFile = "testdata/ca.pem"; o.Scrape.InsecureSkipVerify = true },
			[]string{"--scrape-insecure-skip-verify and --scrape-ca-file=testdata/ca.pem: choose one"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			_ = o.Flags() // installs the library's options and defaults
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
	if c, err := (ScrapeOptions{}).TLSConfig(); c != nil || err != nil {
		t.Errorf("no TLS flags: %v, %v; want nil, nil (system roots)", c, err)
	}
	c, err := ScrapeOptions{CAFile: "testdata/ca.pem", ServerName: "vllm.llm.svc"}.TLSConfig()
	if err != nil || c.RootCAs == nil || c.ServerName != "vllm.llm.svc" || c.InsecureSkipVerify {
		t.Errorf("CA file and server name: %+v, %v", c, err)
	}
}
