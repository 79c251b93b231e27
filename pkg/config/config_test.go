package config

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

func builtin() []policy.Policy {
	return policy.BuiltinPolicies(policy.DefaultSetPoints(), policy.DefaultUnknownSaturation, policy.DefaultHoldLastGood)
}

// The example the README shows parses into the three workload policies, with
// their terms in documentation order and defaults filled.
func TestExample(t *testing.T) {
	f, err := Parse(Example())
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Catalog(builtin())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"chat-saturation", "batch-demand", "long-context-saturation", policy.MetricSaturation} {
		if c.Lookup(name) == nil {
			t.Errorf("catalog has no %s: %v", name, c.Names())
		}
	}
	chat := c.Lookup("chat-saturation")
	if len(chat.Terms) != 3 || chat.Terms[2].Kind != policy.TermTTFT || chat.Terms[2].SetPoint != 1.5 || chat.Terms[2].Quantile != 0.95 {
		t.Errorf("chat terms %+v", chat.Terms)
	}
	if chat.UnknownSaturation != 1 || chat.HoldLastGood != policy.DefaultHoldLastGood {
		t.Errorf("chat defaults: unknown %g hold %s", chat.UnknownSaturation, chat.HoldLastGood)
	}
	if !c.Needs().Histograms {
		t.Error("a TTFT term needs histograms")
	}
}

// Every bad field is named with its path and value, all at once.
func TestParseErrors(t *testing.T) {
	head := "apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\n"
	tests := []struct {
		name string
		file string
		want []string
	}{
		{"unknown field", head + "policies:\n- name: a\n  kind: mean\n  terms: [{kind: queueDepth, setPont: 5}]\n", []string{`unknown field "policies[0].terms[0].setPont"`}},
		{"duplicate key", head + "policies:\n- name: a\n  name: b\n  kind: mean\n", []string{`"name" already set`}},
		// A second document's policies were never read: its HPAs got "metric not found".
		{"two documents", head + "policies:\n- {name: a, kind: mean, terms: [{kind: queueDepth}]}\n---\n" + head + "policies:\n- {name: b, kind: demand, terms: [{kind: queueDepth}]}\n",
			[]string{"a second YAML document starts at line 5: the file must be one document"}},
		{"a second document that is not YAML", head + "policies: []\n---\n: : [\n", []string{"a second YAML document after \"---\", which is not YAML either"}},
		{"wrong version", "apiVersion: v1\nkind: PolicyConfig\n", []string{"apiVersion: Unsupported value: \"v1\""}},
		{"upper-case name (BC-15)", head + "policies:\n- name: Chat\n  kind: mean\n  terms: [{kind: queueDepth}]\n", []string{`policies[0].name: Invalid value: "Chat": must be a DNS-1123 label`}},
		{"underscore name", head + "policies:\n- name: chat_sat\n  kind: mean\n  terms: [{kind: queueDepth}]\n", []string{`policies[0].name: Invalid value: "chat_sat"`}},
		{"built-in name taken", head + "policies:\n- name: llm-saturation\n  kind: mean\n  terms: [{kind: queueDepth}]\n- name: llm-saturation\n  kind: mean\n  terms: [{kind: queueDepth}]\n", []string{`policies[1].name: Duplicate value`}},
		{"bad quantile and slo", head + "policies:\n- name: a\n  kind: mean\n  terms:\n  - {kind: ttft, slo: 2s, quantile: 1.5}\n  - {kind: e2eLatency, setPoint: 3}\n", []string{
			"policies[0].terms[0].quantile: Invalid value: 1.5: must be in (0, 1)",
			"policies[0].terms[1].setPoint: Forbidden",
			"policies[0].terms[1].slo: Required value",
		}},
		{"bad KV set point", head + "policies:\n- name: a\n  kind: demand\n  terms: [{kind: kvCacheUsage, setPoint: 1.2}]\n", []string{"policies[0].terms[0].setPoint: Invalid value: 1.2"}},
		{"unknown term", head + "policies:\n- name: a\n  kind: mean\n  terms: [{kind: gpuUtil, setPoint: 1}]\n", []string{`policies[0].terms[0].kind: Unsupported value: "gpuUtil"`}},
		{"no terms", head + "policies:\n- name: a\n  kind: mean\n", []string{"policies[0].terms: Invalid value"}},
		{"signal kind", head + "policies:\n- name: a\n  kind: signal\n  signal: preemptions\n", []string{`policies[0].signal: Unsupported value: "preemptions"`}},
		// JSON holds no NaN: the conversion refused it without naming the field.
		{"NaN set point", head + "policies:\n- name: a\n  kind: mean\n  terms: [{kind: queueDepth, setPoint: .nan}]\n", []string{`policies[0].terms[0].setPoint: Invalid value: ".nan": must be a finite number`}},
		{"infinite queue cap", head + "policies:\n- name: a\n  kind: mean\n  queueCap: -.Inf\n  terms: [{kind: queueDepth}]\n", []string{`policies[0].queueCap: Invalid value: "-.Inf": must be a finite number`}},
		{"NaN in a peak hold", head + "policies:\n- name: a\n  kind: mean\n  terms: [{kind: queueDepth}]\n  peak: {window: 1m, headroom: .NaN}\n", []string{`policies[0].peak.headroom: Invalid value: ".NaN": must be a finite number`}},
		// Aliases are not followed by the walk that names a number no
		// float64 holds: a self-referencing anchor overflowed its stack,
		// and nested aliases would be walked 9^8 times.
		{"self-referencing anchor", head + "policies: &p\n- name: a\n  kind: mean\n  terms: *p\n", []string{"decoding the configuration"}},
		{"nested aliases", head + "x0: &a0 [.nan,1,1,1,1,1,1,1,1]\nx1: &a1 [*a0,*a0,*a0,*a0,*a0,*a0,*a0,*a0,*a0]\nx2: &a2 [*a1,*a1,*a1,*a1,*a1,*a1,*a1,*a1,*a1]\nx3: &a3 [*a2,*a2,*a2,*a2,*a2,*a2,*a2,*a2,*a2]\nx4: &a4 [*a3,*a3,*a3,*a3,*a3,*a3,*a3,*a3,*a3]\nx5: &a5 [*a4,*a4,*a4,*a4,*a4,*a4,*a4,*a4,*a4]\nx6: &a6 [*a5,*a5,*a5,*a5,*a5,*a5,*a5,*a5,*a5]\nx7: &a7 [*a6,*a6,*a6,*a6,*a6,*a6,*a6,*a6,*a6]\nx8: &a8 [*a7,*a7,*a7,*a7,*a7,*a7,*a7,*a7,*a7]\n", []string{`x0[0]: Invalid value: ".nan": must be a finite number`}},
		{"nested aliases of numbers", head + "x0: &a0 [1,1,1,1,1,1,1,1,1]\nx1: &a1 [*a0,*a0,*a0,*a0,*a0,*a0,*a0,*a0,*a0]\nx2: &a2 [*a1,*a1,*a1,*a1,*a1,*a1,*a1,*a1,*a1]\nx3: &a3 [*a2,*a2,*a2,*a2,*a2,*a2,*a2,*a2,*a2]\nx4: &a4 [*a3,*a3,*a3,*a3,*a3,*a3,*a3,*a3,*a3]\nx5: &a5 [*a4,*a4,*a4,*a4,*a4,*a4,*a4,*a4,*a4]\nx6: &a6 [*a5,*a5,*a5,*a5,*a5,*a5,*a5,*a5,*a5]\nx7: &a7 [*a6,*a6,*a6,*a6,*a6,*a6,*a6,*a6,*a6]\nx8: &a8 [*a7,*a7,*a7,*a7,*a7,*a7,*a7,*a7,*a7]\n", []string{"decoding the configuration"}},
		// A number no float64 holds said "cannot unmarshal string" (past the
		// range) or read as 0 (too small: a latency term's quantile of 0
		// took the default 0.95), in YAML and in JSON alike.
		{"set point past float64", head + "policies:\n- name: a\n  kind: mean\n  terms: [{kind: queueDepth, setPoint: 1e400}]\n", []string{`policies[0].terms[0].setPoint: Invalid value: "1e400": out of a 64-bit float's range`}},
		{"negative queue cap past float64", head + "policies:\n- name: a\n  kind: mean\n  queueCap: -1_000e400\n  terms: [{kind: queueDepth}]\n", []string{`policies[0].queueCap: Invalid value: "-1_000e400": out of a 64-bit float's range`}},
		{"quantile under float64", head + "policies:\n- name: a\n  kind: mean\n  terms: [{kind: ttft, setPoint: 2, quantile: 1e-400}]\n", []string{`policies[0].terms[0].quantile: Invalid value: "1e-400": too small for a 64-bit float, it would read as 0`}},
		{"JSON headroom past float64", `{"apiVersion": "saturation-adapter.io/v1alpha1", "kind": "PolicyConfig", "policies": [{"name": "a", "kind": "mean", "terms": [{"kind": "queueDepth"}], "peak": {"window": "1m", "headroom": 2e308}}]}`, []string{`policies[0].peak.headroom: Invalid value: "2e308": out of a 64-bit float's range`}},
		{"saturation of an unknown pod on a signal policy", head + "policies:\n- name: a\n  kind: signal\n  signal: running\n  unknownPodSaturation: 2\n", []string{`policies[0].unknownPodSaturation: Forbidden: a signal policy serves a raw signal`}},
		{"unknown kind", head + "policies:\n- name: a\n  kind: median\n", []string{`policies[0].kind: Unsupported value: "median"`}},
		{"bad window", head + "policies:\n- name: a\n  kind: mean\n  terms: [{kind: preemptionRate, setPoint: 1, window: 100ms}]\n", []string{"policies[0].terms[0].window: Invalid value"}},
		{"window on a gauge term", head + "policies:\n- name: a\n  kind: mean\n  terms: [{kind: queueDepth, window: 1m}]\n", []string{"policies[0].terms[0].window: Invalid value"}},
		{"bad duration", head + "policies:\n- name: a\n  kind: mean\n  holdLastGood: forever\n  terms: [{kind: queueDepth}]\n", []string{`time: invalid duration "forever"`}},
		{"gateway token file not absolute", head + "policies:\n- name: a\n  kind: demand\n  terms: [{kind: queueDepth}]\n  gateway: {selector: app=epp, match: {inference_pool: p}, bearerTokenFile: token}\n", []string{`policies[0].gateway.bearerTokenFile: Invalid value: "token": must be an absolute path under /var/run/secrets/`}},
		// Issue 20: the token went to any pod with the gateway's labels, and
		// paths with ".." were accepted.
		{"gateway token without namespace or ServiceAccount", head + "policies:\n- name: a\n  kind: demand\n  terms: [{kind: queueDepth}]\n  gateway: {selector: app=epp, match: {inference_pool: p}, bearerTokenFile: /var/run/secrets/epp/token}\n",
			[]string{"policies[0].gateway.namespace: Invalid value: \"\": required with bearerTokenFile"}},
		{"gateway token without ServiceAccount", head + "policies:\n- name: a\n  kind: demand\n  terms: [{kind: queueDepth}]\n  gateway: {namespace: gw, selector: app=epp, match: {inference_pool: p}, bearerTokenFile: /var/run/secrets/epp/token}\n",
			[]string{"policies[0].gateway.serviceAccountName: Invalid value: \"\": required with bearerTokenFile"}},
		{"gateway token path with ..", head + "policies:\n- name: a\n  kind: demand\n  terms: [{kind: queueDepth}]\n  gateway: {namespace: gw, serviceAccountName: epp, selector: app=epp, match: {inference_pool: p}, bearerTokenFile: /var/run/secrets/epp/../../../../etc/saturation-adapter/tls/tls.key}\n",
			[]string{`policies[0].gateway.bearerTokenFile: Invalid value: "/var/run/secrets/epp/../../../../etc/saturation-adapter/tls/tls.key": must not contain '..'`}},
		{"gateway token outside the secrets directory", head + "policies:\n- name: a\n  kind: demand\n  terms: [{kind: queueDepth}]\n  gateway: {namespace: gw, serviceAccountName: epp, selector: app=epp, match: {inference_pool: p}, bearerTokenFile: /etc/saturation-adapter/tls/tls.key}\n",
			[]string{`policies[0].gateway.bearerTokenFile: Invalid value: "/etc/saturation-adapter/tls/tls.key": must lie under /var/run/secrets/`}},
		{"gateway token is the adapter's own", head + "policies:\n- name: a\n  kind: demand\n  terms: [{kind: queueDepth}]\n  gateway: {namespace: gw, serviceAccountName: epp, selector: app=epp, match: {inference_pool: p}, bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}\n",
			[]string{`policies[0].gateway.bearerTokenFile: Invalid value: "/var/run/secrets/kubernetes.io/serviceaccount/token": must not be the adapter's own credentials`}},
		{"gateway token directory itself", head + "policies:\n- name: a\n  kind: demand\n  terms: [{kind: queueDepth}]\n  gateway: {namespace: gw, serviceAccountName: epp, selector: app=epp, match: {inference_pool: p}, bearerTokenFile: /var/run/secrets//}\n",
			[]string{`must lie under /var/run/secrets/`}},
		{"gateway bad ServiceAccount and namespace", head + "policies:\n- name: a\n  kind: demand\n  terms: [{kind: queueDepth}]\n  gateway: {namespace: GW, serviceAccountName: 'e p p', selector: app=epp, match: {inference_pool: p}}\n",
			[]string{`policies[0].gateway.serviceAccountName: Invalid value: "e p p"`, `policies[0].gateway.namespace: Invalid value: "GW"`}},
		// A blank selector once parsed as every pod of the namespace: each read as a gateway.
		{"blank gateway selector", head + "policies:\n- name: a\n  kind: demand\n  terms: [{kind: queueDepth}]\n  gateway: {selector: \" \\t\", match: {inference_pool: p}}\n", []string{"policies[0].gateway.selector: Required value"}},
		{"gateway without selector or match", head + "policies:\n- name: a\n  kind: demand\n  terms: [{kind: queueDepth}]\n  gateway: {port: 9090}\n", []string{"policies[0].gateway.selector: Required value", "policies[0].gateway.match: Required value"}},
		{"cap below 1", head + "policies:\n- name: a\n  kind: mean\n  maxRatio: 2\n  terms: [{kind: queueDepth, maxRatio: 0.5}]\n", []string{`unknown field "policies[0].maxRatio"`}},
		{"term cap below 1", head + "policies:\n- name: a\n  kind: mean\n  terms: [{kind: queueDepth, maxRatio: 0.5}]\n", []string{"policies[0].terms[0].maxRatio: Invalid value: 0.5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse([]byte(tt.file))
			if err == nil {
				_, err = f.Catalog(builtin())
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// A configured policy may not take a built-in name.
func TestBuiltinNamesTaken(t *testing.T) {
	f := &File{APIVersion: APIVersion, Kind: Kind, Policies: []Policy{{Name: "x", Kind: "mean", Terms: []Term{{Kind: "queueDepth"}}}}}
	b := append(builtin(), policy.Policy{Name: "x", Kind: policy.KindSignal, Signal: signals.Running})
	if _, err := f.Catalog(b); err == nil || !strings.Contains(err.Error(), "already a built-in metric") {
		t.Errorf("error %v, want the built-in name refused", err)
	}
}

// A changed file takes effect without a restart; a bad new file keeps the last
// good one, says so in the metric and Status, and the next good one recovers.
func TestLoaderReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	write := func(s string) {
		t.Helper()
		// As the kubelet updates a ConfigMap volume: a new file renamed over.
		tmp := filepath.Join(dir, "tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	head := "apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n"
	write(head + "- {name: a, kind: mean, terms: [{kind: queueDepth, setPoint: 5}]}\n")
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	l, err := NewLoader(path, builtin(), clk, m)
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	l.OnChange(func(c *policy.Catalog) { changes = append(changes, strings.Join(c.Names(), ",")) })
	if l.Catalog().Lookup("a") == nil || testutil.ToFloat64(m.Policies) != 6 {
		t.Fatalf("first catalog %v", l.Catalog().Names())
	}

	write(head + "- {name: b, kind: demand, terms: [{kind: queueDepth, setPoint: 9}]}\n")
	if changed, err := l.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v; want a change", changed, err)
	}
	if l.Catalog().Lookup("b") == nil || l.Catalog().Lookup("a") != nil || len(changes) != 1 {
		t.Errorf("after reload: %v, changes %v", l.Catalog().Names(), changes)
	}

	write(head + "- {name: B, kind: demand}\n")
	if _, err := l.Reload(); err == nil || !strings.Contains(err.Error(), "policies[0].name") {
		t.Fatalf("bad file: %v, want an error naming the field", err)
	}
	if l.Catalog().Lookup("b") == nil {
		t.Error("a bad file replaced the last good catalog")
	}
	if _, serr := l.Status(); serr == nil || testutil.ToFloat64(m.LastReloadSuccessful) != 0 {
		t.Errorf("status %v, metric %g; want the failure reported", serr, testutil.ToFloat64(m.LastReloadSuccessful))
	}
	// Unchanged content is not re-parsed, and the same bad file is still bad.
	if changed, _ := l.Reload(); changed {
		t.Error("an unchanged file counted as a change")
	}

	// Issue 20: restoring the file in force after a failed reload left the
	// failure flag set (the content was the one in force, so nothing was
	// reloaded and nothing cleared).
	write(head + "- {name: b, kind: demand, terms: [{kind: queueDepth, setPoint: 9}]}\n")
	if changed, err := l.Reload(); changed || err != nil {
		t.Fatalf("the good file restored: Reload = %v, %v; want no change and no error", changed, err)
	}
	if _, serr := l.Status(); serr != nil || testutil.ToFloat64(m.LastReloadSuccessful) != 1 {
		t.Errorf("the good file restored: status %v, metric %g; want the failure cleared", serr, testutil.ToFloat64(m.LastReloadSuccessful))
	}
	write(head + "- {name: B, kind: demand}\n")
	if _, err := l.Reload(); err == nil {
		t.Fatal("the bad file again: no error")
	}

	write(head + "- {name: c, kind: mean, terms: [{kind: kvCacheUsage}]}\n")
	if changed, err := l.Reload(); !changed || err != nil {
		t.Fatalf("recovery: %v, %v", changed, err)
	}
	if _, serr := l.Status(); serr != nil || testutil.ToFloat64(m.LastReloadSuccessful) != 1 {
		t.Errorf("after recovery: status %v", serr)
	}

	// A missing file at start is an error naming it.
	if _, err := NewLoader(filepath.Join(dir, "nope.yaml"), builtin(), clk, m); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// Every policy file the documentation shows parses (README.md and docs/, a
// fragment holding only the prometheus section under a minimal header), and the
// workload example of docs/policies.md is Example() verbatim.
func TestDocExamples(t *testing.T) {
	docs := []string{"../../README.md"}
	if err := filepath.WalkDir("../../docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			docs = append(docs, path)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	blocks, fragments := 0, 0
	for _, doc := range docs {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		md := string(raw)
		if strings.HasSuffix(doc, "/policies.md") && !strings.Contains(md, "```yaml\n"+string(Example())+"```") {
			t.Errorf("%s: the workload example is not config.Example()", doc)
		}
		for _, part := range strings.Split(md, "```yaml\n")[1:] {
			body, _, _ := strings.Cut(part, "```")
			switch {
			case strings.HasPrefix(body, "apiVersion: "+APIVersion):
				blocks++
			case strings.HasPrefix(body, "prometheus:\n"):
				fragments++
				body = "apiVersion: " + APIVersion + "\nkind: PolicyConfig\npolicies: []\n" + body
			default:
				continue
			}
			f, err := Parse([]byte(body))
			if err == nil {
				_, err = f.Catalog(builtin())
			}
			if err != nil {
				t.Errorf("%s: policy file does not parse: %v\n%s", doc, err, body)
			}
		}
	}
	if blocks < 2 || fragments < 1 {
		t.Errorf("found %d policy files and %d prometheus sections in the documentation, want at least 2 and 1", blocks, fragments)
	}
}

// The prometheus section: matchers and selectors are PromQL, keys are the
// families the adapter reads; every error names its path.
func TestPrometheusSection(t *testing.T) {
	head := "apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies: []\n"
	good := head + "prometheus:\n  matchers: '{cluster=\"prod\"}'\n  series:\n    vllm:num_requests_waiting: vllm_num_requests_waiting{job=\"vllm\"}\n    vllm:time_to_first_token_seconds: job:ttft_bucket:sum\n"
	f, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if f.Prometheus.Matchers != `{cluster="prod"}` || f.Prometheus.Series["vllm:num_requests_waiting"] != `vllm_num_requests_waiting{job="vllm"}` {
		t.Errorf("parsed %+v", f.Prometheus)
	}
	tests := []struct {
		name, file string
		want       []string
	}{
		{"unknown field", head + "prometheus:\n  matcher: x\n", []string{`unknown field "prometheus.matcher"`}},
		{"bad matchers", head + "prometheus:\n  matchers: cluster=prod\n", []string{`prometheus.matchers: Invalid value: "cluster=prod": not a PromQL label selector`}},
		{"matchers on the name", head + "prometheus:\n  matchers: '{__name__=\"x\"}'\n", []string{"prometheus.matchers: Invalid value", "must not match the metric name"}},
		{"unknown family and bad selector, both", head + "prometheus:\n  series:\n    vllm:num_request_waiting: x\n    vllm:kv_cache_usage_perc: rate(x[1m])\n",
			[]string{`prometheus.series[vllm:num_request_waiting]: Unsupported value: "vllm:num_request_waiting"`, `prometheus.series[vllm:kv_cache_usage_perc]: Invalid value: "rate(x[1m])"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.file))
			if err == nil {
				t.Fatal("Parse = nil, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// The Loader keeps the section of the file in force, and the last good one
	// when a new file is bad.
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLoader(path, builtin(), clocktesting.NewFakeClock(time.Now()), m)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Prometheus().Matchers; got != `{cluster="prod"}` {
		t.Errorf("Loader.Prometheus().Matchers = %q", got)
	}
	if err := os.WriteFile(path, []byte(head+"prometheus:\n  matchers: 'x'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reload(); err == nil {
		t.Fatal("Reload of a bad file = nil")
	}
	if got := l.Prometheus().Matchers; got != `{cluster="prod"}` {
		t.Errorf("after a bad reload Matchers = %q, want the last good one", got)
	}
}

// The look-ahead example parses into a policy with a demand-rate term (window
// 30 s, set point in requests per second per replica), a peak hold and a
// scheduled minimum in its time zone.
func TestExampleAhead(t *testing.T) {
	f, err := Parse(ExampleAhead())
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Catalog(builtin())
	if err != nil {
		t.Fatal(err)
	}
	p := c.Lookup("chat-ahead")
	if p == nil || len(p.Terms) != 3 || p.Terms[2].Kind != policy.TermDemandRate || p.Terms[2].SetPoint != 12 || p.Terms[2].Window != 30*time.Second {
		t.Fatalf("chat-ahead %+v", p)
	}
	if p.Peak == nil || p.Peak.Window != 10*time.Minute || p.Peak.Headroom != 0.2 || p.Peak.HalfLife != 5*time.Minute {
		t.Errorf("peak %+v", p.Peak)
	}
	// Monday 2026-11-30 08:30 in Berlin (07:30 UTC) is in the window.
	monday := time.Date(2026, 11, 30, 7, 30, 0, 0, time.UTC)
	if len(p.Minimums) != 1 || !p.Minimums[0].Open(monday) || p.Minimums[0].Open(monday.Add(4*time.Hour)) {
		t.Errorf("minimums %+v: want open at 08:30 Berlin, closed at 12:30", p.Minimums)
	}
	if !p.Remembers() || len(c.Needs().Windows) != 1 {
		t.Errorf("Remembers %v, needs %+v: want a pool state and the 30s window", p.Remembers(), c.Needs())
	}
}

// Bad look-ahead fields are named with their paths, all at once.
func TestAheadParseErrors(t *testing.T) {
	head := "apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n- name: a\n  kind: mean\n  terms: [{kind: queueDepth, setPoint: 5}]\n"
	tests := []struct {
		name, tail string
		want       []string
	}{
		{"demand rate without set point", "- name: b\n  kind: mean\n  terms: [{kind: demandRate}]\n",
			[]string{"policies[1].terms[0].setPoint: Required value"}},
		{"peak without window", "  peak: {headroom: 0.2}\n", []string{"policies[0].peak.window: Required value"}},
		{"negative headroom", "  peak: {window: 5m, headroom: -1}\n", []string{"policies[0].peak.headroom: Invalid value: -1"}},
		{"peak window past a day", "  peak: {window: 25h}\n", []string{"policies[0].peak.window: Invalid value: \"25h0m0s\": must be in (0, 24h0m0s]"}},
		{"bad schedule and zone", "  minimums: [{schedule: \"every day\", duration: 1h, timeZone: Nowhere/Land, demand: 2}]\n",
			[]string{"policies[0].minimums[0].schedule: Invalid value"}},
		{"bad zone", "  minimums: [{schedule: \"@daily\", duration: 1h, timeZone: Nowhere/Land, demand: 2}]\n",
			[]string{"policies[0].minimums[0].timeZone: Invalid value: \"Nowhere/Land\""}},
		{"missing duration", "  minimums: [{schedule: \"@daily\", demand: 2}]\n", []string{"policies[0].minimums[0].duration: Required value"}},
		// A duration is shown as written, not in nanoseconds.
		{"negative half-life", "  peak: {window: 10m, halfLife: -1s}\n", []string{"policies[0].peak.halfLife: Invalid value: \"-1s\""}},
		{"never opens", "  minimums: [{schedule: \"0 0 30 2 *\", duration: 1h, demand: 7}]\n",
			[]string{"policies[0].minimums[0].schedule: Invalid value: \"0 0 30 2 *\": never opens"}},
		{"local time zone", "  minimums: [{schedule: \"0 9 * * *\", duration: 1h, timeZone: Local, demand: 7}]\n",
			[]string{"policies[0].minimums[0].timeZone: Invalid value: \"Local\""}},
		{"trend without window and lookahead", "  trend: {}\n",
			[]string{"policies[0].trend.window: Required value", "policies[0].trend.lookahead: Required value"}},
		{"trend lookahead past an hour", "  trend: {window: 2m, lookahead: 2h}\n", []string{"policies[0].trend.lookahead: Invalid value: \"2h0m0s\""}},
		{"trend on a signal", "- name: s\n  kind: signal\n  signal: queueDepth\n  trend: {window: 2m, lookahead: 4m}\n",
			[]string{"policies[1].kind: Invalid value: \"signal\""}},
		{"signal policy", "- name: s\n  kind: signal\n  signal: queueDepth\n  peak: {window: 1m}\n",
			[]string{"policies[1].kind: Invalid value: \"signal\""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(head + tt.tail))
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Parse error = %v, want it to contain %q", err, w)
				}
			}
		})
	}
}

// Issue 20: a 50 MB configuration file took the adapter from 83 to 508 MiB
// and wrote a 48 MB log line. A file above MaxFileBytes is refused unread
// (the heap does not grow with it), and every load error is cut to
// MaxErrorBytes, even for a file within the limit whose one value is huge.
func TestConfigFileBounds(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	head := "apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n"
	if err := os.WriteFile(path, []byte(head+"- {name: a, kind: mean, terms: [{kind: queueDepth, setPoint: 5}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLoader(path, builtin(), clocktesting.NewFakeClock(time.Now()), m)
	if err != nil {
		t.Fatal(err)
	}

	// 50 MB of a valid-looking file: a huge selector.
	big, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := big.WriteString(head + "- {name: b, kind: demand, terms: [{kind: queueDepth}], gateway: {match: {p: q}, selector: 'app="); err != nil {
		t.Fatal(err)
	}
	if _, err := big.Write(bytes.Repeat([]byte("x"), 50<<20)); err != nil {
		t.Fatal(err)
	}
	if _, err := big.WriteString("'}}\n"); err != nil {
		t.Fatal(err)
	}
	big.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = l.Reload()
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "file too large") {
		t.Fatalf("a 50 MB file: %v, want it refused as too large", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("refusing a 50 MB file allocated %d bytes, want under 1 MiB (it is not read)", grew)
	}
	if l.Catalog().Lookup("a") == nil {
		t.Error("the refused file replaced the catalog in force")
	}

	// Within the limit, one 900 KB value: the error quoting it is cut.
	value := strings.Repeat("x", 900<<10)
	if err := os.WriteFile(path, []byte(head+"- {name: b, kind: demand, terms: [{kind: queueDepth}], gateway: {match: {p: q}, selector: 'app in ("+value+"'}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = l.Reload()
	if err == nil || !strings.Contains(err.Error(), "policies[0].gateway.selector") {
		t.Fatalf("a bad selector: %v", err)
	}
	if n := len(err.Error()); n > MaxErrorBytes+8 {
		t.Errorf("the error is %d bytes, want at most %d", n, MaxErrorBytes)
	}
	if _, serr := l.Status(); serr == nil || len(serr.Error()) > MaxErrorBytes+8 {
		t.Errorf("Status error %d bytes, want the cut one", len(serr.Error()))
	}
}

// A token file under the secrets directory, with the gateway's namespace and
// ServiceAccount, is accepted, its path cleaned.
func TestGatewayTokenAccepted(t *testing.T) {
	f, err := Parse([]byte("apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n- name: a\n  kind: demand\n  terms: [{kind: queueDepth}]\n" +
		"  gateway: {namespace: llm-gateway, serviceAccountName: epp, selector: app=epp, match: {inference_pool: p}, bearerTokenFile: /var/run/secrets//epp-metrics/./token}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Catalog(builtin())
	if err != nil {
		t.Fatal(err)
	}
	g := c.Lookup("a").Gateway
	if g.BearerTokenFile != "/var/run/secrets/epp-metrics/token" || g.ServiceAccount != "epp" || g.Namespace != "llm-gateway" {
		t.Errorf("gateway input %+v, want the cleaned path, the ServiceAccount and the namespace", g)
	}
}

// A leading or trailing "---", or an empty document after one, is still one
// document.
func TestOneDocumentAcceptsMarkers(t *testing.T) {
	body := "apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n- {name: a, kind: mean, terms: [{kind: queueDepth}]}\n"
	for _, f := range []string{"---\n" + body, body + "---\n", body + "---\n# nothing\n", body + "---\n~\n"} {
		if _, err := Parse([]byte(f)); err != nil {
			t.Errorf("Parse(%q): %v", f, err)
		}
	}
}
