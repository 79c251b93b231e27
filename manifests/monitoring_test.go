package manifests

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

const dashboardPath = "monitoring/dashboard.json"

// wantAlerts are the alerts of the rules: the engines' saturation that hurts (a growing
// queue with the KV cache full, sustained preemptions, a TTFT SLO burning its budget)
// and the adapter's own.
func wantAlerts() []string {
	return []string{
		"LLMEnginePreemptions", "LLMEngineSaturated", "LLMEngineTTFTSLOBurn",
		"SaturationAdapterAPIServiceNotOwned", "SaturationAdapterAPIServiceUnavailable", "SaturationAdapterScrapeErrors", "SaturationAdapterUnknownPods",
		"SaturationAdapterValuesNotServed",
	}
}

// promQL is the PromQL parser the checks use: Prometheus's own, default options.
func promQL() parser.Parser { return parser.NewParser(parser.Options{}) }

// checkRules runs what `promtool check rules` runs on the rule file the Prometheus
// Operator writes for pr (rulefmt.Parse: strict YAML, every expr parsed, templates
// parsed, legacy metric-name validation so Prometheus 2 accepts it too) and returns the
// alerts by name.
func checkRules(t *testing.T, pr *prometheusRule) map[string]string {
	t.Helper()
	file, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	_, errs := rulefmt.Parse(file, false, model.LegacyValidation, promQL(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, err := range errs {
		t.Errorf("rules of PrometheusRule %s: %v", pr.Name, err)
	}
	alerts := map[string]string{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = r.Expr
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: want a severity label, a summary and a description", r.Alert)
			}
		}
	}
	return alerts
}

func TestPrometheusRules(t *testing.T) {
	pr := only[*prometheusRule](t, decodeFile(t, monitoringPath), adapterName)
	alerts := checkRules(t, pr)
	if diff := cmp.Diff(wantAlerts(), slices.Sorted(func(yield func(string) bool) {
		for a := range alerts {
			if !yield(a) {
				return
			}
		}
	})); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
	for _, name := range wantAlerts() {
		checkSelfMetricsDocumented(t, name, alerts[name])
	}
}

// TestChartPrometheusRuleValues checks that each threshold value reaches its alert and
// that the rules stay valid with other values and with custom.metrics.k8s.io.
func TestChartPrometheusRuleValues(t *testing.T) {
	objs := decode(t, "helm template", mustHelmTemplate(t, "--set", "prometheusRule.enabled=true", "--set", "customMetrics.enabled=true",
		"--set", "prometheusRule.engines.saturated.queueFloor=25", "--set", "prometheusRule.engines.saturated.growthPerMinute=2",
		"--set", "prometheusRule.engines.saturated.kvCacheUsage=0.85", "--set", "prometheusRule.engines.saturated.window=15m",
		"--set", "prometheusRule.engines.preemptions.ratePerSecond=0.1", "--set", "prometheusRule.engines.preemptions.window=10m",
		"--set-string", "prometheusRule.engines.ttftSLO.le=1.0", "--set", "prometheusRule.engines.ttftSLO.objective=0.95",
		"--set", "prometheusRule.engines.ttftSLO.burnRate=6", "--set", "prometheusRule.engines.ttftSLO.longWindow=6h",
		"--set", "prometheusRule.engines.ttftSLO.shortWindow=30m", "--set", "prometheusRule.engines.ttftSLO.minRequestsPerSecond=0.5",
		"--set", "prometheusRule.engines.ttftSLO.for=7m",
		"--set", "prometheusRule.adapter.scrapeErrorRatio.threshold=0.25",
		"--set", "prometheusRule.adapter.apiServiceNotOwned.for=15m",
		"--set", "prometheusRule.adapter.valuesNotServed.ratePerSecond=0.05", "--set", "prometheusRule.adapter.valuesNotServed.window=15m",
		"--set", "prometheusRule.labels.release=kube-prometheus-stack"))
	pr := only[*prometheusRule](t, objs, adapterName)
	if pr.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("labels = %v, want release=kube-prometheus-stack added", pr.Labels)
	}
	alerts := checkRules(t, pr)
	for name, wants := range map[string][]string{
		"LLMEngineSaturated":                     {"avg_over_time(vllm:num_requests_waiting[15m])) > 25", "[15m])) * 60 > 2", "[15m])) > 0.85"},
		"LLMEnginePreemptions":                   {"[10m])) > 0.1"},
		"LLMEngineTTFTSLOBurn":                   {`le="1.0"}[6h]`, `le="1.0"}[30m]`, "> (6 * (1 - 0.95))", "_count[30m])) > 0.5"},
		"SaturationAdapterScrapeErrors":          {"> 0.25"},
		"SaturationAdapterValuesNotServed":       {`{result!="ok"}[15m])) > 0.05`},
		"SaturationAdapterAPIServiceUnavailable": {`name=~"v1beta1.external.metrics.k8s.io|v1beta2.custom.metrics.k8s.io|v1beta1.custom.metrics.k8s.io"`},
	} {
		for _, want := range wants {
			if !strings.Contains(alerts[name], want) {
				t.Errorf("%s expr %q lacks %q", name, alerts[name], want)
			}
		}
	}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "LLMEngineTTFTSLOBurn" && (r.For != "7m" || !strings.Contains(r.Annotations["description"], "waited over 1.0s for a first token in the last 6h (and the last 30m): over 6 times the error budget of objective 0.95")) {
				t.Errorf("TTFT alert for %q, description %q", r.For, r.Annotations["description"])
			}
			if r.Alert == "SaturationAdapterAPIServiceNotOwned" && (r.For != "15m" || !strings.Contains(r.Annotations["description"], "for 15m:")) {
				t.Errorf("ownership alert for %q, description %q", r.For, r.Annotations["description"])
			}
		}
	}

	// Each group can be turned off.
	objs = decode(t, "helm template", mustHelmTemplate(t, "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.engines.enabled=false"))
	if groups := only[*prometheusRule](t, objs, adapterName).Spec.Groups; len(groups) != 1 || groups[0].Name != "saturation-adapter.adapter" {
		t.Errorf("groups = %+v, want the adapter's only", groups)
	}
}

// dashboard is the part of a Grafana dashboard JSON the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr  string `json:"expr"`
			RefID string `json:"refId"`
		} `json:"targets"`
	} `json:"panels"`
}

// grafanaVariable matches a Grafana variable reference: $__rate_interval, $namespace,
// ${hpa}, ${hpa:regex}.
var grafanaVariable = regexp.MustCompile(`\$(__[a-z_]+|\{[A-Za-z0-9_]+(:[a-z]+)?\}|[A-Za-z0-9_]+)`)

// substituteVariables replaces Grafana's variables with what they expand to at query
// time for the parser's sake: intervals by a duration, other variables by a regex.
func substituteVariables(expr string) string {
	return grafanaVariable.ReplaceAllStringFunc(expr, func(v string) string {
		if strings.HasPrefix(v, "$__") {
			return "5m"
		}
		return ".*"
	})
}

func TestDashboard(t *testing.T) {
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	chartCopy, err := os.ReadFile(chartDir + "/dashboards/saturation-adapter.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(chartCopy) != string(data) {
		t.Errorf("%s/dashboards/saturation-adapter.json differs from %s: run `make manifests`", chartDir, dashboardPath)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" {
		t.Error("no uid: Grafana would give the dashboard a new URL on each import")
	}

	ids := map[int]bool{}
	targets := 0
	var exprs strings.Builder
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		for _, tg := range p.Targets {
			targets++
			exprs.WriteString(tg.Expr + "\n")
			name := fmt.Sprintf("panel %q target %s", p.Title, tg.RefID)
			expr := substituteVariables(tg.Expr)
			if _, err := promQL().ParseExpr(expr); err != nil {
				t.Errorf("%s: %q: %v", name, tg.Expr, err)
				continue
			}
			checkSelfMetricsDocumented(t, name, expr)
		}
	}
	if targets == 0 {
		t.Fatal("no panel targets")
	}
	// Variable queries: label_values(<selector>, <label>).
	labelValues := regexp.MustCompile(`^label_values\((.+), *[a-z_]+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		query, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(<selector>, <label>)", v.Name, query)
			continue
		}
		if _, err := promQL().ParseExpr(substituteVariables(m[1])); err != nil {
			t.Errorf("variable %s: %q: %v", v.Name, query, err)
		}
	}

	// What issue 10 asks the dashboard to show.
	for _, want := range []string{
		`metric="llm_saturation"`, `metric="llm_demand_replicas"`, "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"kube_horizontalpodautoscaler_status_current_replicas", "kube_horizontalpodautoscaler_status_desired_replicas",
		"saturation_adapter_requests_total", "saturation_adapter_scrape_errors_total", "aggregator_unavailable_apiservice",
	} {
		if !strings.Contains(exprs.String(), want) {
			t.Errorf("dashboard does not query %s", want)
		}
	}
}

// checkSelfMetricsDocumented fails the test when expr (from what) selects a
// saturation_adapter_ metric that the documented metric table does not list. A
// histogram's _bucket, _count and _sum series count as the histogram.
func checkSelfMetricsDocumented(t *testing.T, what, expr string) {
	t.Helper()
	documented := map[string]string{}
	for _, row := range docTable(t, "docs/operations.md", "## The adapter's own metrics") {
		documented[row[0]] = row[1]
	}
	e, err := promQL().ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	for _, vs := range parser.ExtractSelectors(e) {
		for _, m := range vs {
			if m.Name != model.MetricNameLabel || !strings.HasPrefix(m.Value, "saturation_adapter_") {
				continue
			}
			name := m.Value
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if base, ok := strings.CutSuffix(name, suffix); ok && documented[base] == "histogram" {
					name = base
				}
			}
			if _, ok := documented[name]; !ok {
				t.Errorf("%s uses %s, which the documented metric table does not list", what, m.Value)
			}
		}
	}
}

// TestMonitoringObjects checks the kustomize monitoring add-on: the ServiceMonitor
// finds the install's Service and verifies it with the self-managed CA, Prometheus may
// GET /metrics, and the dashboard ConfigMap carries the sidecar's label and the JSON.
func TestMonitoringObjects(t *testing.T) {
	objs := decodeFile(t, monitoringPath)
	install := decodeFile(t, renderedPath)
	svc := only[*corev1.Service](t, install, adapterName)
	sm := only[*serviceMonitor](t, objs, adapterName)
	if sm.Namespace != svc.Namespace {
		t.Errorf("ServiceMonitor in %q, Service in %q", sm.Namespace, svc.Namespace)
	}
	if sel, err := metav1LabelSelector(sm.Spec.Selector); err != nil || !sel.Matches(labelSet(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not match the Service's labels %v", sm.Spec.Selector, svc.Labels)
	}
	checkServiceMonitor(t, sm, servingCertSecret, false)

	role := only[*rbacv1.ClusterRole](t, objs, "saturation-adapter:metrics-reader")
	if diff := cmp.Diff([]rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}, role.Rules); diff != "" {
		t.Errorf("metrics-reader rules (-want +got):\n%s", diff)
	}
	// The token in the ServiceMonitor's Secret is the one of a ServiceAccount bound to
	// that role, in the ServiceMonitor's namespace (the Prometheus Operator reads
	// credentials there).
	sa := only[*corev1.ServiceAccount](t, objs, "saturation-adapter-metrics")
	secret := only[*corev1.Secret](t, objs, metricsTokenSecret)
	if secret.Type != corev1.SecretTypeServiceAccountToken || secret.Annotations[corev1.ServiceAccountNameKey] != sa.Name ||
		secret.Namespace != sm.Namespace || sa.Namespace != sm.Namespace {
		t.Errorf("token Secret %s/%s type %s annotations %v: want a %s token of ServiceAccount %s/%s", secret.Namespace, secret.Name,
			secret.Type, secret.Annotations, corev1.SecretTypeServiceAccountToken, sa.Namespace, sa.Name)
	}
	b := only[*rbacv1.ClusterRoleBinding](t, objs, "saturation-adapter:metrics-reader")
	if diff := cmp.Diff([]rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}}, b.Subjects); b.RoleRef.Name != role.Name || diff != "" {
		t.Errorf("binding to %s, subjects (-want +got):\n%s", b.RoleRef.Name, diff)
	}

	cm := only[*corev1.ConfigMap](t, objs, "saturation-adapter-dashboard")
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Data["saturation-adapter.json"] != string(data) {
		t.Errorf("dashboard ConfigMap labels %v, keys %v: want grafana_dashboard=1 and saturation-adapter.json = %s", cm.Labels, slices.Collect(mapKeys(cm.Data)), dashboardPath)
	}
}
