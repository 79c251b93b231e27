package podselect_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"
	"github.com/saturation-adapter/saturation-adapter/pkg/hpaindex"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
)

var defaultOptions = podselect.Options{
	Port: 8000, Path: "/metrics", Scheme: "http",
	IdleTimeout: time.Minute,
	Serves:      func(m string) bool { return m == "llm_saturation" || m == "llm_queue_depth" },
}

// pod returns a Running, Ready pod with an IP.
func pod(ns, name, ip string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls, UID: types.UID(ns + "/" + name)},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

func with(p *corev1.Pod, change func(*corev1.Pod)) *corev1.Pod {
	change(p)
	return p
}

func annotated(p *corev1.Pod, kv ...string) *corev1.Pod {
	p.Annotations = map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		p.Annotations[kv[i]] = kv[i+1]
	}
	return p
}

var vllm = map[string]string{"app": "vllm"}

// cluster is the fixture of the Targets tests: vLLM pods in two namespaces,
// plus pods that must never become targets.
func cluster() []runtime.Object {
	return []runtime.Object{
		pod("llm", "vllm-0", "10.0.0.1", vllm),
		pod("llm", "vllm-1", "10.0.0.2", vllm),
		with(pod("llm", "vllm-pending", "", vllm), func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }),
		annotated(pod("llm", "vllm-badport", "10.0.0.3", vllm), podselect.AnnotationPort, "abc"),
		pod("llm", "sglang-0", "10.0.0.4", map[string]string{"app": "sglang"}),
		pod("other", "vllm-0", "10.0.1.1", vllm),
	}
}

// start builds a Selection with opts over informers of a fake clientset holding
// objs, registered and synced as the adapter does it.
func start(t *testing.T, opts podselect.Options, clk *clocktesting.FakeClock, namespaces []string, objs ...runtime.Object) (*fake.Clientset, *podselect.Informers, *podselect.Selection) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client := fake.NewClientset(objs...)
	watches := testfixture.TrackWatches(client)
	inf, err := podselect.NewInformers(client, namespaces)
	if err != nil {
		t.Fatal(err)
	}
	sel := podselect.New(opts, inf.Pods(), clk)
	if err := inf.AddHPAHandler(sel.HPAHandler()); err != nil {
		t.Fatal(err)
	}
	if err := inf.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Tests change pods and HPAs next: every informer (one per namespace)
	// must be watching, or a delete is lost.
	factories := max(len(namespaces), 1)
	watches.Wait(t, "pods", factories)
	watches.Wait(t, "horizontalpodautoscalers", factories)
	return client, inf, sel
}

func newClock() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
}

// targetNames returns "namespace/name" of each target, sorted: Targets gives
// no order.
func targetNames(ts []scrape.Target) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.Pod.String())
	}
	slices.Sort(out)
	return out
}

func TestMemberTarget(t *testing.T) {
	hostNetwork := func(p *corev1.Pod) { p.Spec.HostNetwork = true }
	tests := []struct {
		name    string
		pod     *corev1.Pod
		opts    func(*podselect.Options)
		want    string
		wantErr string
		// hidden must not appear in the error: it reaches API callers.
		hidden string
	}{
		{name: "defaults", pod: pod("llm", "p", "10.0.0.1", nil), want: "http://10.0.0.1:8000/metrics"},
		{
			name: "all overridden",
			pod: annotated(pod("llm", "p", "10.0.0.1", nil),
				podselect.AnnotationPort, "9090", podselect.AnnotationPath, "/stats/prometheus", podselect.AnnotationScheme, "https"),
			want: "https://10.0.0.1:9090/stats/prometheus",
		},
		{name: "port only", pod: annotated(pod("llm", "p", "10.0.0.1", nil), podselect.AnnotationPort, "65535"), want: "http://10.0.0.1:65535/metrics"},
		{name: "path with query kept verbatim", pod: annotated(pod("llm", "p", "10.0.0.1", nil), podselect.AnnotationPath, "/metrics?format=text"), want: "http://10.0.0.1:8000/metrics?format=text"},
		// llama.cpp's router mode loads the model /metrics?model= names
		// (ggml-org/llama.cpp#23096): a scrape never asks it to.
		{name: "llama.cpp router model: never autoload", pod: annotated(pod("llm", "p", "10.0.0.1", nil), podselect.AnnotationPath, "/metrics?model=qwen3-8b"),
			want: "http://10.0.0.1:8000/metrics?autoload=false&model=qwen3-8b"},
		{name: "llama.cpp router model: autoload=true overridden", pod: annotated(pod("llm", "p", "10.0.0.1", nil), podselect.AnnotationPath, "/metrics?model=qwen3-8b&autoload=true"),
			want: "http://10.0.0.1:8000/metrics?autoload=false&model=qwen3-8b"},
		{name: "llama.cpp router model: autoload=false kept verbatim", pod: annotated(pod("llm", "p", "10.0.0.1", nil), podselect.AnnotationPath, "/metrics?model=a&autoload=false"),
			want: "http://10.0.0.1:8000/metrics?model=a&autoload=false"},
		{name: "IPv6 pod IP", pod: pod("llm", "p", "fd00:10::1", nil), want: "http://[fd00:10::1]:8000/metrics"},
		{name: "IPv6 pod IP with port", pod: annotated(pod("llm", "p", "fd00:10::1", nil), podselect.AnnotationPort, "9090"), want: "http://[fd00:10::1]:9090/metrics"},
		{name: "port not a number", pod: annotated(pod("llm", "p", "10.0.0.1", nil), podselect.AnnotationPort, "abc"), wantErr: `prometheus.io/port="abc"`},
		{name: "port 0", pod: annotated(pod("llm", "p", "10.0.0.1", nil), podselect.AnnotationPort, "0"), wantErr: `prometheus.io/port="0"`},
		{name: "port 70000", pod: annotated(pod("llm", "p", "10.0.0.1", nil), podselect.AnnotationPort, "70000"), wantErr: `prometheus.io/port="70000"`},
		{name: "port empty", pod: annotated(pod("llm", "p", "10.0.0.1", nil), podselect.AnnotationPort, ""), wantErr: `prometheus.io/port=""`},
		{name: "path without leading slash", pod: annotated(pod("llm", "p", "10.0.0.1", nil), podselect.AnnotationPath, "metrics?token=s3cret"),
			wantErr: `prometheus.io/path must be an absolute path`, hidden: "s3cret"},
		{name: "1 MB port annotation", pod: annotated(pod("llm", "p", "10.0.0.1", nil), podselect.AnnotationPort, strings.Repeat("9", 1<<20)),
			wantErr: `prometheus.io/port="99999`, hidden: strings.Repeat("9", 64)},
		{name: "host network", pod: with(pod("llm", "p", "192.168.1.10", nil), hostNetwork), wantErr: "uses the host network and is not scraped"},
		{name: "host network allowed", pod: with(pod("llm", "p", "192.168.1.10", nil), hostNetwork),
			opts: func(o *podselect.Options) { o.ScrapeHostNetwork = true }, want: "http://192.168.1.10:8000/metrics"},
		{name: "scheme ftp", pod: annotated(pod("llm", "p", "10.0.0.1", nil), podselect.AnnotationScheme, "ftp"), wantErr: `prometheus.io/scheme="ftp"`},
		{name: "no IP yet", pod: pod("llm", "p", "", nil), wantErr: "llm/p has no IP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := defaultOptions
			if tt.opts != nil {
				tt.opts(&opts)
			}
			_, _, d := start(t, opts, newClock(), nil, tt.pod)
			m, found, err := d.Member("llm", "p")
			if err != nil || !found {
				t.Fatalf("Member() = %v, %v", found, err)
			}
			got, err := m.Target, m.TargetErr
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("TargetFor() = %+v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), "llm/p") {
					t.Errorf("error %q does not name the pod llm/p", err)
				}
				if tt.hidden != "" && strings.Contains(err.Error(), tt.hidden) {
					t.Errorf("error %q shows %q", err, tt.hidden)
				}
				if len(err.Error()) > 200 {
					t.Errorf("error of %d bytes, want a short one", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatalf("TargetFor() error: %v", err)
			}
			want := scrape.Target{Pod: types.NamespacedName{Namespace: "llm", Name: "p"}, UID: "llm/p", URL: tt.want}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("TargetFor() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScrapeableCounted(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	running := func(change func(*corev1.Pod)) *corev1.Pod { return with(pod("llm", "p", "10.0.0.1", nil), change) }
	tests := []struct {
		name                      string
		pod                       *corev1.Pod
		wantScrapeable, wantCount bool
	}{
		{name: "running and ready", pod: running(func(*corev1.Pod) {}), wantScrapeable: true, wantCount: true},
		{name: "pending", pod: running(func(p *corev1.Pod) { p.Status.Phase, p.Status.PodIP = corev1.PodPending, "" })},
		{name: "pending with IP", pod: running(func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending })},
		{name: "succeeded", pod: running(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })},
		{name: "failed", pod: running(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })},
		{name: "running without IP", pod: running(func(p *corev1.Pod) { p.Status.PodIP = "" })},
		{name: "terminating", pod: running(func(p *corev1.Pod) { p.DeletionTimestamp = &now })},
		{
			name: "ready false", wantScrapeable: true,
			pod: running(func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }),
		},
		{
			name: "ready unknown", wantScrapeable: true,
			pod: running(func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionUnknown }),
		},
		{
			name: "no ready condition", wantScrapeable: true,
			pod: running(func(p *corev1.Pod) {
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}
			}),
		},
		{name: "no conditions", wantScrapeable: true, pod: running(func(p *corev1.Pod) { p.Status.Conditions = nil })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := podselect.Scrapeable(tt.pod); got != tt.wantScrapeable {
				t.Errorf("Scrapeable() = %v, want %v", got, tt.wantScrapeable)
			}
			if got := podselect.Counted(tt.pod); got != tt.wantCount {
				t.Errorf("Counted() = %v, want %v", got, tt.wantCount)
			}
		})
	}
}

// TestTouchTargets walks one Discovery through a sequence of requests and clock
// steps; each step checks the scrape set that results.
func TestInterestTargets(t *testing.T) {
	clk := newClock()
	_, _, d := start(t, defaultOptions, clk, nil, cluster()...)
	vllmSel := labels.SelectorFromSet(vllm)

	type touch struct {
		ns  string
		sel labels.Selector
	}
	steps := []struct {
		name    string
		advance time.Duration
		touch   []touch
		want    []string
	}{
		{name: "nothing asked", want: []string{}},
		{
			// Pending and badly annotated pods are left out; the other namespace too.
			name:  "selector touched in llm",
			touch: []touch{{"llm", vllmSel}},
			want:  []string{"llm/vllm-0", "llm/vllm-1"},
		},
		{name: "exactly IdleTimeout later", advance: time.Minute, want: []string{"llm/vllm-0", "llm/vllm-1"}},
		{name: "past IdleTimeout", advance: time.Nanosecond, want: []string{}},
		{
			name:  "same selector in two namespaces",
			touch: []touch{{"llm", vllmSel}, {"other", vllmSel}},
			want:  []string{"llm/vllm-0", "llm/vllm-1", "other/vllm-0"},
		},
		{
			name:    "other namespace touched again",
			advance: 40 * time.Second,
			touch:   []touch{{"other", vllmSel}},
			want:    []string{"llm/vllm-0", "llm/vllm-1", "other/vllm-0"},
		},
		{name: "llm idles out alone", advance: 40 * time.Second, want: []string{"other/vllm-0"}},
		{
			// Two selectors matching the same pods give each target once.
			name:  "overlapping selectors",
			touch: []touch{{"llm", vllmSel}, {"llm", labels.Everything()}},
			want:  []string{"llm/sglang-0", "llm/vllm-0", "llm/vllm-1", "other/vllm-0"},
		},
		{name: "all idle", advance: 2 * time.Minute, want: []string{}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			clk.Step(s.advance)
			for _, tc := range s.touch {
				d.RecordInterest(tc.ns, tc.sel)
			}
			if diff := cmp.Diff(s.want, targetNames(d.Targets())); diff != "" {
				t.Errorf("Targets() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTargetsURL(t *testing.T) {
	_, _, d := start(t, defaultOptions, newClock(), nil, annotated(pod("llm", "vllm-0", "10.0.0.1", vllm), podselect.AnnotationPort, "9000"))
	d.RecordInterest("llm", labels.SelectorFromSet(vllm))
	members, err := d.Members("llm", labels.SelectorFromSet(vllm))
	if err != nil || len(members) != 1 {
		t.Fatalf("Members() = %v, %v", members, err)
	}
	// The scheduled and the on-demand scrapes of a pool share its queue.
	pool := members[0].Target.Pool
	want := []scrape.Target{{Pod: types.NamespacedName{Namespace: "llm", Name: "vllm-0"}, UID: "llm/vllm-0", URL: "http://10.0.0.1:9000/metrics", Pool: pool}}
	if diff := cmp.Diff(want, d.Targets()); diff != "" {
		t.Errorf("Targets() (-want +got):\n%s", diff)
	}
	other, err := d.Members("llm", labels.Everything())
	if err != nil || len(other) != 1 {
		t.Fatalf("Members() = %v, %v", other, err)
	}
	if pool == "" || other[0].Target.Pool == pool {
		t.Errorf("pools %q and %q: want distinct, non-empty keys for distinct selectors", pool, other[0].Target.Pool)
	}
}

func hpa(ns, name string, metric autoscalingv2.MetricSpec) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MaxReplicas:    10,
			Metrics:        []autoscalingv2.MetricSpec{metric},
		},
	}
}

func external(name string, sel *metav1.LabelSelector) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{
		Type: autoscalingv2.ExternalMetricSourceType,
		External: &autoscalingv2.ExternalMetricSource{
			Metric: autoscalingv2.MetricIdentifier{Name: name, Selector: sel},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: resource.NewMilliQuantity(800, resource.DecimalSI)},
		},
	}
}

func TestHPATargets(t *testing.T) {
	vllmSel := &metav1.LabelSelector{MatchLabels: vllm}
	cpu := autoscalingv2.MetricSpec{
		Type: autoscalingv2.ResourceMetricSourceType,
		Resource: &autoscalingv2.ResourceMetricSource{
			Name:   corev1.ResourceCPU,
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: new(int32(80))},
		},
	}
	tests := []struct {
		name string
		hpas []runtime.Object
		want []string
	}{
		{name: "our metric", hpas: []runtime.Object{hpa("llm", "h", external("llm_saturation", vllmSel))}, want: []string{"llm/vllm-0", "llm/vllm-1"}},
		{name: "our metric upper-case", hpas: []runtime.Object{hpa("llm", "h", external("LLM_Saturation", vllmSel))}, want: []string{"llm/vllm-0", "llm/vllm-1"}},
		{name: "another of our metrics", hpas: []runtime.Object{hpa("llm", "h", external("llm_queue_depth", vllmSel))}, want: []string{"llm/vllm-0", "llm/vllm-1"}},
		{name: "other metric name", hpas: []runtime.Object{hpa("llm", "h", external("requests_per_second", vllmSel))}, want: []string{}},
		{name: "resource metric", hpas: []runtime.Object{hpa("llm", "h", cpu)}, want: []string{}},
		{
			name: "matchExpressions",
			hpas: []runtime.Object{hpa("llm", "h", external("llm_saturation", &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"vllm", "sglang"}}},
			}))},
			want: []string{"llm/sglang-0", "llm/vllm-0", "llm/vllm-1"},
		},
		{
			name: "invalid selector is skipped",
			hpas: []runtime.Object{
				hpa("llm", "bad", external("llm_saturation", &metav1.LabelSelector{
					MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}},
				})),
				hpa("other", "good", external("llm_saturation", vllmSel)),
			},
			want: []string{"other/vllm-0"},
		},
		{name: "no selector means the whole namespace", hpas: []runtime.Object{hpa("other", "h", external("llm_saturation", nil))}, want: []string{"other/vllm-0"}},
		{name: "HPA's namespace only", hpas: []runtime.Object{hpa("other", "h", external("llm_saturation", vllmSel))}, want: []string{"other/vllm-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			_, _, d := start(t, defaultOptions, clk, nil, append(cluster(), tt.hpas...)...)
			if diff := cmp.Diff(tt.want, targetNames(d.Targets())); diff != "" {
				t.Errorf("Targets() (-want +got):\n%s", diff)
			}
			// HPA interest does not idle out.
			clk.Step(time.Hour)
			if diff := cmp.Diff(tt.want, targetNames(d.Targets())); diff != "" {
				t.Errorf("Targets() an hour later (-want +got):\n%s", diff)
			}
		})
	}
}

func podNames(pods []*corev1.Pod) []string {
	out := []string{}
	for _, p := range pods {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

func memberNames(members []podselect.Member) []string {
	out := []string{}
	for _, m := range members {
		out = append(out, m.Pod.Name)
	}
	slices.Sort(out)
	return out
}

// TestMembersCache checks that Selection.Members, which reuses a selector's list
// until the namespace's informer generation changes, sees pods added and
// relabelled through the API.
func TestMembersCache(t *testing.T) {
	ctx := context.Background()
	client, inf, d := start(t, defaultOptions, newClock(), nil, cluster()...)
	sel := labels.SelectorFromSet(vllm)

	first, err := d.Members("llm", sel)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"vllm-0", "vllm-1", "vllm-badport", "vllm-pending"}, memberNames(first)); diff != "" {
		t.Fatalf("Members() (-want +got):\n%s", diff)
	}
	// The informers deliver the initial adds after the caches report synced, so
	// the generations may still move for a while: wait until the one pod of
	// namespace other has been counted, and until two calls in a row reuse the
	// cached slice.
	poll := func(cond func() bool) error {
		return wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
	}
	if err := poll(func() bool { return inf.Pods().Generation("other") > 0 }); err != nil {
		t.Fatalf("Generation(other) stayed 0 with a pod in namespace other: %v", err)
	}
	if err := poll(func() bool {
		a, _ := d.Members("llm", sel)
		b, _ := d.Members("llm", sel)
		return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
	}); err != nil {
		t.Errorf("Members() never reused its cached slice with no pod change: %v", err)
	}

	gen := inf.Pods().Generation("llm")
	otherGen := inf.Pods().Generation("other")
	steps := []struct {
		name   string
		change func() error
		want   []string
	}{
		{
			name: "pod added",
			change: func() error {
				_, err := client.CoreV1().Pods("llm").Create(ctx, pod("llm", "vllm-2", "10.0.0.5", vllm), metav1.CreateOptions{})
				return err
			},
			want: []string{"vllm-0", "vllm-1", "vllm-2", "vllm-badport", "vllm-pending"},
		},
		{
			name: "pod relabelled out",
			change: func() error {
				_, err := client.CoreV1().Pods("llm").Update(ctx, pod("llm", "vllm-0", "10.0.0.1", map[string]string{"app": "retired"}), metav1.UpdateOptions{})
				return err
			},
			want: []string{"vllm-1", "vllm-2", "vllm-badport", "vllm-pending"},
		},
		{
			name: "pod relabelled in",
			change: func() error {
				_, err := client.CoreV1().Pods("llm").Update(ctx, pod("llm", "sglang-0", "10.0.0.4", vllm), metav1.UpdateOptions{})
				return err
			},
			want: []string{"sglang-0", "vllm-1", "vllm-2", "vllm-badport", "vllm-pending"},
		},
		{
			name:   "pod deleted",
			change: func() error { return client.CoreV1().Pods("llm").Delete(ctx, "vllm-pending", metav1.DeleteOptions{}) },
			want:   []string{"sglang-0", "vllm-1", "vllm-2", "vllm-badport"},
		},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := s.change(); err != nil {
				t.Fatal(err)
			}
			var got []string
			err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				members, err := d.Members("llm", sel)
				if err != nil {
					return false, err
				}
				got = memberNames(members)
				return slices.Equal(got, s.want), nil
			})
			if err != nil {
				t.Errorf("Members() never became %q, last %q: %v", s.want, got, err)
			}
			if g := inf.Pods().Generation("llm"); g == gen {
				t.Errorf("Generation(llm) = %d, unchanged after a pod change", g)
			} else {
				gen = g
			}
		})
	}
	if g := inf.Pods().Generation("other"); g != otherGen {
		t.Errorf("Generation(other) = %d, want %d: no pod of namespace other changed", g, otherGen)
	}
}

func TestWatchedNamespaces(t *testing.T) {
	objs := []runtime.Object{
		pod("a", "vllm-0", "10.0.0.1", vllm),
		pod("b", "vllm-0", "10.0.1.1", vllm),
		hpa("a", "h", external("llm_saturation", &metav1.LabelSelector{MatchLabels: vllm})),
		hpa("b", "h", external("llm_saturation", &metav1.LabelSelector{MatchLabels: vllm})),
	}
	_, inf, d := start(t, defaultOptions, newClock(), []string{"a"}, objs...)

	t.Run("pods of a watched namespace", func(t *testing.T) {
		pods, err := inf.Pods().List("a", labels.Everything())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"vllm-0"}, podNames(pods)); diff != "" {
			t.Errorf("List(a) (-want +got):\n%s", diff)
		}
	})
	t.Run("pods of another namespace", func(t *testing.T) {
		pods, err := inf.Pods().List("b", labels.Everything())
		if err == nil || !strings.Contains(err.Error(), "not watched") || !strings.Contains(err.Error(), `"b"`) {
			t.Errorf("List(b) = %d pods, %v; want an error saying namespace \"b\" is not watched", len(pods), err)
		}
	})
	t.Run("HPAs", func(t *testing.T) {
		sel := labels.SelectorFromSet(vllm)
		if diff := cmp.Diff([]string{"h"}, d.HPAsFor("a", "llm_saturation", sel)); diff != "" {
			t.Errorf("HPAsFor(a) (-want +got):\n%s", diff)
		}
		if got := d.HPAsFor("b", "llm_saturation", sel); len(got) != 0 {
			t.Errorf("HPAsFor(b) = %q, want none: namespace b is not watched", got)
		}
	})
	t.Run("targets", func(t *testing.T) {
		d.RecordInterest("b", labels.Everything())
		if diff := cmp.Diff([]string{"a/vllm-0"}, targetNames(d.Targets())); diff != "" {
			t.Errorf("Targets() (-want +got):\n%s", diff)
		}
		if _, err := d.Members("b", labels.Everything()); err == nil || !strings.Contains(err.Error(), "not watched") {
			t.Errorf("Members(b) error = %v, want one saying it is not watched", err)
		}
	})
}

// HPAsFor finds the HPAs a request answers by namespace, metric (any case) and
// canonical selector; a deleted HPA is reported once to the index's
// subscribers so that its self-metric series can go.
func TestHPAsForAndDeletion(t *testing.T) {
	var (
		mu      sync.Mutex
		deleted []types.NamespacedName
	)
	opts := defaultOptions
	opts.HPAs = hpaindex.New()
	opts.HPAs.Subscribe(func(old, cur *hpaindex.HPA) {
		if cur == nil {
			mu.Lock()
			deleted = append(deleted, old.Key)
			mu.Unlock()
		}
	})
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "vllm", "tier": "prod"}}
	client, _, d := start(t, opts, newClock(), nil,
		hpa("llm", "a", external("LLM_Saturation", sel)),
		hpa("llm", "b", external("llm_saturation", sel)),
		hpa("llm", "c", external("llm_saturation", &metav1.LabelSelector{MatchLabels: vllm})),
		hpa("other", "a", external("llm_saturation", sel)),
	)
	// The request's selector is parsed from its query: the same requirements in
	// another order are the same selector.
	req, err := labels.Parse("tier=prod,app=vllm")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, d.HPAsFor("llm", "llm_saturation", req)); diff != "" {
		t.Errorf("HPAsFor (-want +got):\n%s", diff)
	}
	if got := d.HPAsFor("llm", "llm_demand_replicas", req); len(got) != 0 {
		t.Errorf("HPAsFor another metric = %q, want none", got)
	}
	if err := client.AutoscalingV2().HorizontalPodAutoscalers("llm").Delete(context.Background(), "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(deleted) > 0 && len(d.HPAsFor("llm", "llm_saturation", req)) == 1, nil
	}); err != nil {
		t.Fatalf("deleted HPA still found, or not reported: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []types.NamespacedName{{Namespace: "llm", Name: "b"}}; !slices.Equal(deleted, want) {
		t.Errorf("deletions seen by a subscriber of the index: %v, want %v", deleted, want)
	}
}

// A pod re-created under the same name is a new member (a new UID), so its
// readings never come from its predecessor.
func TestMemberKeyedByUID(t *testing.T) {
	ctx := context.Background()
	client, _, d := start(t, defaultOptions, newClock(), nil, pod("llm", "vllm-0", "10.0.0.1", vllm))
	m, _, err := d.Member("llm", "vllm-0")
	if err != nil || m.UID != "llm/vllm-0" || m.Target.UID != m.UID {
		t.Fatalf("Member = %+v, %v", m, err)
	}
	if err := client.CoreV1().Pods("llm").Delete(ctx, "vllm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := pod("llm", "vllm-0", "10.0.0.9", vllm)
	again.UID = "second"
	if _, err := client.CoreV1().Pods("llm").Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		m, _, err = d.Member("llm", "vllm-0")
		return err == nil && m.UID == "second", err
	}); err != nil {
		t.Fatalf("Member after re-creation = %+v: %v", m, err)
	}
	if m.Target.UID != "second" {
		t.Errorf("target UID %q, want the new pod's", m.Target.UID)
	}
	if _, found, err := d.Member("llm", "gone"); found || err != nil {
		t.Errorf("Member(gone) = %v, %v; want not found and no error", found, err)
	}
}

// A host-network pod's IP is its node's: it never becomes a target unless the
// operator allows it.
func TestHostNetworkPodsNotScraped(t *testing.T) {
	hostPod := with(pod("llm", "vllm-hostnet", "192.168.0.5", vllm), func(p *corev1.Pod) { p.Spec.HostNetwork = true })
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprintf("allowed %v", allow), func(t *testing.T) {
			opts := defaultOptions
			opts.ScrapeHostNetwork = allow
			_, _, d := start(t, opts, newClock(), nil, pod("llm", "vllm-0", "10.0.0.1", vllm), hostPod.DeepCopy())
			d.RecordInterest("llm", labels.SelectorFromSet(vllm))
			want := []string{"llm/vllm-0"}
			if allow {
				want = append(want, "llm/vllm-hostnet")
			}
			if diff := cmp.Diff(want, targetNames(d.Targets())); diff != "" {
				t.Errorf("Targets() (-want +got):\n%s", diff)
			}
		})
	}
}

// The generation of a namespace moves with the cache's write itself: once the
// cache shows a pod re-created under the same name, the generation has moved,
// so the member list cached with the old pod's UID is not served again.
// Counted by an event handler, the generation lagged the cache: a request in
// between got the old UID, and with it the old pod's reading (under -race this
// failed within a few dozen rounds).
func TestGenerationMovesWithTheCache(t *testing.T) {
	ctx := context.Background()
	client, inf, d := start(t, defaultOptions, newClock(), nil)
	sel := labels.SelectorFromSet(vllm)
	pods := client.CoreV1().Pods("llm")
	for i := range 200 {
		uid := types.UID(fmt.Sprintf("uid-%d", i))
		p := pod("llm", "vllm-0", "10.0.0.1", vllm)
		p.UID = uid
		if i > 0 {
			// The old pod's list is cached; then the pod is replaced at once.
			if _, err := d.Members("llm", sel); err != nil {
				t.Fatal(err)
			}
			if err := pods.Delete(ctx, "vllm-0", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// As soon as the cache has the new pod, ask.
		for deadline := time.Now().Add(10 * time.Second); ; goruntime.Gosched() {
			if got, err := inf.Pods().Get("llm", "vllm-0"); err == nil && got.UID == uid {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the cache never showed the new pod", i)
			}
		}
		members, err := d.Members("llm", sel)
		if err != nil {
			t.Fatal(err)
		}
		if len(members) != 1 || members[0].UID != uid || members[0].Target.UID != uid {
			t.Fatalf("round %d: members %+v, want the new pod %s: the old pod's member list was served", i, members, uid)
		}
	}
}

// A metric with a gateway input puts the gateway's pods in the scrape set (the
// HPA's namespace when the input names none), at the input's port and path, and
// MembersWith builds the same targets for a request.
func TestGatewayTargets(t *testing.T) {
	epp := map[string]string{"app": "epp"}
	opts := defaultOptions
	opts.Gateway = func(m string) *podselect.Gateway {
		if m != "llm_saturation" {
			return nil
		}
		return &podselect.Gateway{Selector: labels.SelectorFromSet(epp), Override: podselect.Override{Port: 9090}}
	}
	objs := append(cluster(), pod("llm", "epp-0", "10.0.2.1", epp), pod("other", "epp-0", "10.0.3.1", epp),
		hpa("llm", "h", external("llm_saturation", &metav1.LabelSelector{MatchLabels: vllm})))
	_, _, d := start(t, opts, newClock(), nil, objs...)
	ts := d.Targets()
	if diff := cmp.Diff([]string{"llm/epp-0", "llm/vllm-0", "llm/vllm-1"}, targetNames(ts)); diff != "" {
		t.Errorf("Targets() (-want +got):\n%s", diff)
	}
	for _, tg := range ts {
		if tg.Pod.Name == "epp-0" && tg.URL != "http://10.0.2.1:9090/metrics" {
			t.Errorf("gateway target URL %s, want the override's port", tg.URL)
		}
	}
	ms, err := d.MembersWith("llm", labels.SelectorFromSet(epp), podselect.Override{Port: 9090, Path: "/epp/metrics"})
	if err != nil || len(ms) != 1 || ms[0].Target.URL != "http://10.0.2.1:9090/epp/metrics" {
		t.Errorf("MembersWith = %+v, %v; want epp-0 at the override", ms, err)
	}
	// Without the override the same selector's members use the annotations and defaults.
	if ms, _ := d.Members("llm", labels.SelectorFromSet(epp)); len(ms) != 1 || ms[0].Target.URL != "http://10.0.2.1:8000/metrics" {
		t.Errorf("Members = %+v", ms)
	}
}
