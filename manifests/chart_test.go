package manifests

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/saturation-adapter/saturation-adapter/pkg/config"
)

// TestChartLint runs `helm lint --strict` (warnings fail) on the chart as shipped and in
// each TLS mode.
func TestChartLint(t *testing.T) {
	helm := tool(t, helmEnv)
	for _, args := range [][]string{
		nil,
		{"--set", "tls.mode=certManager", "--set", "customMetrics.enabled=true"},
		{"--set", "tls.mode=secret", "--set", "tls.secret.name=tls", "--set", "tls.secret.caBundle=" + pemPlaceholder},
		{"--set", "tls.mode=insecure"},
		{"--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true", "--set", "dashboard.enabled=true", "--set", "networkPolicy.enabled=true"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if out, err := run(helm, append([]string{"lint", "--strict", chartDir}, args...)...); err != nil {
				t.Errorf("helm lint: %v\n%s", err, out)
			}
		})
	}
}

// helmOnlyLabels are the labels the chart adds to every object's metadata on purpose
// (Helm's recommended labels); the kustomize install has only app.kubernetes.io/part-of
// there. app.kubernetes.io/instance is also in the chart's selectors (so two releases
// never select each other's pods); kustomize selects on app.kubernetes.io/name alone.
var helmOnlyLabels = []string{"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"}

// normalise removes from obj what the chart adds on purpose (see helmOnlyLabels, and
// checksum/* pod annotations that restart pods on config changes) so the rest can be
// compared with the kustomize rendering.
func normalise(obj map[string]any) map[string]any {
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			delete(v, "app.kubernetes.io/instance")
			for k, x := range v {
				if strings.HasPrefix(k, "checksum/") {
					delete(v, k)
					continue
				}
				walk(x)
			}
			for _, k := range []string{"labels", "annotations", "matchLabels"} {
				if m, ok := v[k].(map[string]any); ok && len(m) == 0 {
					delete(v, k)
				}
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	if md, ok := obj["metadata"].(map[string]any); ok {
		if l, ok := md["labels"].(map[string]any); ok {
			for _, k := range helmOnlyLabels {
				delete(l, k)
			}
		}
	}
	walk(obj)
	return obj
}

// byID indexes objects by "Kind namespace/name", leaving out kinds in skip.
func byID(t *testing.T, objs []map[string]any, skip ...string) map[string]map[string]any {
	t.Helper()
	m := map[string]map[string]any{}
	for _, o := range objs {
		kind, _ := o["kind"].(string)
		if slices.Contains(skip, kind) {
			continue
		}
		md, _ := o["metadata"].(map[string]any)
		id := fmt.Sprintf("%s %v/%v", kind, md["namespace"], md["name"])
		if _, dup := m[id]; dup {
			t.Fatalf("two objects %s", id)
		}
		m[id] = normalise(o)
	}
	return m
}

// TestChartMatchesKustomize renders the chart and the kustomize install for the same
// settings and compares every object. The only difference allowed is the Namespace,
// which the chart leaves to `helm install --create-namespace`.
func TestChartMatchesKustomize(t *testing.T) {
	monitoring := []string{"--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true", "--set", "dashboard.enabled=true"}
	for _, tc := range []struct {
		name       string
		values     []string
		resources  []string
		components []string
	}{
		{"default", nil, []string{"base"}, nil},
		{"custom metrics", []string{"--set", "customMetrics.enabled=true"}, []string{"base"}, []string{"custom-metrics"}},
		{"cert-manager", []string{"--set", "tls.mode=certManager"}, []string{"base"}, []string{"cert-manager"}},
		{"insecure", []string{"--set", "tls.mode=insecure"}, []string{"base"}, []string{"insecure"}},
		{"custom metrics + cert-manager", []string{"--set", "customMetrics.enabled=true", "--set", "tls.mode=certManager"}, []string{"base"}, []string{"custom-metrics", "cert-manager"}},
		{"custom metrics + insecure", []string{"--set", "customMetrics.enabled=true", "--set", "tls.mode=insecure"}, []string{"base"}, []string{"custom-metrics", "insecure"}},
		{"monitoring", monitoring, []string{"base", "monitoring"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := byID(t, documents(t, kustomizeBuild(t, tc.resources, tc.components...)), "Namespace")
			got := byID(t, documents(t, mustHelmTemplate(t, append([]string{"--set", "image.tag=dev"}, tc.values...)...)))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("kustomize (-want) and chart (+got) differ:\n%s", diff)
			}
		})
	}
}

// TestChartTLSModes checks every TLS mode, with and without custom.metrics.k8s.io, with
// the same checks as the kustomize variants: TLS wiring, hardening, wiring.
func TestChartTLSModes(t *testing.T) {
	const caBundle = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	for _, mode := range []string{modeSelfManaged, modeCertManager, modeSecret, modeInsecure} {
		for _, custom := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/customMetrics=%v", mode, custom), func(t *testing.T) {
				args := []string{"--set", "tls.mode=" + mode, "--set", fmt.Sprintf("customMetrics.enabled=%v", custom)}
				if mode == modeSecret {
					args = append(args, "--set", "tls.secret.name=user-provided-tls", "--set-string", "tls.secret.caBundle="+caBundle)
				}
				objs := decode(t, "helm template", mustHelmTemplate(t, args...))
				checkTLS(t, objs, mode, []byte(caBundle))
				checkHardening(t, only[*appsv1.Deployment](t, objs, adapterName))
				checkWiring(t, objs)
				if n := len(all[*apiService](objs)); n != map[bool]int{false: 1, true: 3}[custom] {
					t.Errorf("%d APIServices", n)
				}
			})
		}
	}
}

// TestChartOptions renders the chart with each option and checks what it must change,
// and that the pod keeps its hardening whatever the values.
func TestChartOptions(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, objs []any)
	}{
		{"release name and namespace", []string{"--set", "fullnameOverride=llm-autoscaler"}, func(t *testing.T, objs []any) {
			d := only[*appsv1.Deployment](t, objs, "llm-autoscaler")
			if got := flagValue(d.Spec.Template.Spec.Containers[0].Args, "--tls-managed-secret"); got != "llm-autoscaler-serving-cert" {
				t.Errorf("--tls-managed-secret = %q", got)
			}
			// The ownership check and the certificate's DNS names follow the Service.
			if got := flagValue(d.Spec.Template.Spec.Containers[0].Args, "--adapter-service"); got != "llm-autoscaler" {
				t.Errorf("--adapter-service = %q, want the Service's name llm-autoscaler", got)
			}
			api := only[*apiService](t, objs, externalAPIService)
			if api.Spec.Service.Name != "llm-autoscaler" {
				t.Errorf("APIService service = %+v", api.Spec.Service)
			}
		}},
		{"image by digest", []string{"--set", "image.repository=registry.example.com/sa", "--set", "image.tag=v9", "--set", "image.digest=" + digest}, func(t *testing.T, objs []any) {
			if got, want := only[*appsv1.Deployment](t, objs, adapterName).Spec.Template.Spec.Containers[0].Image, "registry.example.com/sa@"+digest; got != want {
				t.Errorf("image = %q, want %q", got, want)
			}
		}},
		{"image by tag", []string{"--set", "image.repository=registry.example.com/sa", "--set", "image.tag=v9"}, func(t *testing.T, objs []any) {
			if got, want := only[*appsv1.Deployment](t, objs, adapterName).Spec.Template.Spec.Containers[0].Image, "registry.example.com/sa:v9"; got != want {
				t.Errorf("image = %q, want %q", got, want)
			}
		}},
		{"namespaced RBAC", []string{"--set", "flags.namespaces={llm-a,llm-b}"}, func(t *testing.T, objs []any) {
			if got := flagValue(only[*appsv1.Deployment](t, objs, adapterName).Spec.Template.Spec.Containers[0].Args, "--namespaces"); got != "llm-a,llm-b" {
				t.Errorf("--namespaces = %q", got)
			}
			for _, r := range all[*rbacv1.ClusterRole](objs) {
				if r.Name == adapterName {
					t.Error("ClusterRole saturation-adapter still rendered with namespaces set")
				}
			}
			want := []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{"autoscaling"}, Resources: []string{"horizontalpodautoscalers"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			}
			var nss []string
			for _, r := range all[*rbacv1.Role](objs) {
				if r.Name != adapterName {
					continue
				}
				nss = append(nss, r.Namespace)
				if diff := cmp.Diff(want, r.Rules); diff != "" {
					t.Errorf("Role in %s (-want +got):\n%s", r.Namespace, diff)
				}
			}
			for _, b := range all[*rbacv1.RoleBinding](objs) {
				if b.Name == adapterName && (b.RoleRef.Name != adapterName || b.Subjects[0].Name != adapterName || b.Subjects[0].Namespace != namespace) {
					t.Errorf("RoleBinding in %s = %+v", b.Namespace, b)
				}
			}
			if diff := cmp.Diff([]string{"llm-a", "llm-b"}, nss, sortStrings); diff != "" {
				t.Errorf("Roles by namespace (-want +got):\n%s", diff)
			}
		}},
		{"network policy in prometheus mode", []string{"--set", "networkPolicy.enabled=true", "--set", "flags.source=prometheus", "--set", "flags.prometheusUrl=http://prometheus-operated.monitoring:9090"}, func(t *testing.T, objs []any) {
			np := only[*networkingv1.NetworkPolicy](t, objs, adapterName)
			var ports []string
			for _, e := range np.Spec.Egress {
				for _, p := range e.Ports {
					ports = append(ports, fmt.Sprintf("%d/%s", p.Port.IntValue(), *p.Protocol))
				}
			}
			// Prometheus, the API server and DNS; not the engines.
			if diff := cmp.Diff([]string{"9090/TCP", "443/TCP", "6443/TCP", "53/UDP", "53/TCP"}, ports); diff != "" {
				t.Errorf("egress ports (-want +got):\n%s", diff)
			}
		}},
		{"network policy", []string{"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.apiServer.cidrs={10.0.0.1/32}"}, func(t *testing.T, objs []any) {
			np := only[*networkingv1.NetworkPolicy](t, objs, adapterName)
			pod := only[*appsv1.Deployment](t, objs, adapterName).Spec.Template
			if sel, err := metav1LabelSelector(np.Spec.PodSelector); err != nil || !sel.Matches(labels.Set(pod.Labels)) {
				t.Errorf("podSelector %v does not select the adapter's pods", np.Spec.PodSelector)
			}
			if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.IntValue() != 6443 {
				t.Errorf("ingress = %+v, want the secure port 6443 only", np.Spec.Ingress)
			}
			var ports []int
			for _, e := range np.Spec.Egress {
				for _, p := range e.Ports {
					ports = append(ports, p.Port.IntValue())
				}
			}
			if diff := cmp.Diff([]int{8000, 443, 6443}, ports); diff != "" {
				t.Errorf("egress ports (-want +got):\n%s", diff)
			}
			if to := np.Spec.Egress[1].To; len(to) != 1 || to[0].IPBlock == nil || to[0].IPBlock.CIDR != "10.0.0.1/32" {
				t.Errorf("API server egress to = %+v", to)
			}
			if diff := cmp.Diff([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes); diff != "" {
				t.Errorf("policyTypes (-want +got):\n%s", diff)
			}
		}},
		{"network policy with gateway inputs", []string{"--set", "networkPolicy.enabled=true", "--set-json", `policyConfig={"apiVersion":"saturation-adapter.io/v1alpha1","kind":"PolicyConfig","policies":[` +
			`{"name":"a","kind":"demand","terms":[{"kind":"queueDepth","setPoint":5}],"gateway":{"selector":"app=epp","port":9443,"match":{"inference_pool":"a"}}},` +
			`{"name":"b","kind":"demand","terms":[{"kind":"queueDepth","setPoint":5}],"gateway":{"selector":"app=epp-b","match":{"inference_pool":"b"}}},` +
			`{"name":"c","kind":"demand","terms":[{"kind":"queueDepth","setPoint":5}]}]}`,
			"--set-json", `networkPolicy.gateways.to=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"llm-gateway"}}}]`}, func(t *testing.T, objs []any) {
			np := only[*networkingv1.NetworkPolicy](t, objs, adapterName)
			var ports [][]int
			for _, e := range np.Spec.Egress {
				var p []int
				for _, port := range e.Ports {
					p = append(p, port.Port.IntValue())
				}
				ports = append(ports, p)
			}
			// The engines, the endpoint pickers (9090, their --metrics-port default, and
			// the port policy a names), the API server.
			if diff := cmp.Diff([][]int{{8000}, {9090, 9443}, {443, 6443}}, ports); diff != "" {
				t.Errorf("egress ports (-want +got):\n%s", diff)
			}
			if to := np.Spec.Egress[1].To; len(to) != 1 || to[0].NamespaceSelector == nil {
				t.Errorf("gateway egress to = %+v, want networkPolicy.gateways.to", to)
			}
		}},
		{"network policy, gateway input read from Prometheus", []string{"--set", "networkPolicy.enabled=true", "--set", "flags.source=prometheus",
			"--set", "flags.prometheusUrl=http://prometheus-operated.monitoring:9090", "--set-json", `policyConfig={"apiVersion":"saturation-adapter.io/v1alpha1","kind":"PolicyConfig","policies":[` +
				`{"name":"a","kind":"demand","terms":[{"kind":"queueDepth","setPoint":5}],"gateway":{"selector":"app=epp","port":9443,"match":{"inference_pool":"a"}}}]}`}, func(t *testing.T, objs []any) {
			np := only[*networkingv1.NetworkPolicy](t, objs, adapterName)
			for _, e := range np.Spec.Egress {
				for _, p := range e.Ports {
					if p.Port.IntValue() == 9443 {
						t.Errorf("egress to the gateway's port 9443 although its series come from Prometheus: %+v", np.Spec.Egress)
					}
				}
			}
		}},
		{"extra args last, logging", []string{"--set", "extraArgs={--profiling=false}", "--set", "logging.format=json", "--set", "logging.verbosity=2"}, func(t *testing.T, objs []any) {
			args := only[*appsv1.Deployment](t, objs, adapterName).Spec.Template.Spec.Containers[0].Args
			if args[len(args)-1] != "--profiling=false" || flagValue(args, "--logging-format") != "json" || flagValue(args, "--v") != "2" {
				t.Errorf("args = %q", args)
			}
		}},
		{"priority, replicas, no PDB", []string{"--set", "priorityClassName=system-cluster-critical", "--set", "replicas=3", "--set", "podDisruptionBudget.enabled=false"}, func(t *testing.T, objs []any) {
			d := only[*appsv1.Deployment](t, objs, adapterName)
			if d.Spec.Template.Spec.PriorityClassName != "system-cluster-critical" || *d.Spec.Replicas != 3 {
				t.Errorf("priorityClassName %q, replicas %d", d.Spec.Template.Spec.PriorityClassName, *d.Spec.Replicas)
			}
			if n := len(all[*policyv1.PodDisruptionBudget](objs)); n != 0 {
				t.Errorf("%d PDBs", n)
			}
		}},
		{"affinity override", []string{"--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool", "--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists"}, func(t *testing.T, objs []any) {
			a := only[*appsv1.Deployment](t, objs, adapterName).Spec.Template.Spec.Affinity
			if a == nil || a.NodeAffinity == nil || a.PodAntiAffinity != nil {
				t.Errorf("affinity = %+v, want the given one instead of the default", a)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := decode(t, "helm template", mustHelmTemplate(t, tc.args...))
			for _, d := range all[*appsv1.Deployment](objs) {
				checkHardening(t, d)
			}
			tc.check(t, objs)
		})
	}
}

// TestChartServiceMonitorTLS checks that Prometheus verifies the adapter against the CA
// of each TLS mode.
func TestChartServiceMonitorTLS(t *testing.T) {
	for _, tc := range []struct {
		mode, secret string
		insecure     bool
	}{
		{modeSelfManaged, "saturation-adapter-serving-cert", false},
		{modeCertManager, "saturation-adapter-tls", false},
		{modeSecret, "user-provided-tls", false},
		{modeInsecure, "", true},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			objs := decode(t, "helm template", mustHelmTemplate(t, "--set", "serviceMonitor.enabled=true", "--set", "tls.mode="+tc.mode,
				"--set", "tls.secret.name=user-provided-tls", "--set", "tls.secret.caBundle="+pemPlaceholder))
			sm := only[*serviceMonitor](t, objs, adapterName)
			svc := only[*corev1.Service](t, objs, adapterName)
			if sel, err := metav1LabelSelector(sm.Spec.Selector); err != nil || !sel.Matches(labels.Set(svc.Labels)) {
				t.Errorf("ServiceMonitor selector %v does not match the Service's labels %v", sm.Spec.Selector, svc.Labels)
			}
			checkServiceMonitor(t, sm, tc.secret, tc.insecure)
		})
	}
}

// checkServiceMonitor fails the test unless sm scrapes /metrics on the https port with
// Prometheus's token, keeps the adapter's namespace label, and verifies TLS with the
// ca.crt of caSecret (or, when insecure, skips verification).
func checkServiceMonitor(t *testing.T, sm *serviceMonitor, caSecret string, insecure bool) {
	t.Helper()
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("%d endpoints", len(sm.Spec.Endpoints))
	}
	e := sm.Spec.Endpoints[0]
	if e.Port != "https" || e.Scheme != "https" || e.Path != "/metrics" || !e.HonorLabels {
		t.Errorf("endpoint = %+v", e)
	}
	// The token comes from a Secret (authorization), not Prometheus's own token file
	// (bearerTokenFile, deprecated by the Prometheus Operator).
	if a := e.Authorization; e.BearerTokenFile != "" || a == nil || a.Type != "Bearer" || a.Credentials == nil ||
		a.Credentials.Name != metricsTokenSecret || a.Credentials.Key != "token" {
		t.Errorf("endpoint bearerTokenFile %q authorization %+v, want Bearer from Secret %s key token", e.BearerTokenFile, e.Authorization, metricsTokenSecret)
	}
	tls := e.TLSConfig
	switch {
	case tls == nil:
		t.Error("no tlsConfig")
	case insecure:
		if !tls.InsecureSkipVerify || tls.CA != nil {
			t.Errorf("tlsConfig = %+v, want insecureSkipVerify only", tls)
		}
	default:
		if tls.InsecureSkipVerify || tls.CA == nil || tls.CA.Secret == nil || tls.CA.Secret.Name != caSecret || tls.CA.Secret.Key != "ca.crt" || tls.ServerName != "saturation-adapter.saturation-adapter.svc" {
			t.Errorf("tlsConfig = %+v, want CA %s/ca.crt and serverName saturation-adapter.saturation-adapter.svc", tls, caSecret)
		}
	}
}

// TestChartRejectsBadValues checks that bad values fail the render with a message
// naming the value, instead of rendering something broken.
func TestChartRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "tls.mode=none"}, "/tls/mode"},
		{[]string{"--set", "tls.mode=secret", "--set", "tls.secret.name=x"}, "tls.secret.caBundle is required"},
		{[]string{"--set", "tls.mode=secret", "--set", "tls.secret.caBundle=" + pemPlaceholder}, "tls.secret.name is required"},
		{[]string{"--set", "flags.scrapeIntervall=5s"}, "scrapeIntervall"},
		{[]string{"--set", "flags.scrapeScheme=ftp"}, "/flags/scrapeScheme"},
		{[]string{"--set", "flags.scrapeTimeout=soon"}, "/flags/scrapeTimeout"},
		{[]string{"--set", "image.digest=latest"}, "/image/digest"},
		{[]string{"--set", "flags.scrapeCaFile=/ca.pem", "--set", "flags.scrapeInsecureSkipVerify=true"}, "exclude each other"},
		{[]string{"--set", "prometheusRule.engines.saturated.kvCacheUsage=95"}, "/prometheusRule/engines/saturated/kvCacheUsage"},
		{[]string{"--set", "prometheusRule.engines.ttftSLO.objective=99"}, "/prometheusRule/engines/ttftSLO/objective"},
		{[]string{"--set", "prometheusRule.engines.preemptions.window=5 minutes"}, "/prometheusRule/engines/preemptions/window"},
		{[]string{"--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.credentials.name=token"}, "serviceMonitor.credentials.key is required"},
		// Each once rendered: a base64 bundle encoded twice, a policy file never read, a
		// PodDisruptionBudget no drain can satisfy, a tag 1.10 deployed as 1.1.
		{[]string{"--set", "tls.mode=secret", "--set", "tls.secret.name=x", "--set", "tls.secret.caBundle=TFMwdExTMUNSVWRKVGc9PQ=="}, "tls.secret.caBundle must be the CA's PEM"},
		{[]string{"--set", "policyConfig.apiVersion=saturation-adapter.io/v1alpha1", "--set", "policyConfig.kind=PolicyConfig", "--set", "flags.config=/x.yaml"}, "policyConfig and flags.config exclude each other"},
		{[]string{"--set", "replicas=1"}, "podDisruptionBudget.minAvailable=1 with replicas=1 keeps every adapter"},
		{[]string{"--set", "podDisruptionBudget.minAvailable=2"}, "podDisruptionBudget.minAvailable=2 with replicas=2 keeps every adapter"},
		{[]string{"--set", "podDisruptionBudget.minAvailable=100%"}, "podDisruptionBudget.minAvailable=100% with replicas=2"},
		{[]string{"--set", "podDisruptionBudget.minAvailable=-1"}, "/podDisruptionBudget/minAvailable"},
		{[]string{"--set", "podDisruptionBudget.minAvailable=abc"}, "/podDisruptionBudget/minAvailable"},
		{[]string{"--set-json", "image.tag=1.10"}, "/image/tag"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := helmTemplate(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// docTable returns the body rows of the first Markdown table after the heading of
// the document doc (relative to the repository's root), each as its cells with
// surrounding spaces and backquotes trimmed.
func docTable(t *testing.T, doc, heading string) [][]string {
	t.Helper()
	data, err := os.ReadFile("../" + doc)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no heading %q", doc, heading)
	}
	var rows [][]string
	header := true
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 || !header {
				break
			}
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.Trim(strings.TrimSpace(c), "`"))
		}
		if header || strings.HasPrefix(cells[0], "---") {
			header = false
			continue
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatalf("%s %q has no table", doc, heading)
	}
	return rows
}

// TestChartNotes: the notes after an install name the image deployed, as the values
// give it (repository:tag, the chart's appVersion without a tag, repository@digest
// with a digest), and nothing else as the version.
func TestChartNotes(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"defaults", nil, "Image: saturation-adapter:dev\n"},
		{"tag", []string{"--set", "image.repository=registry.example.com/saturation-adapter", "--set", "image.tag=v0.1.0"},
			"Image: registry.example.com/saturation-adapter:v0.1.0\n"},
		{"digest", []string{"--set", "image.repository=registry.example.com/saturation-adapter", "--set", "image.tag=v0.1.0", "--set", "image.digest=" + digest},
			"Image: registry.example.com/saturation-adapter@" + digest + "\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"install", releaseName, chartDir, "--namespace", namespace, "--dry-run=client"}, tt.args...)
			out, err := run(tool(t, helmEnv), args...)
			if err != nil {
				t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
			}
			_, notes, ok := strings.Cut(string(out), "\nNOTES:\n")
			if !ok {
				t.Fatalf("helm install --dry-run printed no NOTES:\n%s", out)
			}
			first, _, _ := strings.Cut(notes, "\n\n")
			if !strings.Contains(first, tt.want) {
				t.Errorf("NOTES begin %q, want them to name the %s", first, tt.want)
			}
			if _, image, _ := strings.Cut(first, "Image: "); tt.name != "defaults" && strings.Contains(strings.SplitN(image, "\n", 2)[0], "dev") {
				t.Errorf("NOTES begin %q: the chart's appVersion dev is not what was deployed", first)
			}
		})
	}
}

// TestChartValuesDocumented: the Helm values table of docs/install.md names every
// top-level value of values.yaml, and every value it names exists ("`.name`" after
// "`serviceAccount.create`" is serviceAccount.name; "`flags.<flag …>`" stands for
// the flags, which TestChartFlags checks one by one).
func TestChartValuesDocumented(t *testing.T) {
	raw, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	quoted := regexp.MustCompile("`([^`]+)`")
	for _, row := range docTable(t, "docs/install.md", "## Helm values") {
		parent := ""
		for _, m := range quoted.FindAllStringSubmatch("`"+row[0]+"`", -1) {
			name := m[1]
			if strings.ContainsAny(name, "<> ") {
				name, _, _ = strings.Cut(name, ".")
				documented[name] = true
				continue
			}
			if strings.HasPrefix(name, ".") {
				name = parent + name
			}
			if i := strings.LastIndex(name, "."); i >= 0 {
				parent = name[:i]
			}
			documented[strings.Split(name, ".")[0]] = true
			var v any = values
			for _, part := range strings.Split(name, ".") {
				node, isMap := v.(map[string]any)
				next, ok := node[part]
				if !isMap || !ok {
					t.Errorf("docs/install.md's Helm values name %s, which values.yaml does not have", name)
					break
				}
				v = next
			}
		}
	}
	for key := range values {
		if !documented[key] {
			t.Errorf("values.yaml has %s, which docs/install.md's Helm values table does not name", key)
		}
	}
}

// flagKey is the chart value of an adapter flag: its name in lowerCamelCase
// (--scrape-ca-file: flags.scrapeCaFile).
func flagKey(flag string) string {
	parts := strings.Split(strings.TrimPrefix(flag, "--"), "-")
	for i := 1; i < len(parts); i++ {
		r := []rune(parts[i])
		r[0] = unicode.ToUpper(r[0])
		parts[i] = string(r)
	}
	return strings.Join(parts, "")
}

// sampleFlagValue returns a value for a flag that its schema (values.schema.json)
// accepts: a number where it wants digits, a duration, the first allowed value of an
// enum, true for a boolean, a URL or a label name where it wants one, and otherwise a
// string naming the key.
func sampleFlagValue(t *testing.T, schema map[string]any, key string) string {
	t.Helper()
	if schema == nil {
		t.Fatalf("values.schema.json has no flags.%s", key)
	}
	if enum, ok := schema["enum"].([]any); ok {
		return fmt.Sprint(enum[len(enum)-2]) // the last before null
	}
	types := fmt.Sprint(schema["type"])
	switch pattern, _ := schema["pattern"].(string); {
	case strings.Contains(pattern, "ms|s|m|h"):
		return "7s"
	case strings.HasPrefix(pattern, "^[0-9]+"):
		return "17"
	case strings.HasPrefix(pattern, "^https?://"):
		return "http://prometheus.example:9090"
	case strings.HasPrefix(pattern, "^[a-zA-Z_]"):
		return "sample_" + key
	case strings.Contains(types, "boolean"):
		return "true"
	}
	return "sample-" + key
}

// flagsDoc is the flags reference, whose first table lists the flags that have a
// chart value.
const flagsDoc, flagsHeading = "docs/flags.md", "## The adapter's own flags"

// TestChartFlags checks that every flag of the flags reference's first table has a
// chart value (and no value names a flag the table lacks), that each renders to
// --<flag>=<value>, and that unset values render nothing.
func TestChartFlags(t *testing.T) {
	raw, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Flags map[string]any `json:"flags"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	var docKeys, valueKeys []string
	for k := range values.Flags {
		valueKeys = append(valueKeys, k)
	}
	var schema struct {
		Properties struct {
			Flags struct {
				Properties map[string]map[string]any `json:"properties"`
			} `json:"flags"`
		} `json:"properties"`
	}
	rawSchema, err := os.ReadFile(chartDir + "/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(rawSchema, &schema); err != nil {
		t.Fatal(err)
	}
	defaults := mustHelmTemplate(t)
	for _, row := range docTable(t, flagsDoc, flagsHeading) {
		flag := row[0]
		if !regexp.MustCompile(`^--[a-z0-9-]+$`).MatchString(flag) {
			t.Fatalf("%s row %q: not a flag", flagsDoc, row)
		}
		key := flagKey(flag)
		docKeys = append(docKeys, key)
		t.Run(flag, func(t *testing.T) {
			if _, ok := values.Flags[key]; !ok {
				t.Fatalf("values.yaml has no flags.%s for %s", key, flag)
			}
			if strings.Contains(string(defaults), flag+"=") {
				t.Errorf("%s rendered with the default values: null must leave the adapter's default", flag)
			}
			set, value := "--set-string", sampleFlagValue(t, schema.Properties.Flags.Properties[key], key)
			if key == "namespaces" {
				set, value = "--set", "{ns-a,ns-b}"
			}
			objs := decode(t, "helm template", mustHelmTemplate(t, set, "flags."+key+"="+value))
			args := only[*appsv1.Deployment](t, objs, adapterName).Spec.Template.Spec.Containers[0].Args
			want := flag + "=" + strings.Trim(strings.ReplaceAll(value, "{", ""), "}")
			if !slices.Contains(args, want) {
				t.Errorf("args %q lack %q", args, want)
			}
		})
	}
	if diff := cmp.Diff(docKeys, valueKeys, sortStrings); diff != "" {
		t.Errorf("%s flags (-) and values.yaml flags (+) differ:\n%s", flagsDoc, diff)
	}

	// Numbers from a values file keep their form (Helm reads them as float64).
	f := t.TempDir() + "/values.yaml"
	if err := os.WriteFile(f, []byte("flags:\n  scrapeMaxBodyBytes: 4194304\n  kvCacheUsageSetPoint: 0.85\n  scrapeConcurrency: 128\n  scrapeInsecureSkipVerify: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := decode(t, "helm template", mustHelmTemplate(t, "-f", f))
	args := only[*appsv1.Deployment](t, objs, adapterName).Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--scrape-max-body-bytes=4194304", "--kv-cache-usage-set-point=0.85", "--scrape-concurrency=128", "--scrape-insecure-skip-verify=false"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
}

// TestChartPolicyConfig: policyConfig becomes a ConfigMap the adapter reads as
// --config from a directory mount (so ConfigMap updates reach it), and what the
// chart writes is a file the adapter accepts.
func TestChartPolicyConfig(t *testing.T) {
	f := t.TempDir() + "/values.yaml"
	var example map[string]any
	if err := yaml.Unmarshal(config.Example(), &example); err != nil {
		t.Fatal(err)
	}
	raw, err := yaml.Marshal(map[string]any{"policyConfig": example})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	objs := decode(t, "helm template", mustHelmTemplate(t, "-f", f))
	cm := only[*corev1.ConfigMap](t, objs, adapterName+"-policies")
	file, err := config.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("the chart's policy file does not parse: %v\n%s", err, cm.Data["config.yaml"])
	}
	if len(file.Policies) != 3 {
		t.Errorf("policies %d, want the example's 3", len(file.Policies))
	}
	d := only[*appsv1.Deployment](t, objs, adapterName)
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--config=/etc/saturation-adapter/policies/config.yaml") {
		t.Errorf("args %q lack --config", c.Args)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == "policies" && m.MountPath == "/etc/saturation-adapter/policies" && m.SubPath == "" {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("mounts %+v lack the policies directory", c.VolumeMounts)
	}
	// Without policyConfig: no ConfigMap, no --config.
	for _, o := range decode(t, "helm template", mustHelmTemplate(t)) {
		if cm, ok := o.(*corev1.ConfigMap); ok && strings.HasSuffix(cm.Name, "-policies") {
			t.Error("a policies ConfigMap without policyConfig")
		}
	}
}

// pemPlaceholder stands for a CA bundle where only its form matters.
const pemPlaceholder = "-----BEGIN CERTIFICATE-----MIIB-----END CERTIFICATE-----"
