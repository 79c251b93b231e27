package manifests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// promtool returns Prometheus's promtool: SATURATION_ADAPTER_PROMTOOL, else promtool on
// PATH (Debian's prometheus package has it; .ci/run installs that package for the
// end-to-end tests too). Without it the test fails, as without helm, unless
// E2E_SKIP_PROMETHEUS is set, which skips every test that needs that package.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SATURATION_ADAPTER_PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if errors.Is(err, exec.ErrNotFound) && os.Getenv("E2E_SKIP_PROMETHEUS") != "" {
		t.Skipf("E2E_SKIP_PROMETHEUS is set and there is no promtool: %v", err)
	}
	if err != nil {
		t.Fatalf("no promtool (%v): install Debian's prometheus package, as .ci/run does, set SATURATION_ADAPTER_PROMTOOL, or set E2E_SKIP_PROMETHEUS=1 to skip", err)
	}
	return p
}

// notOwnedTest is a `promtool test rules` file for SaturationAdapterAPIServiceNotOwned
// over four stories (the namespace label), minute by minute, as the adapter's replicas
// (pod a, pod b) report saturation_adapter_apiservice_owned after each once-a-minute
// check: routed to the adapter all along; one check that found it elsewhere; one
// replica that sees it elsewhere while the other still sees it routed here; taken over
// from minute 5 on, seen by both replicas. Only the last fires, from minute 15 (the
// rule's for: 10m) on.
const notOwnedTest = `rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  - series: 'saturation_adapter_apiservice_owned{namespace="owned",job="saturation-adapter",pod="a",apiservice="v1beta1.external.metrics.k8s.io"}'
    values: '1x30'
  - series: 'saturation_adapter_apiservice_owned{namespace="blip",job="saturation-adapter",pod="a",apiservice="v1beta1.external.metrics.k8s.io"}'
    values: '1x9 0 1x20'
  - series: 'saturation_adapter_apiservice_owned{namespace="one-replica",job="saturation-adapter",pod="a",apiservice="v1beta1.external.metrics.k8s.io"}'
    values: '0x30'
  - series: 'saturation_adapter_apiservice_owned{namespace="one-replica",job="saturation-adapter",pod="b",apiservice="v1beta1.external.metrics.k8s.io"}'
    values: '1x30'
  - series: 'saturation_adapter_apiservice_owned{namespace="taken",job="saturation-adapter",pod="a",apiservice="v1beta1.external.metrics.k8s.io"}'
    values: '1x4 0x26'
  - series: 'saturation_adapter_apiservice_owned{namespace="taken",job="saturation-adapter",pod="b",apiservice="v1beta1.external.metrics.k8s.io"}'
    values: '1x4 0x26'
  alert_rule_test:
  - eval_time: 10m
    alertname: SaturationAdapterAPIServiceNotOwned
    exp_alerts: []
  - eval_time: 14m
    alertname: SaturationAdapterAPIServiceNotOwned
    exp_alerts: []
  - eval_time: 15m
    alertname: SaturationAdapterAPIServiceNotOwned
    exp_alerts:
    - exp_labels: {severity: critical, namespace: taken, job: saturation-adapter, apiservice: v1beta1.external.metrics.k8s.io}
  - eval_time: 30m
    alertname: SaturationAdapterAPIServiceNotOwned
    exp_alerts:
    - exp_labels: {severity: critical, namespace: taken, job: saturation-adapter, apiservice: v1beta1.external.metrics.k8s.io}
`

// scrapeErrorsTest is a `promtool test rules` file for SaturationAdapterScrapeErrors over
// two adapters (the namespace label) that each scrape 10 times a minute and fail every
// scrape: one because llama.cpp routers do not have the model its URLs name loaded
// (model_not_loaded, pods that do not serve the model: no fault), the other because the
// engines refuse connections. Only the second fires, once its ratio has held for 10m.
const scrapeErrorsTest = `rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  - series: 'saturation_adapter_scrape_duration_seconds_count{namespace="router",job="saturation-adapter",outcome="error"}'
    values: '0+10x30'
  - series: 'saturation_adapter_scrape_errors_total{namespace="router",job="saturation-adapter",reason="model_not_loaded"}'
    values: '0+10x30'
  - series: 'saturation_adapter_scrape_duration_seconds_count{namespace="refused",job="saturation-adapter",outcome="error"}'
    values: '0+10x30'
  - series: 'saturation_adapter_scrape_errors_total{namespace="refused",job="saturation-adapter",reason="connect"}'
    values: '0+10x30'
  alert_rule_test:
  - eval_time: 5m
    alertname: SaturationAdapterScrapeErrors
    exp_alerts: []
  - eval_time: 20m
    alertname: SaturationAdapterScrapeErrors
    exp_alerts:
    - exp_labels: {severity: warning, namespace: refused, job: saturation-adapter}
`

// TestAlertsWithPromtool runs Prometheus's promtool on the rules the monitoring install
// and the chart (prometheusRule.enabled, default thresholds) ship: `check rules` on
// them as they are, and `test rules` with notOwnedTest, so the ownership alert fires
// when the APIService stays taken and never on one blip or while a replica still sees
// it routed to the adapter, and with scrapeErrorsTest, so the scrape-error alert never
// fires on llama.cpp routers that do not have a model loaded. The test's rule file drops the annotations: promtool
// compares them too, and their templates are checked by `check rules`.
func TestAlertsWithPromtool(t *testing.T) {
	tool := promtool(t)
	for name, objs := range map[string][]any{
		monitoringPath:  decodeFile(t, monitoringPath),
		"helm template": decode(t, "helm template", mustHelmTemplate(t, "--set", "prometheusRule.enabled=true")),
	} {
		t.Run(name, func(t *testing.T) {
			pr := only[*prometheusRule](t, objs, adapterName)
			dir := t.TempDir()
			write := func(file string, v any) string {
				b, err := yaml.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(dir, file)
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
				return path
			}
			full := write("full.yaml", map[string]any{"groups": pr.Spec.Groups})
			if out, err := run(tool, "check", "rules", full); err != nil {
				t.Fatalf("promtool check rules: %v\n%s", err, out)
			}
			groups := pr.Spec.Groups
			for g := range groups {
				for r := range groups[g].Rules {
					groups[g].Rules[r].Annotations = nil
				}
			}
			write("rules.yaml", map[string]any{"groups": groups})
			for file, text := range map[string]string{"owned.yaml": notOwnedTest, "scrape.yaml": scrapeErrorsTest} {
				test := filepath.Join(dir, file)
				if err := os.WriteFile(test, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
				if out, err := run(tool, "test", "rules", test); err != nil {
					t.Errorf("promtool test rules %s: %v\n%s", file, err, out)
				}
			}
		})
	}
}

// TestAlertsDocumented: docs/operations.md's alert table lists every alert the
// monitoring install ships, each with its `for`, and no other.
func TestAlertsDocumented(t *testing.T) {
	pr := only[*prometheusRule](t, decodeFile(t, monitoringPath), adapterName)
	shipped := map[string]string{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				shipped[r.Alert] = r.For
			}
		}
	}
	documented := map[string]string{}
	for _, row := range docTable(t, "docs/operations.md", "## Monitoring") {
		if len(row) != 3 {
			t.Fatalf("docs/operations.md alert row %q: want | alert | fires when | for |", row)
		}
		documented[row[0]] = row[2]
	}
	if diff := cmp.Diff(shipped, documented); diff != "" {
		t.Errorf("alerts and their for (-shipped +docs/operations.md):\n%s", diff)
	}
}
