// Package manifests holds the Kubernetes objects a user applies to run the adapter: the
// kustomize install (base/, components/, the variants beside them, monitoring/ and their
// renderings in rendered/) and, in its tests, the Helm chart in ../charts.
// The tests decode every rendering strictly (unknown or misspelt fields fail) and pin
// the settings that must not silently disappear: the pod's hardening, probes and
// resources, least-privilege RBAC, each TLS mode, the wiring APIService → Service → pod
// port, and that the chart renders the same objects as kustomize for the same settings.
package manifests

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

const (
	renderedPath      = "rendered/saturation-adapter.yaml"
	customMetricsPath = "rendered/custom-metrics.yaml"
	certManagerPath   = "rendered/saturation-adapter-cert-manager.yaml"
	insecurePath      = "rendered/saturation-adapter-insecure.yaml"
	monitoringPath    = "rendered/monitoring.yaml"
	namespace         = "saturation-adapter"
	adapterName       = "saturation-adapter"

	externalAPIService = "v1beta1.external.metrics.k8s.io"
	servingCertSecret  = "saturation-adapter-serving-cert"
	// metricsTokenSecret holds the token Prometheus scrapes /metrics with (monitoring/).
	metricsTokenSecret = "saturation-adapter-metrics-token"
)

// installs returns the rendered install variants: each is a whole install.
func installs() []string {
	return []string{renderedPath, customMetricsPath, certManagerPath, insecurePath}
}

// objectIDs returns "Kind namespace/name" of every object, sorted.
func objectIDs(t *testing.T, objs []any) []string {
	t.Helper()
	var ids []string
	for _, o := range objs {
		m, ok := o.(interface {
			metav1.Object
			GetObjectKind() schema.ObjectKind
		})
		if !ok {
			t.Fatalf("%T has no object metadata", o)
		}
		ids = append(ids, fmt.Sprintf("%s %s/%s", m.GetObjectKind().GroupVersionKind().Kind, m.GetNamespace(), m.GetName()))
	}
	slices.Sort(ids)
	return ids
}

// baseObjects are the objects of every install variant.
func baseObjects() []string {
	return []string{
		"APIService /v1beta1.external.metrics.k8s.io",
		"ClusterRole /saturation-adapter",
		"ClusterRole /saturation-adapter:apiservices",
		"ClusterRole /saturation-adapter:external-metrics-reader",
		"ClusterRoleBinding /saturation-adapter",
		"ClusterRoleBinding /saturation-adapter:apiservices",
		"ClusterRoleBinding /saturation-adapter:hpa-external-metrics-reader",
		"ClusterRoleBinding /saturation-adapter:system:auth-delegator",
		"Deployment saturation-adapter/saturation-adapter",
		"Namespace /saturation-adapter",
		"PodDisruptionBudget saturation-adapter/saturation-adapter",
		"RoleBinding kube-system/saturation-adapter:auth-reader",
		"Service saturation-adapter/saturation-adapter",
		"ServiceAccount saturation-adapter/saturation-adapter",
	}
}

func TestRenderedObjects(t *testing.T) {
	selfManagedTLS := []string{
		"Role saturation-adapter/saturation-adapter:serving-cert",
		"RoleBinding saturation-adapter/saturation-adapter:serving-cert",
	}
	sorted := func(groups ...[]string) []string {
		s := slices.Concat(groups...)
		slices.Sort(s)
		return s
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{renderedPath, sorted(baseObjects(), selfManagedTLS)},
		{customMetricsPath, sorted(baseObjects(), selfManagedTLS, []string{
			"APIService /v1beta1.custom.metrics.k8s.io",
			"APIService /v1beta2.custom.metrics.k8s.io",
			"ClusterRole /saturation-adapter:custom-metrics-reader",
			"ClusterRoleBinding /saturation-adapter:hpa-custom-metrics-reader",
		})},
		{certManagerPath, sorted(baseObjects(), []string{
			"Certificate saturation-adapter/saturation-adapter",
			"Certificate saturation-adapter/saturation-adapter-ca",
			"Issuer saturation-adapter/saturation-adapter-ca",
			"Issuer saturation-adapter/saturation-adapter-selfsigned",
		})},
		{insecurePath, sorted(baseObjects())},
		{monitoringPath, []string{
			"ClusterRole /saturation-adapter:metrics-reader",
			"ClusterRoleBinding /saturation-adapter:metrics-reader",
			"ConfigMap saturation-adapter/saturation-adapter-dashboard",
			"PrometheusRule saturation-adapter/saturation-adapter",
			"Secret saturation-adapter/saturation-adapter-metrics-token",
			"ServiceAccount saturation-adapter/saturation-adapter-metrics",
			"ServiceMonitor saturation-adapter/saturation-adapter",
		}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, objectIDs(t, decodeFile(t, tc.path))); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeploymentHardening(t *testing.T) {
	for _, path := range installs() {
		t.Run(path, func(t *testing.T) {
			checkHardening(t, only[*appsv1.Deployment](t, decodeFile(t, path), adapterName))
		})
	}
}

// checkHardening fails the test unless d keeps the install's hardening: two replicas,
// non-root, read-only root filesystem, no capabilities or privilege escalation,
// seccomp RuntimeDefault, HTTPS probes on /livez and /readyz, requests and a memory
// limit above GOMEMLIMIT, --cert-dir on a writable emptyDir, and the https port at
// --secure-port.
func checkHardening(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec

	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("replicas = %v, want at least 2 (the PDB keeps one up)", d.Spec.Replicas)
	}
	if pod.ServiceAccountName != d.Name {
		t.Errorf("serviceAccountName = %q, want %q", pod.ServiceAccountName, d.Name)
	}
	psc := pod.SecurityContext
	if psc == nil {
		t.Fatal("pod securityContext missing")
	}
	if !ptr.Deref(psc.RunAsNonRoot, false) {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext.seccompProfile = %+v, want RuntimeDefault", psc.SeccompProfile)
	}
	if len(pod.Containers) == 0 {
		t.Fatal("no containers")
	}
	emptyDirs := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil {
			emptyDirs[v.Name] = true
		}
	}

	for _, c := range pod.Containers {
		t.Run(c.Name, func(t *testing.T) {
			sc := c.SecurityContext
			if sc == nil {
				t.Fatal("securityContext missing")
			}
			if !ptr.Deref(sc.RunAsNonRoot, false) && !ptr.Deref(psc.RunAsNonRoot, false) {
				t.Error("runAsNonRoot is not true")
			}
			if uid := ptr.Deref(sc.RunAsUser, ptr.Deref(psc.RunAsUser, 0)); uid == 0 {
				t.Error("runAsUser is 0 or unset")
			}
			if !ptr.Deref(sc.ReadOnlyRootFilesystem, false) {
				t.Error("readOnlyRootFilesystem is not true")
			}
			if ptr.Deref(sc.AllowPrivilegeEscalation, true) {
				t.Error("allowPrivilegeEscalation is not false")
			}
			if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
				t.Errorf("capabilities = %+v, want drop [ALL] and add nothing", sc.Capabilities)
			}
			if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("seccompProfile = %+v, want RuntimeDefault", sc.SeccompProfile)
			}
			if ptr.Deref(sc.Privileged, false) {
				t.Error("privileged")
			}

			for _, p := range []struct {
				name  string
				probe *corev1.Probe
				path  string
			}{{"livenessProbe", c.LivenessProbe, "/livez"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
				if p.probe == nil || p.probe.HTTPGet == nil {
					t.Errorf("%s: want an httpGet probe", p.name)
					continue
				}
				g := p.probe.HTTPGet
				if g.Path != p.path || g.Scheme != corev1.URISchemeHTTPS || g.Port.String() != "https" {
					t.Errorf("%s = %s %s port %s, want HTTPS %s port https", p.name, g.Scheme, g.Path, g.Port.String(), p.path)
				}
			}

			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
					t.Errorf("resources.requests.%s missing", r)
				}
			}
			limit, ok := c.Resources.Limits[corev1.ResourceMemory]
			if !ok || limit.IsZero() {
				t.Fatal("resources.limits.memory missing")
			}
			for _, e := range c.Env {
				if e.Name != "GOMEMLIMIT" {
					continue
				}
				// Go spells binary units KiB/MiB/GiB; Kubernetes Ki/Mi/Gi.
				q, err := resource.ParseQuantity(strings.TrimSuffix(strings.Replace(e.Value, "iB", "i", 1), "B"))
				if err != nil {
					t.Fatalf("GOMEMLIMIT=%q: %v", e.Value, err)
				}
				if q.Cmp(limit) >= 0 {
					t.Errorf("GOMEMLIMIT=%s is not below limits.memory %s", e.Value, limit.String())
				}
			}

			// The self-signed certificate must land on a writable emptyDir.
			certDir := flagValue(c.Args, "--cert-dir")
			if certDir == "" {
				t.Fatal("no --cert-dir: the default path is on the read-only root filesystem")
			}
			mounted := false
			for _, m := range c.VolumeMounts {
				if m.MountPath == certDir && emptyDirs[m.Name] && !m.ReadOnly {
					mounted = true
				}
			}
			if !mounted {
				t.Errorf("--cert-dir=%s is not a writable emptyDir mount", certDir)
			}

			port := flagValue(c.Args, "--secure-port")
			if port == "" {
				port = "6443"
			}
			if got := containerPort(c, "https"); got != port {
				t.Errorf("container port https = %s, want --secure-port %s", got, port)
			}
		})
	}
}

func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func containerPort(c corev1.Container, name string) string {
	for _, p := range c.Ports {
		if p.Name == name {
			return fmt.Sprint(p.ContainerPort)
		}
	}
	return ""
}

func TestWiring(t *testing.T) {
	for _, path := range installs() {
		t.Run(path, func(t *testing.T) { checkWiring(t, decodeFile(t, path)) })
	}
}

// checkWiring fails the test unless objs wire APIService -> Service -> pod port and
// the PDB selects the pods.
func checkWiring(t *testing.T, objs []any) {
	t.Helper()
	d := only[*appsv1.Deployment](t, objs, adapterName)
	podLabels := labels.Set(d.Spec.Template.Labels)
	svc := only[*corev1.Service](t, objs, adapterName)
	api := only[*apiService](t, objs, "v1beta1.external.metrics.k8s.io")
	pdb := only[*policyv1.PodDisruptionBudget](t, objs, adapterName)

	if sel := labels.SelectorFromSet(svc.Spec.Selector); svc.Spec.Selector == nil || !sel.Matches(podLabels) {
		t.Errorf("Service selector %v does not match the pod labels %v", svc.Spec.Selector, podLabels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != "https" {
		t.Errorf("Service ports = %+v, want 443 -> https", svc.Spec.Ports)
	}

	s := api.Spec
	if s.Group != "external.metrics.k8s.io" || s.Version != "v1beta1" || s.GroupPriorityMinimum != 100 || s.VersionPriority != 100 {
		t.Errorf("APIService spec = %+v", s)
	}
	if s.Service == nil || s.Service.Namespace != svc.Namespace || s.Service.Name != svc.Name || ptr.Deref(s.Service.Port, 443) != 443 {
		t.Errorf("APIService service = %+v, want %s/%s port 443", s.Service, svc.Namespace, svc.Name)
	}
	if s.InsecureSkipTLSVerify && len(s.CABundle) > 0 {
		t.Errorf("APIService: insecureSkipTLSVerify beside a caBundle (the API server rejects it)")
	}

	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PDB minAvailable = %v, want 1", pdb.Spec.MinAvailable)
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(podLabels) {
		t.Errorf("PDB selector %v does not match the pod labels %v (%v)", pdb.Spec.Selector, podLabels, err)
	}
}

// TestCustomMetrics checks the opt-in custom.metrics.k8s.io variant: both versions
// point at the base install's Service, and the HPA controller may read them.
func TestCustomMetrics(t *testing.T) {
	objs := decodeFile(t, customMetricsPath)
	svc := only[*corev1.Service](t, objs, adapterName)
	for _, tc := range []struct {
		name     string
		version  string
		priority int32
	}{
		{"v1beta2.custom.metrics.k8s.io", "v1beta2", 200},
		{"v1beta1.custom.metrics.k8s.io", "v1beta1", 100},
	} {
		s := only[*apiService](t, objs, tc.name).Spec
		if s.Group != "custom.metrics.k8s.io" || s.Version != tc.version || s.GroupPriorityMinimum != 100 || s.VersionPriority != tc.priority {
			t.Errorf("%s spec = %+v", tc.name, s)
		}
		if s.Service == nil || s.Service.Namespace != svc.Namespace || s.Service.Name != svc.Name || ptr.Deref(s.Service.Port, 443) != 443 {
			t.Errorf("%s service = %+v, want %s/%s port 443", tc.name, s.Service, svc.Namespace, svc.Name)
		}
	}
	role := only[*rbacv1.ClusterRole](t, objs, "saturation-adapter:custom-metrics-reader")
	want := []rbacv1.PolicyRule{{APIGroups: []string{"custom.metrics.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}}
	if diff := cmp.Diff(want, role.Rules); diff != "" {
		t.Errorf("custom metrics reader rules (-want +got):\n%s", diff)
	}
	b := only[*rbacv1.ClusterRoleBinding](t, objs, "saturation-adapter:hpa-custom-metrics-reader")
	wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "horizontal-pod-autoscaler", Namespace: "kube-system"}}
	if b.RoleRef.Name != role.Name || b.RoleRef.Kind != "ClusterRole" {
		t.Errorf("roleRef = %+v, want ClusterRole %s", b.RoleRef, role.Name)
	}
	if diff := cmp.Diff(wantSubjects, b.Subjects); diff != "" {
		t.Errorf("subjects (-want +got):\n%s", diff)
	}
}

func TestRBAC(t *testing.T) {
	objs := decodeFile(t, renderedPath)
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: adapterName, Namespace: namespace}
	readOnly := []string{"get", "list", "watch"}
	// The adapter reads pods and HPAs through informers only (list and watch):
	// no verb it never uses.
	informer := []string{"list", "watch"}

	role := only[*rbacv1.ClusterRole](t, objs, adapterName)
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: informer},
		{APIGroups: []string{"autoscaling"}, Resources: []string{"horizontalpodautoscalers"}, Verbs: informer},
		// Events on HPAs the adapter warns about (pkg/advisor), as client-go's
		// recorder writes them.
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if diff := cmp.Diff(wantRules, role.Rules); diff != "" {
		t.Errorf("adapter ClusterRole rules (-want +got):\n%s", diff)
	}

	hpaRole := only[*rbacv1.ClusterRole](t, objs, "saturation-adapter:external-metrics-reader")
	wantHPARules := []rbacv1.PolicyRule{{APIGroups: []string{"external.metrics.k8s.io"}, Resources: []string{"*"}, Verbs: readOnly}}
	if diff := cmp.Diff(wantHPARules, hpaRole.Rules); diff != "" {
		t.Errorf("HPA reader ClusterRole rules (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		binding string
		roleRef rbacv1.RoleRef
		subject rbacv1.Subject
	}{
		{adapterName, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: adapterName}, sa},
		{"saturation-adapter:system:auth-delegator", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"}, sa},
		{"saturation-adapter:hpa-external-metrics-reader", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: hpaRole.Name},
			rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "horizontal-pod-autoscaler", Namespace: "kube-system"}},
	} {
		t.Run(tc.binding, func(t *testing.T) {
			b := only[*rbacv1.ClusterRoleBinding](t, objs, tc.binding)
			if diff := cmp.Diff(tc.roleRef, b.RoleRef); diff != "" {
				t.Errorf("roleRef (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]rbacv1.Subject{tc.subject}, b.Subjects); diff != "" {
				t.Errorf("subjects (-want +got):\n%s", diff)
			}
		})
	}

	rb := only[*rbacv1.RoleBinding](t, objs, "saturation-adapter:auth-reader")
	if rb.Namespace != "kube-system" {
		t.Errorf("auth-reader RoleBinding in namespace %q, want kube-system", rb.Namespace)
	}
	wantRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"}
	if diff := cmp.Diff(wantRef, rb.RoleRef); diff != "" {
		t.Errorf("auth-reader roleRef (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]rbacv1.Subject{sa}, rb.Subjects); diff != "" {
		t.Errorf("auth-reader subjects (-want +got):\n%s", diff)
	}
}

func TestExamples(t *testing.T) {
	upFast := &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: ptr.To[int32](30),
		SelectPolicy:               ptr.To(autoscalingv2.MaxChangePolicySelect),
		Policies:                   []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 60}},
	}
	downSlow := &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: ptr.To[int32](300),
		SelectPolicy:               ptr.To(autoscalingv2.MaxChangePolicySelect),
		Policies:                   []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 120}},
	}
	one := resource.MustParse("1")
	vllm := labels.Set{"app": "vllm"}

	deploy := only[*appsv1.Deployment](t, decodeFile(t, "examples/vllm-deployment.yaml"), "vllm")
	tmpl := deploy.Spec.Template
	if !labels.SelectorFromSet(vllm).Matches(labels.Set(tmpl.Labels)) {
		t.Errorf("vLLM pod labels %v do not match the HPAs' metric selector %v", tmpl.Labels, vllm)
	}
	if got := tmpl.Annotations["prometheus.io/port"]; got != "8000" {
		t.Errorf("vLLM prometheus.io/port = %q, want 8000", got)
	}
	if tmpl.Spec.TerminationGracePeriodSeconds == nil {
		t.Error("vLLM terminationGracePeriodSeconds unset")
	}
	if c := tmpl.Spec.Containers; len(c) == 0 || c[0].Lifecycle == nil || c[0].Lifecycle.PreStop == nil {
		t.Error("vLLM container has no preStop drain")
	}

	for _, tc := range []struct {
		file, name, metric string
		target             autoscalingv2.MetricTarget
	}{
		{"hpa-saturation.yaml", "vllm-saturation", policy.MetricSaturation,
			autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: &one}},
		{"hpa-demand-replicas.yaml", "vllm-demand-replicas", policy.MetricDemandReplicas,
			autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &one}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			h := only[*autoscalingv2.HorizontalPodAutoscaler](t, decodeFile(t, filepath.Join("examples", tc.file)), tc.name)
			want := autoscalingv2.MetricSpec{
				Type: autoscalingv2.ExternalMetricSourceType,
				External: &autoscalingv2.ExternalMetricSource{
					Metric: autoscalingv2.MetricIdentifier{Name: tc.metric, Selector: &metav1.LabelSelector{MatchLabels: vllm}},
					Target: tc.target,
				},
			}
			if diff := cmp.Diff([]autoscalingv2.MetricSpec{want}, h.Spec.Metrics, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(&autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: upFast, ScaleDown: downSlow}, h.Spec.Behavior); diff != "" {
				t.Errorf("behavior (-want +got):\n%s", diff)
			}
			if ref := h.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != deploy.Name {
				t.Errorf("scaleTargetRef = %+v, want the example Deployment %q", ref, deploy.Name)
			}
		})
	}
}
