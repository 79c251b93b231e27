package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	custommetrics "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	externalmetrics "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	resourcemetrics "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/saturation-adapter/saturation-adapter/lab/hpa"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// The HPA model against the real controller on the paths the first test does
// not take: pods that stay Running but not Ready through a cold start, and
// the Resource (the GPU-utilization baseline: nvidia.com/gpu, Utilization) and
// Pods (custom.metrics.k8s.io, AverageValue) metric paths. A scripted stand-in
// serves the three metrics APIs; at each request it records the scale and the
// pods as the API server has them, and the model replays the same reconciles
// with those pods and values.

// pathSync is one reconcile as the stand-in saw it.
type pathSync struct {
	at           time.Time
	spec, status int32
	pods         []*corev1.Pod
	value        int64   // the script's value at this reconcile
	perPod       []int64 // Resource and Pods: each served pod's value, in pods order (-1: not served)
	nearReadyTx  bool    // a pod's readiness changed within 500 ms of the request
}

// pathScript is the timeline of one HPA's metric: the value at each reconcile
// (the last repeats); the stand-in serves it to Ready pods and, for the
// Resource path, 0 to pods still starting (a GPU loading weights runs no
// kernel), none to them on the Pods path (an engine that does not answer).
type pathScript struct {
	deployment string
	kind       autoscalingv2.MetricSourceType
	values     []int64
	syncs      []pathSync
}

// pathMetrics serves external.metrics.k8s.io/v1beta1, metrics.k8s.io/v1beta1
// and custom.metrics.k8s.io/v1beta2 from scripts.
type pathMetrics struct {
	s       *stack.Stack
	mu      sync.Mutex
	scripts map[string]*pathScript // by metric name; resource scripts by Deployment
}

const (
	pathService  = "scripted-paths"
	gpuResource  = corev1.ResourceName("nvidia.com/gpu")
	podsMetric   = "scripted_pods"
	coldExternal = "scripted_cold"
)

func (m *pathMetrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch path {
	case "/apis/external.metrics.k8s.io/v1beta1":
		writeJSON(w, http.StatusOK, resourceList("external.metrics.k8s.io/v1beta1", coldExternal, "ExternalMetricValueList"))
		return
	case "/apis/metrics.k8s.io/v1beta1":
		writeJSON(w, http.StatusOK, resourceList("metrics.k8s.io/v1beta1", "pods", "PodMetrics"))
		return
	case "/apis/custom.metrics.k8s.io/v1beta2":
		writeJSON(w, http.StatusOK, resourceList("custom.metrics.k8s.io/v1beta2", "pods/"+podsMetric, "MetricValueList"))
		return
	}
	ns := ""
	var sc *pathScript
	switch {
	case strings.HasPrefix(path, "/apis/external.metrics.k8s.io/v1beta1/namespaces/"):
		parts := strings.Split(strings.TrimPrefix(path, "/apis/external.metrics.k8s.io/v1beta1/namespaces/"), "/")
		if len(parts) == 2 {
			ns, sc = parts[0], m.script(parts[1])
		}
	case strings.HasPrefix(path, "/apis/metrics.k8s.io/v1beta1/namespaces/"):
		parts := strings.Split(strings.TrimPrefix(path, "/apis/metrics.k8s.io/v1beta1/namespaces/"), "/")
		if len(parts) == 2 && parts[1] == "pods" {
			sel, err := labels.Parse(r.URL.Query().Get("labelSelector"))
			if err == nil {
				if app, ok := sel.RequiresExactMatch("app"); ok {
					ns, sc = parts[0], m.script("resource/"+app)
				}
			}
		}
	case strings.HasPrefix(path, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/"):
		parts := strings.Split(strings.TrimPrefix(path, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/"), "/")
		if len(parts) == 4 && parts[1] == "pods" && parts[2] == "*" {
			ns, sc = parts[0], m.script(parts[3])
		}
	}
	if sc == nil {
		writeStatus(w, http.StatusNotFound, "not scripted: "+path)
		return
	}
	now := time.Now()
	ctx := r.Context()
	sync := pathSync{at: now}
	if scale, err := m.s.Cluster.Client.AppsV1().Deployments(ns).GetScale(ctx, sc.deployment, metav1.GetOptions{}); err == nil {
		sync.spec, sync.status = scale.Spec.Replicas, scale.Status.Replicas
	}
	list, err := m.s.Cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + sc.deployment})
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, err.Error())
		return
	}
	for i := range list.Items {
		p := list.Items[i].DeepCopy()
		sync.pods = append(sync.pods, p)
		if c := readyCond(p); c != nil && now.Sub(c.LastTransitionTime.Time).Abs() < 500*time.Millisecond {
			sync.nearReadyTx = true
		}
	}
	slices.SortFunc(sync.pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	m.mu.Lock()
	k := len(sc.syncs)
	v := sc.values[min(k, len(sc.values)-1)]
	sync.value = v
	for _, p := range sync.pods {
		pv := int64(-1)
		switch {
		case p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning:
		case podIsReady(p):
			pv = v
		case sc.kind == autoscalingv2.ResourceMetricSourceType:
			pv = 0 // Running, loading its model: the GPU is idle
		}
		sync.perPod = append(sync.perPod, pv)
	}
	sc.syncs = append(sc.syncs, sync)
	m.mu.Unlock()
	ts := metav1.NewTime(now)
	switch sc.kind {
	case autoscalingv2.ExternalMetricSourceType:
		writeJSON(w, http.StatusOK, externalmetrics.ExternalMetricValueList{
			TypeMeta: metav1.TypeMeta{Kind: "ExternalMetricValueList", APIVersion: "external.metrics.k8s.io/v1beta1"},
			Items:    []externalmetrics.ExternalMetricValue{{MetricName: coldExternal, Timestamp: ts, Value: *resource.NewMilliQuantity(v, resource.DecimalSI)}},
		})
	case autoscalingv2.ResourceMetricSourceType:
		out := resourcemetrics.PodMetricsList{TypeMeta: metav1.TypeMeta{Kind: "PodMetricsList", APIVersion: "metrics.k8s.io/v1beta1"}}
		for i, p := range sync.pods {
			if sync.perPod[i] < 0 {
				continue
			}
			out.Items = append(out.Items, resourcemetrics.PodMetrics{
				ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns, Labels: p.Labels}, Timestamp: ts, Window: metav1.Duration{Duration: 15 * time.Second},
				Containers: []resourcemetrics.ContainerMetrics{{Name: "engine", Usage: corev1.ResourceList{
					gpuResource: *resource.NewMilliQuantity(sync.perPod[i], resource.DecimalSI)}}},
			})
		}
		writeJSON(w, http.StatusOK, out)
	case autoscalingv2.PodsMetricSourceType:
		out := custommetrics.MetricValueList{TypeMeta: metav1.TypeMeta{Kind: "MetricValueList", APIVersion: "custom.metrics.k8s.io/v1beta2"}}
		for i, p := range sync.pods {
			if sync.perPod[i] < 0 {
				continue
			}
			out.Items = append(out.Items, custommetrics.MetricValue{
				DescribedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name, APIVersion: "/v1"},
				Metric:          custommetrics.MetricIdentifier{Name: podsMetric}, Timestamp: ts, WindowSeconds: ptr.To(int64(15)),
				Value: *resource.NewMilliQuantity(sync.perPod[i], resource.DecimalSI),
			})
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func (m *pathMetrics) script(name string) *pathScript {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.scripts[name]
}

func resourceList(gv, resource, kind string) metav1.APIResourceList {
	return metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv,
		APIResources: []metav1.APIResource{{Name: resource, Namespaced: true, Kind: kind, Verbs: []string{"get", "list"}}}}
}

func readyCond(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// startPathMetrics serves m like startScriptedMetrics and registers it for the
// three metrics APIs.
func startPathMetrics(t *testing.T, s *stack.Stack, m *pathMetrics) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	host := pathService + "." + s.Namespace + ".svc"
	kp, err := s.Cluster.ServingCA.Serving(t.TempDir(), pathService, []string{host, "localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	if _, err := s.Cluster.Client.CoreV1().Services(s.Namespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: pathService},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost", Ports: []corev1.ServicePort{{Name: "https", Port: port}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agg, err := aggregator.NewForConfig(s.Cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, gv := range [][2]string{{"external.metrics.k8s.io", "v1beta1"}, {"metrics.k8s.io", "v1beta1"}, {"custom.metrics.k8s.io", "v1beta2"}} {
		name := gv[1] + "." + gv[0]
		if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, &apiregv1.APIService{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: apiregv1.APIServiceSpec{
				Service: &apiregv1.ServiceReference{Namespace: s.Namespace, Name: pathService, Port: ptr.To(port)},
				Group:   gv[0], Version: gv[1], CABundle: s.Cluster.ServingCA.CertPEM,
				GroupPriorityMinimum: 100, VersionPriority: 100,
			},
		}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			a, err := agg.ApiregistrationV1().APIServices().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range a.Status.Conditions {
				if c.Type == apiregv1.Available {
					return c.Status == apiregv1.ConditionTrue, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatalf("%s is not Available: %v", name, err)
		}
	}
}

// pathModelMetrics answers the model's queries with one recorded reconcile.
type pathModelMetrics struct{ sync pathSync }

func (m pathModelMetrics) perPod() hpa.PodMetricsInfo {
	out := hpa.PodMetricsInfo{}
	for i, p := range m.sync.pods {
		if m.sync.perPod[i] >= 0 {
			out[p.Name] = hpa.PodMetric{Value: m.sync.perPod[i], Timestamp: m.sync.at, Window: 15 * time.Second}
		}
	}
	return out
}

func (m pathModelMetrics) GetResourceMetric(corev1.ResourceName, labels.Selector, string) (hpa.PodMetricsInfo, time.Time, error) {
	out := m.perPod()
	if len(out) == 0 {
		return nil, time.Time{}, fmt.Errorf("no metrics returned from resource metrics API")
	}
	return out, m.sync.at, nil
}

func (m pathModelMetrics) GetRawMetric(string, labels.Selector, labels.Selector) (hpa.PodMetricsInfo, time.Time, error) {
	out := m.perPod()
	if len(out) == 0 {
		return nil, time.Time{}, fmt.Errorf("no metrics returned from custom metrics API")
	}
	return out, m.sync.at, nil
}

func (m pathModelMetrics) GetObjectMetric(string, autoscalingv2.CrossVersionObjectReference, labels.Selector) (int64, time.Time, error) {
	return 0, time.Time{}, fmt.Errorf("not scripted")
}

func (m pathModelMetrics) GetExternalMetric(string, labels.Selector) ([]int64, time.Time, error) {
	return []int64{m.sync.value}, m.sync.at, nil
}

// TestHPAModelAgreesOnColdStartsAndPodPaths runs three HPAs on Deployments
// whose new pods stay Running but not Ready for a 9 s cold start (three 3 s
// syncs), and compares the real controller's replicas with the model's at
// every reconcile, the model fed the pods (phase, readiness and its
// transition time) and the values the stand-in served:
//
//   - "cold": External Value 1: desired = ceil(Ready pods × value), so pods
//     still starting do not count; the script asks for more while they start.
//   - "gpu": Resource nvidia.com/gpu at averageUtilization 50 (the GPU
//     baseline): starting pods report 0 % (idle GPU); for a resource other than
//     cpu the controller counts them as ready pods with their 0.
//   - "pods": Pods AverageValue 1 (custom.metrics.k8s.io): starting pods
//     report nothing, so they are missing pods (counted at 0 in a scale-up, at
//     the target in a scale-down).
//
// Reconciles within 500 ms of a pod's readiness change are not compared (the
// controller's informer and the stand-in's list may disagree on that pod); the
// test requires that most are compared.
func TestHPAModelAgreesOnColdStartsAndPodPaths(t *testing.T) {
	t.Parallel()
	s := startStack(t, stack.Options{NoAdapter: true, ColdStart: 9 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	m := &pathMetrics{s: s, scripts: map[string]*pathScript{
		coldExternal: {deployment: "cold", kind: autoscalingv2.ExternalMetricSourceType, values: []int64{
			1000, 2500, 2500, 2500, 2500, 2500, 1500, 1500, 1500, 1500, 700, 700, 700, 700, 700, 700, 700,
		}},
		"resource/gpu": {deployment: "gpu", kind: autoscalingv2.ResourceMetricSourceType, values: []int64{
			500, 1000, 1000, 1000, 1000, 1000, 1000, 400, 400, 400, 400, 400, 400, 400, 400,
		}},
		podsMetric: {deployment: "pods", kind: autoscalingv2.PodsMetricSourceType, values: []int64{
			1000, 2600, 2600, 2600, 2600, 2600, 2600, 300, 300, 300, 300, 300, 300, 300, 300,
		}},
	}}
	startPathMetrics(t, s, m)

	zero := int32(0)
	behavior := func() *autoscalingv2.HorizontalPodAutoscalerBehavior {
		return &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &zero,
				Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 11}}},
			ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &zero,
				Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 11}}},
		}
	}
	cold := stack.HPA("cold", "cold", coldExternal, map[string]string{"app": "cold"}, autoscalingv2.ValueMetricType, "1", 1, 6, 0)
	cold.Spec.Behavior = behavior()
	fifty := int32(50)
	gpu := stack.HPA("gpu", "gpu", "unused", nil, autoscalingv2.ValueMetricType, "1", 1, 6, 0)
	gpu.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name: gpuResource, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: &fifty}}}}
	gpu.Spec.Behavior = behavior()
	pods := stack.HPA("pods", "pods", "unused", nil, autoscalingv2.ValueMetricType, "1", 1, 6, 0)
	one := resource.MustParse("1")
	pods.Spec.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: podsMetric}, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &one}}}}
	pods.Spec.Behavior = behavior()
	hpas := []*autoscalingv2.HorizontalPodAutoscaler{cold, gpu, pods}
	for _, h := range hpas {
		dep := stack.EngineDeployment(h.Name, 1, stubImage)
		if h.Name == "gpu" {
			q := resource.MustParse("1")
			dep.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{
				Requests: corev1.ResourceList{gpuResource: q}, Limits: corev1.ResourceList{gpuResource: q}}
		}
		if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range hpas {
		sel := labels.SelectorFromSet(labels.Set{"app": h.Name})
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			return len(s.ReadyPods(sel)) == 1, nil
		}); err != nil {
			t.Fatalf("%s: pod not Ready: %v", h.Name, err)
		}
	}
	created := map[string]*autoscalingv2.HorizontalPodAutoscaler{}
	for _, h := range hpas {
		got, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, h, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created[h.Name] = got
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 6*time.Minute, false, func(context.Context) (bool, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, sc := range m.scripts {
			if len(sc.syncs) < len(sc.values)+1 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		m.mu.Lock()
		for name, sc := range m.scripts {
			t.Logf("%s: %d of %d reconciles seen", name, len(sc.syncs), len(sc.values)+1)
		}
		m.mu.Unlock()
		t.Fatalf("the HPA controller stopped asking for a scripted metric: %v", err)
	}

	opts := hpa.DefaultOptions()
	opts.SyncPeriod = 3 * time.Second
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, name := range []string{coldExternal, "resource/gpu", podsMetric} {
		sc := m.scripts[name]
		h := created[sc.deployment].DeepCopy()
		hpa.SetDefaults(h)
		c, err := hpa.New(h, opts)
		if err != nil {
			t.Fatal(err)
		}
		var rows []string
		compared, notReadySeen := 0, 0
		current := int32(1)
		for k := range len(sc.values) {
			sy := sc.syncs[k]
			real := sc.syncs[k+1].spec
			res := c.Sync(sy.at, hpa.Scale{SpecReplicas: current, StatusReplicas: sy.status}, sy.pods, pathModelMetrics{sy})
			starting := 0
			for _, p := range sy.pods {
				if p.DeletionTimestamp == nil && !podIsReady(p) {
					starting++
				}
			}
			if starting > 0 {
				notReadySeen++
			}
			mark := ""
			switch {
			case sy.nearReadyTx:
				mark = "  (readiness changed within 500 ms: not compared)"
			case res.DesiredReplicas != real:
				mark = "  <- differs"
				t.Errorf("%s reconcile %d: controller %d, model %d", name, k, real, res.DesiredReplicas)
			default:
				compared++
			}
			rows = append(rows, fmt.Sprintf("  %2d  t=%6.2fs  value %5dm  pods %d (%d not Ready)  controller %d  model %d%s", k, sy.at.Sub(sc.syncs[0].at).Seconds(),
				sy.value, len(sy.pods), starting, real, res.DesiredReplicas, mark))
			current = real // the next reconcile starts from what the controller did
		}
		t.Logf("%s:\n%s", name, strings.Join(rows, "\n"))
		if compared < len(sc.values)*2/3 {
			t.Errorf("%s: only %d of %d reconciles compared", name, compared, len(sc.values))
		}
		if notReadySeen == 0 {
			t.Errorf("%s: no reconcile saw a pod Running but not Ready: the script does not test the cold start", name)
		}
	}
}
