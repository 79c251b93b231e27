// Package stack assembles the end-to-end environment: a loopback control plane, the
// adapter registered as the external metrics API, a node agent running engine emulators as
// pods, and helpers to build the workloads and HPAs the tests and the demo use.
package stack

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/controlplane"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/loadgen"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/nodeagent"
)

// Images the node agent knows how to run.
const (
	// EmulatorImage runs our engine emulator (lab emulator).
	EmulatorImage = "saturation-adapter/emulator"
	// SimImage runs github.com/llm-d/llm-d-inference-sim.
	SimImage = "llm-d/llm-d-inference-sim"
	// EnginePort is the port every engine pod serves on (and announces in its
	// prometheus.io/port annotation).
	EnginePort = 8000
	// Model is the model name the engines serve.
	Model = "e2e-model"
)

// Options configure a Stack.
type Options struct {
	// ToolsDir holds the control-plane binaries and llm-d-inference-sim
	// (E2E_TOOLS_DIR); BinDir holds adapter and lab (E2E_BIN_DIR).
	ToolsDir, BinDir string
	// Dir is the working directory; it must exist.
	Dir string
	// Namespace is created and watched by the node agent.
	Namespace string
	// HPASyncPeriod for the controller manager; default 15 s.
	HPASyncPeriod time.Duration
	// ColdStart of each pod's engine.
	ColdStart time.Duration
	// Adapter options; Binary defaults to BinDir/adapter. NoAdapter skips it.
	Adapter   AdapterOptions
	NoAdapter bool
	// Prometheus, when set, starts a real Prometheus scraping the namespace's
	// engines, and the adapter reads them from it (--source=prometheus).
	Prometheus *PrometheusOptions
	// EmulatorArgs are passed to every emulator before the container's args.
	EmulatorArgs []string
	// ExtraEngines adds images the node agent can run.
	ExtraEngines map[string]nodeagent.Engine
	// APIServerFlags are appended to kube-apiserver's (an audit policy and log).
	APIServerFlags []string
	Logf           func(format string, args ...any)
}

// EmulatorGateway returns gateway options for pools of EmulatorImage: exact prompt and
// output lengths through the emulator's prompt_tokens/output_tokens extension fields.
func EmulatorGateway(endpoints func() []string) loadgen.Options {
	return loadgen.Options{Endpoints: endpoints, Model: Model, PromptTokensField: "prompt_tokens", OutputTokensField: "output_tokens"}
}

// Stack is a running environment.
type Stack struct {
	Cluster    *controlplane.Cluster
	Prometheus *Prometheus
	Adapter    *Adapter
	Agent      *nodeagent.Agent
	Namespace  string

	pods   listersv1.PodLister
	cancel context.CancelFunc
}

// RepoRoot finds the repository root above the working directory (`go test`
// runs in the package's directory, make runs the demo in test/e2e).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "cmd", "adapter")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("repository root not found above %s", dir)
		}
	}
}

// DirsFromEnv returns the tools and bin directories from E2E_TOOLS_DIR and E2E_BIN_DIR
// (set by `make test-e2e` and `make demo`).
func DirsFromEnv() (tools, bin string, err error) {
	tools, bin = os.Getenv("E2E_TOOLS_DIR"), os.Getenv("E2E_BIN_DIR")
	if tools == "" || bin == "" {
		return "", "", fmt.Errorf("E2E_TOOLS_DIR and E2E_BIN_DIR must be set (run through `make test-e2e`)")
	}
	return tools, bin, nil
}

// Start starts the whole stack. On error, what was started is stopped.
func Start(ctx context.Context, o Options) (s *Stack, err error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	s = &Stack{Namespace: o.Namespace}
	defer func() {
		if err != nil {
			s.Stop()
			s = nil
		}
	}()
	if s.Cluster, err = controlplane.Start(ctx, controlplane.Options{
		ToolsDir: o.ToolsDir, Dir: o.Dir, HPASyncPeriod: o.HPASyncPeriod, Logf: o.Logf, ExtraAPIServerFlags: o.APIServerFlags,
	}); err != nil {
		return s, err
	}
	if o.Prometheus != nil {
		if s.Prometheus, err = StartPrometheus(ctx, s.Cluster, *o.Prometheus); err != nil {
			return s, err
		}
		o.Logf("prometheus at %s", s.Prometheus.URL)
		o.Adapter.ExtraArgs = append(s.Prometheus.AdapterArgs(), o.Adapter.ExtraArgs...)
	}
	if !o.NoAdapter {
		ao := o.Adapter
		if ao.Binary == "" {
			ao.Binary = filepath.Join(o.BinDir, "adapter")
		}
		if ao.ManifestsDir == "" {
			repo, err := RepoRoot()
			if err != nil {
				return s, err
			}
			ao.ManifestsDir = filepath.Join(repo, "manifests", "base")
		}
		if s.Adapter, err = StartAdapter(ctx, s.Cluster, ao); err != nil {
			return s, err
		}
		o.Logf("adapter registered as %s (port %d)", APIServiceName, s.Adapter.Port)
	}
	if err = s.Cluster.CreateNamespace(ctx, o.Namespace); err != nil {
		return s, err
	}
	engines := map[string]nodeagent.Engine{
		EmulatorImage: {
			Binary: filepath.Join(o.BinDir, "lab"),
			Args:   append([]string{"emulator", "--bind-address=$(POD_IP)", "--port=$(PORT)", "--served-model-name=" + Model}, o.EmulatorArgs...),
		},
		SimImage: {
			Binary:        filepath.Join(o.ToolsDir, "llm-d-inference-sim"),
			Args:          []string{"--port=$(PORT)", "--model=" + Model, "--force-dummy-tokenizer", "--mode=random"},
			AllInterfaces: true,
		},
	}
	for k, v := range o.ExtraEngines {
		engines[k] = v
	}
	if s.Agent, err = nodeagent.Start(ctx, nodeagent.Options{
		Client:    s.Cluster.Client,
		Namespace: o.Namespace,
		ColdStart: o.ColdStart,
		LogDir:    filepath.Join(o.Dir, "pods"),
		Logf:      o.Logf,
		Engines:   engines,
	}); err != nil {
		return s, err
	}
	ictx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	factory := informers.NewSharedInformerFactoryWithOptions(s.Cluster.Client, 0, informers.WithNamespace(o.Namespace))
	s.pods = factory.Core().V1().Pods().Lister()
	inf := factory.Core().V1().Pods().Informer()
	factory.Start(ictx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return s, fmt.Errorf("pod informer did not sync")
	}
	if s.Prometheus != nil {
		go s.Prometheus.discover(ictx, func() []*corev1.Pod {
			pods, _ := s.pods.List(labels.Everything())
			return pods
		}, o.Logf)
	}
	return s, nil
}

// Stop tears everything down: agent (engines), adapter, control plane.
func (s *Stack) Stop() {
	if s.cancel != nil {
		s.cancel()
	}
	if s.Agent != nil {
		s.Agent.Stop()
	}
	if s.Adapter != nil {
		s.Adapter.Process.Stop(5 * time.Second)
	}
	if s.Prometheus != nil {
		s.Prometheus.Stop()
	}
	if s.Cluster != nil {
		s.Cluster.Stop()
	}
}

// Logs returns the tails of the control-plane and adapter logs.
func (s *Stack) Logs(n int64) string {
	out := ""
	if s.Cluster != nil {
		out += s.Cluster.Logs(n)
	}
	if s.Adapter != nil {
		out += fmt.Sprintf("----- adapter (%s) -----\n%s\n", s.Adapter.Process.LogFile, s.Adapter.Process.Tail(n))
	}
	return out + s.Prometheus.Logs(n)
}

// ReadyPods returns the Ready, non-terminating pods matching selector, sorted by name.
func (s *Stack) ReadyPods(selector labels.Selector) []*corev1.Pod {
	pods, _ := s.pods.List(selector)
	var out []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" && podReady(p) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Endpoints returns a function listing the base URLs (http://ip:port) of the Ready pods
// matching selector: the gateway's view of the pool.
func (s *Stack) Endpoints(selector labels.Selector) func() []string {
	return func() []string {
		var out []string
		for _, p := range s.ReadyPods(selector) {
			port := EnginePort
			if v, err := strconv.Atoi(p.Annotations["prometheus.io/port"]); err == nil {
				port = v
			}
			out = append(out, "http://"+net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)))
		}
		return out
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// EngineDeployment returns a Deployment of engine pods labelled app=name, announcing their
// metrics port in prometheus.io/port, running image (EmulatorImage or SimImage) with args.
func EngineDeployment(name string, replicas int32, image string, args ...string) *appsv1.Deployment {
	lbl := map[string]string{"app": name}
	grace := int64(30)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: lbl,
					Annotations: map[string]string{
						"prometheus.io/scrape": "true",
						"prometheus.io/port":   strconv.Itoa(EnginePort),
						"prometheus.io/path":   "/metrics",
					},
				},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name:  "engine",
						Image: image,
						Args:  args,
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: EnginePort}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/health", Port: intstr.FromInt32(EnginePort),
						}}},
					}},
				},
			},
		},
	}
}

// HPA returns an autoscaling/v2 HPA on Deployment target driven by one External metric
// with the given selector. targetType is autoscalingv2.ValueMetricType or
// AverageValueMetricType; value a quantity such as "1" or "800m". Scale-up is immediate
// and scale-down waits downStabilization.
func HPA(name, target, metric string, selector map[string]string, targetType autoscalingv2.MetricTargetType, value string, minR, maxR int32, downStabilization time.Duration) *autoscalingv2.HorizontalPodAutoscaler {
	q := resource.MustParse(value)
	mt := autoscalingv2.MetricTarget{Type: targetType}
	if targetType == autoscalingv2.ValueMetricType {
		mt.Value = &q
	} else {
		mt.AverageValue = &q
	}
	zero := int32(0)
	down := int32(downStabilization / time.Second)
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
			MinReplicas:    &minR,
			MaxReplicas:    maxR,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ExternalMetricSourceType,
				External: &autoscalingv2.ExternalMetricSource{
					Metric: autoscalingv2.MetricIdentifier{Name: metric, Selector: &metav1.LabelSelector{MatchLabels: selector}},
					Target: mt,
				},
			}},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleUp: &autoscalingv2.HPAScalingRules{
					StabilizationWindowSeconds: &zero,
					Policies: []autoscalingv2.HPAScalingPolicy{
						{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
						{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
					},
				},
				ScaleDown: &autoscalingv2.HPAScalingRules{
					StabilizationWindowSeconds: &down,
					Policies: []autoscalingv2.HPAScalingPolicy{
						{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
					},
				},
			},
		},
	}
}
