package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
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
	externalmetrics "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/saturation-adapter/saturation-adapter/lab/hpa"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// The HPA model (lab/hpa) against the real controller: kube-controller-manager
// v1.37.2 reconciles two HPAs whose External metrics come from a scripted stand-in
// for the adapter, and the model is fed the same values at the same reconciles.

// scriptedSync is one reconcile as the stand-in saw it: the HPA controller asks
// for the metric once per reconcile, so the k-th request is the k-th reconcile.
type scriptedSync struct {
	at time.Time
	// spec and status are the scale target's spec.replicas and status.replicas
	// and ready its Ready pods when the request came: spec is the result of the
	// previous reconcile (nothing else writes it).
	spec, status, ready int32
}

// metricScript is the timeline of one External metric: the value (milli-units)
// served at each reconcile, or an error; the last entry repeats.
type metricScript struct {
	deployment string
	values     []int64 // -1: answer with an error
	syncs      []scriptedSync
}

// scriptedMetrics is a stand-in for the adapter: an HTTPS server of
// external.metrics.k8s.io/v1beta1 that answers each metric from its script and
// records, at each request, the scale of the metric's Deployment.
type scriptedMetrics struct {
	s       *stack.Stack
	mu      sync.Mutex
	scripts map[string]*metricScript
}

const scriptedService = "scripted-metrics"

func (m *scriptedMetrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const prefix = "/apis/external.metrics.k8s.io/v1beta1"
	path := strings.TrimSuffix(r.URL.Path, "/")
	if path == prefix { // discovery, which the aggregator's availability check reads
		names := []metav1.APIResource{}
		m.mu.Lock()
		for name := range m.scripts {
			names = append(names, metav1.APIResource{Name: name, Namespaced: true, Kind: "ExternalMetricValueList", Verbs: []string{"get"}})
		}
		m.mu.Unlock()
		writeJSON(w, http.StatusOK, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: "external.metrics.k8s.io/v1beta1", APIResources: names})
		return
	}
	parts := strings.Split(strings.TrimPrefix(path, prefix+"/"), "/") // namespaces/{ns}/{metric}
	if len(parts) != 3 || parts[0] != "namespaces" {
		http.NotFound(w, r)
		return
	}
	m.mu.Lock()
	sc := m.scripts[parts[2]]
	m.mu.Unlock()
	if sc == nil {
		writeStatus(w, http.StatusNotFound, "no such metric "+parts[2])
		return
	}
	now := time.Now()
	ctx := r.Context()
	sync := scriptedSync{at: now}
	if scale, err := m.s.Cluster.Client.AppsV1().Deployments(m.s.Namespace).GetScale(ctx, sc.deployment, metav1.GetOptions{}); err == nil {
		sync.spec, sync.status = scale.Spec.Replicas, scale.Status.Replicas
	}
	sync.ready = m.readyPods(ctx, sc.deployment)
	m.mu.Lock()
	k := len(sc.syncs)
	sc.syncs = append(sc.syncs, sync)
	v := sc.values[min(k, len(sc.values)-1)]
	m.mu.Unlock()
	if v < 0 {
		writeStatus(w, http.StatusInternalServerError, fmt.Sprintf("scripted error at reconcile %d", k))
		return
	}
	writeJSON(w, http.StatusOK, externalmetrics.ExternalMetricValueList{
		TypeMeta: metav1.TypeMeta{Kind: "ExternalMetricValueList", APIVersion: "external.metrics.k8s.io/v1beta1"},
		Items: []externalmetrics.ExternalMetricValue{{MetricName: parts[2], Timestamp: metav1.NewTime(now),
			Value: *resource.NewMilliQuantity(v, resource.DecimalSI)}},
	})
}

// readyPods counts the Running, Ready pods of deployment (terminating ones
// included) from the API server, as the controller's replica calculator counts
// them for a Value target (replica_calculator.go: getReadyPodsCount).
func (m *scriptedMetrics) readyPods(ctx context.Context, deployment string) int32 {
	pods, err := m.s.Cluster.Client.CoreV1().Pods(m.s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + deployment})
	if err != nil {
		return -1
	}
	var n int32
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeStatus(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Message: msg, Code: int32(code)})
}

// startScriptedMetrics serves m on a loopback port with a certificate from the
// cluster's serving CA and registers it as v1beta1.external.metrics.k8s.io
// behind an ExternalName Service localhost, then waits until the aggregator
// reports it Available.
func startScriptedMetrics(t *testing.T, s *stack.Stack, m *scriptedMetrics) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	host := scriptedService + "." + s.Namespace + ".svc"
	kp, err := s.Cluster.ServingCA.Serving(t.TempDir(), scriptedService, []string{host, "localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
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
		ObjectMeta: metav1.ObjectMeta{Name: scriptedService},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost", Ports: []corev1.ServicePort{{Name: "https", Port: port}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agg, err := aggregator.NewForConfig(s.Cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: stack.APIServiceName},
		Spec: apiregv1.APIServiceSpec{
			Service: &apiregv1.ServiceReference{Namespace: s.Namespace, Name: scriptedService, Port: ptr.To(port)},
			Group:   "external.metrics.k8s.io", Version: "v1beta1", CABundle: s.Cluster.ServingCA.CertPEM,
			GroupPriorityMinimum: 100, VersionPriority: 100,
		},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		a, err := agg.ApiregistrationV1().APIServices().Get(ctx, stack.APIServiceName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range a.Status.Conditions {
			if c.Type == apiregv1.Available {
				last = c.Reason + ": " + c.Message
				return c.Status == apiregv1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the scripted metrics server is not Available (last: %s): %v", last, err)
	}
}

// modelMetrics answers the model's External query with one value (or an error).
type modelMetrics struct{ value int64 }

func (m modelMetrics) GetResourceMetric(corev1.ResourceName, labels.Selector, string) (hpa.PodMetricsInfo, time.Time, error) {
	return nil, time.Time{}, errors.New("not scripted")
}

func (m modelMetrics) GetRawMetric(string, labels.Selector, labels.Selector) (hpa.PodMetricsInfo, time.Time, error) {
	return nil, time.Time{}, errors.New("not scripted")
}

func (m modelMetrics) GetObjectMetric(string, autoscalingv2.CrossVersionObjectReference, labels.Selector) (int64, time.Time, error) {
	return 0, time.Time{}, errors.New("not scripted")
}

func (m modelMetrics) GetExternalMetric(string, labels.Selector) ([]int64, time.Time, error) {
	if m.value < 0 {
		return nil, time.Time{}, errors.New("scripted error")
	}
	return []int64{m.value}, time.Time{}, nil
}

// readyPods returns n Running, Ready pods, as the model's view of a settled
// Deployment.
func readyPods(n int32, since time.Time) []*corev1.Pod {
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		st := metav1.NewTime(since)
		pods[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pod-" + strconv.Itoa(i)},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &st,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: st}}},
		}
	}
	return pods
}

// modelTrajectory runs the model of h from initial replicas through the
// scripted values at the reconcile times, each shifted by jitter(k): the
// replicas after each reconcile.
func modelTrajectory(t *testing.T, h *autoscalingv2.HorizontalPodAutoscaler, opts hpa.Options, initial int32, values []int64, times []time.Time, jitter func(k int) time.Duration) []int32 {
	t.Helper()
	c, err := hpa.New(h, opts)
	if err != nil {
		t.Fatalf("model of %s: %v", h.Name, err)
	}
	current := initial
	var out []int32
	for k, at := range times {
		now := at.Add(jitter(k))
		res := c.Sync(now, hpa.Scale{SpecReplicas: current, StatusReplicas: current}, readyPods(current, times[0].Add(-time.Hour)),
			modelMetrics{values[min(k, len(values)-1)]})
		current = res.DesiredReplicas
		out = append(out, current)
	}
	return out
}

// TestHPAModelAgreesWithController feeds the same scripted metric timelines to
// the real HPA controller and to lab/hpa's model and compares the replica counts
// reconcile by reconcile.
//
// Three HPAs run side by side, on Deployments of stub engines that are Ready at
// once:
//
//   - "demand": External AverageValue 1 with behavior: scale-up tolerance 0.05
//     (per-HPA, GA in 1.37), +2 pods per 11 s, no up window; scale-down window 20 s,
//     -50 % per 11 s; 1..6 replicas. The script crosses the tolerance band, climbs
//     under the Pods policy, reaches maxReplicas, fails (the HPA holds), and falls
//     under the window and the Percent policy.
//   - "saturation": External Value 1 (desired = ceil(ready pods × value)) with
//     behavior: up max(+100 %, +1 pod) per 11 s, down max(-3 pods, -50 %) per 11 s,
//     no windows; 0..8 replicas. A value of 0 takes it to zero (HPAScaleToZero,
//     beta and on in 1.37), where it keeps computing, and 2.5 brings it back
//     (ceil(value) at zero replicas, with the scale-down events still counting in
//     the scale-up limit).
//   - "legacy": External Value 1 without behavior: scale-up limit max(2 ×
//     current, 4) and the controller's 5 min downscale window.
//   - "unbounded": External Value 1 whose only scale-up policy allows
//     2147483647 pods per 11 s, which the API accepts (a value above 0) and
//     someone may write for "no limit". The controller adds it to the period's
//     starting replicas in int32 (calculateScaleUpLimitWithScalingRules), so the
//     limit wraps below the current count, and the controller raises it to the
//     current count: asked for 5 replicas, the HPA stays at 1. The model does the
//     same arithmetic; this checks that the controller does too.
//
// Timing: the model is fed the times the stand-in received each reconcile's
// request, a few milliseconds from the controller's own clock reads. The scripts
// keep every window and period (11 s, 20 s) away from a multiple of the 3 s sync
// period, and the test checks that the model's trajectory does not change when
// each reconcile's time moves by ±300 ms, so those milliseconds cannot decide a
// step. No step is compared against a wall-clock threshold.
func TestHPAModelAgreesWithController(t *testing.T) {
	t.Parallel()
	s := startStack(t, stack.Options{NoAdapter: true})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	// Values in milli-units (1000 = 1.0); the comments give what the controller
	// should do, which the test does not assume: it compares with the model.
	m := &scriptedMetrics{s: s, scripts: map[string]*metricScript{
		"scripted_demand": {deployment: "demand", values: []int64{
			1000, 1040, // within the band [0.9, 1.05] at 1 replica
			1070,                         // above it: 2
			4000, 4000, 4000, 4000, 4000, // +2 pods per 11 s
			9000, 9000, 9000, 9000, // up to maxReplicas 6
			-1, -1, // errors: hold
			1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, // the 20 s window, then -50 % per 11 s
			1000,
		}},
		"scripted_saturation": {deployment: "saturation", values: []int64{
			1000,                         // ready 2 × 1: within tolerance
			3000, 3000, 3000, 3000, 3000, // max(+100 %, +1 pod) per 11 s, then maxReplicas 8
			500,                                   // ready 8 × 0.5 = 4, max(-3 pods, -50 %) per 11 s
			0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // down to 0: scaled to zero, and kept computing
			2500, 2500, 2500, 2500, 2500, // from zero: ceil(2.5), under the policies
			2500,
		}},
		"scripted_legacy": {deployment: "legacy", values: []int64{
			1000, 5000, 5000, 5000, // no behavior: at most max(2 × current, 4)
			200, 200, 1000, // the 5 min downscale window holds
			1000,
		}},
		"scripted_unbounded": {deployment: "unbounded", values: []int64{
			1000, 5000, 5000, 5000, // a limit wrapped past int32: held at 1
			5000,
		}},
	}}
	startScriptedMetrics(t, s, m)

	tol := resource.MustParse("50m")
	zero, twenty := int32(0), int32(20)
	demand := stack.HPA("demand", "demand", "scripted_demand", map[string]string{"app": "demand"}, autoscalingv2.AverageValueMetricType, "1", 1, 6, 0)
	demand.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &zero, Tolerance: &tol,
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 11}}},
		ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &twenty,
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 50, PeriodSeconds: 11}}},
	}
	saturation := stack.HPA("saturation", "saturation", "scripted_saturation", map[string]string{"app": "saturation"}, autoscalingv2.ValueMetricType, "1", 0, 8, 0)
	saturation.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &zero, Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 11}, {Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 11}}},
		ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &zero, Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 3, PeriodSeconds: 11}, {Type: autoscalingv2.PercentScalingPolicy, Value: 50, PeriodSeconds: 11}}},
	}
	legacy := stack.HPA("legacy", "legacy", "scripted_legacy", map[string]string{"app": "legacy"}, autoscalingv2.ValueMetricType, "1", 1, 10, 0)
	legacy.Spec.Behavior = nil
	unbounded := stack.HPA("unbounded", "unbounded", "scripted_unbounded", map[string]string{"app": "unbounded"}, autoscalingv2.ValueMetricType, "1", 1, 10, 0)
	unbounded.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &zero,
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: math.MaxInt32, PeriodSeconds: 11}}},
	}
	initial := map[string]int32{"demand": 1, "saturation": 2, "legacy": 1, "unbounded": 1}
	hpas := []*autoscalingv2.HorizontalPodAutoscaler{demand, saturation, legacy, unbounded}
	for _, h := range hpas {
		dep := stack.EngineDeployment(h.Name, initial[h.Name], stubImage)
		if _, err := s.Cluster.Client.AppsV1().Deployments(s.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range hpas {
		sel := labels.SelectorFromSet(labels.Set{"app": h.Name})
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			return len(s.ReadyPods(sel)) == int(initial[h.Name]), nil
		}); err != nil {
			t.Fatalf("%s: pods not Ready: %v", h.Name, err)
		}
	}
	created := map[string]*autoscalingv2.HorizontalPodAutoscaler{}
	for _, h := range hpas {
		got, err := s.Cluster.Client.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, h, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created[h.Name] = got // as the API server defaulted it
	}

	// Wait for one reconcile past each script: its request shows the scale the
	// last scripted reconcile left.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, false, func(context.Context) (bool, error) {
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
	opts.SyncPeriod = 3 * time.Second // startStack's --horizontal-pod-autoscaler-sync-period
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, name := range []string{"scripted_demand", "scripted_saturation", "scripted_legacy", "scripted_unbounded"} {
		sc := m.scripts[name]
		h := created[sc.deployment].DeepCopy()
		hpa.SetDefaults(h) // idempotent over the API server's defaults; fills what the model needs
		n := len(sc.values)
		var real []int32
		var times []time.Time
		for k := range n {
			next := sc.syncs[k+1]
			if next.status != next.spec || next.ready != next.spec {
				t.Fatalf("%s reconcile %d: the Deployment had not settled by the next reconcile (spec %d, status %d, ready %d): the harness is too slow to compare",
					name, k, next.spec, next.status, next.ready)
			}
			real = append(real, next.spec)
			times = append(times, sc.syncs[k].at)
		}
		model := modelTrajectory(t, h, opts, initial[sc.deployment], sc.values, times, func(int) time.Duration { return 0 })
		var rows []string
		for k := range n {
			mark := ""
			if model[k] != real[k] {
				mark = "  <- differs"
			}
			value := "error"
			if sc.values[k] >= 0 {
				value = resource.NewMilliQuantity(sc.values[k], resource.DecimalSI).String()
			}
			rows = append(rows, fmt.Sprintf("  %2d  t=%6.2fs  value %6s  controller %d  model %d%s", k, times[k].Sub(times[0]).Seconds(),
				value, real[k], model[k], mark))
		}
		table := strings.Join(rows, "\n")
		t.Logf("%s:\n%s", name, table)
		for k := range n {
			if model[k] != real[k] {
				t.Errorf("%s: the model and the controller disagree from reconcile %d on:\n%s", name, k, table)
				break
			}
		}
		for _, shift := range []time.Duration{-300 * time.Millisecond, 300 * time.Millisecond} {
			jittered := modelTrajectory(t, h, opts, initial[sc.deployment], sc.values, times, func(k int) time.Duration {
				if k%2 == 1 {
					return -shift
				}
				return shift
			})
			for k := range n {
				if jittered[k] != model[k] {
					t.Errorf("%s: moving the reconciles by ±%v changes the model's reconcile %d (%d instead of %d): the script sits on a timing boundary",
						name, shift.Abs(), k, jittered[k], model[k])
					break
				}
			}
		}
	}
}
