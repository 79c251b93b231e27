package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/saturation-adapter/saturation-adapter/cmd/adapter/app"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
)

// spec is what the driver hands the adapter process: the PKI, the policy file
// and the pools, as a JSON file.
type spec struct {
	// ClientCA verifies the driver's client certificate (as the aggregator's
	// front-proxy CA would).
	ClientCA string
	// Dir holds the serving certificate and the kubeconfig.
	Dir string
	// Config is the policy file (--config); none when empty.
	Config string
	// Interval is --scrape-interval.
	Interval time.Duration
	// Metric is the External metric each pool's HPA names.
	Metric string
	Pools  []pool
	// GroupSizes are the sizes of the pools the pods' g<size> labels make
	// (groupLabels), besides their pool's app label.
	GroupSizes []int
	// PrometheusURL, when set, makes the adapter read the engines' series
	// from this Prometheus (--source=prometheus), which scrapes them every
	// PromInterval (--prometheus-scrape-interval).
	PrometheusURL string
	PromInterval  time.Duration
}

// pool is one HPA's pods: a namespace, the value of their app label, their
// addresses ("ip:port") and the index of its first pod in its namespace.
type pool struct {
	Namespace string
	App       string
	Addrs     []string
	First     int
}

// runAdapter runs the assembled adapter server (app.Options → Config →
// Complete().New() → Run, as the adapter command does) over a fake clientset
// holding the spec's pods and HPAs, writes the address it serves on to stdout
// and serves until stdin closes or SIGTERM.
func runAdapter(args []string) error {
	fs := flag.NewFlagSet(roleAdapter, flag.ContinueOnError)
	specFile := fs.String("spec", "", "the driver's spec file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	data, err := os.ReadFile(*specFile)
	if err != nil {
		return err
	}
	var sp spec
	if err := json.Unmarshal(data, &sp); err != nil {
		return fmt.Errorf("%s: %w", *specFile, err)
	}
	n := 0
	for _, p := range sp.Pools {
		n += len(p.Addrs)
	}
	if err := raiseFileLimit(uint64(n + 1024)); err != nil {
		return err
	}
	pods, hpas, err := objects(sp)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(sp.Dir, "kubeconfig")
	// Never contacted: the fake clientset replaces the client.
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n"), 0o600); err != nil {
		return err
	}
	o := app.NewOptions()
	o.Server.SecureServing.Listener = ln
	o.Server.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port
	o.Server.SecureServing.ServerCert.CertDirectory = sp.Dir
	o.Server.Authentication.RemoteKubeConfigFileOptional = true
	o.Server.Authentication.ClientCert.ClientCA = sp.ClientCA
	o.Server.Authorization.RemoteKubeConfigFileOptional = true
	o.Kubeconfig = kubeconfig
	o.Scrape.Interval = sp.Interval
	o.Scoring.ConfigFile = sp.Config
	if sp.PrometheusURL != "" {
		o.Source = app.SourcePrometheus
		o.Prometheus.URL = sp.PrometheusURL
		o.Prometheus.ScrapeInterval = sp.PromInterval
	}
	o.Complete()
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	cfg.Client = newClient(pods, hpas)
	s, err := cfg.Complete().New()
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // until the driver closes stdin or exits
		cancel()
	}()
	if _, err := fmt.Println(ln.Addr().String()); err != nil {
		return err
	}
	return s.Run(ctx)
}

// newClient returns a fake clientset holding the HPAs in its object tracker
// and serving the pods from the list itself: its reactor answers every pod
// list with pods and every pod watch with a watch that never sends, so that
// the informer's cache holds the list's own pods (the fake's tracker would
// keep a second, deep copy of 10,000 pods in the adapter's process, which a
// real API server keeps in its own).
func newClient(pods *corev1.PodList, hpas []runtime.Object) *fake.Clientset {
	c := fake.NewClientset(hpas...)
	c.PrependReactor("list", "pods", func(clienttesting.Action) (bool, runtime.Object, error) { return true, pods, nil })
	c.PrependWatchReactor("pods", func(clienttesting.Action) (bool, watch.Interface, error) { return true, watch.NewFake(), nil })
	return c
}

// objects returns the spec's pods (Running, Ready, labelled app=<pool>, their
// metrics port annotated) and one HPA per pool on the spec's metric. The pods
// carry a spec like a vLLM Deployment's (one GPU container with its args,
// probes, ports and a shared-memory volume), so that the informer cache holds
// what a real cluster's would.
func objects(sp spec) (*corev1.PodList, []runtime.Object, error) {
	pods := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	var hpas []runtime.Object
	for _, pl := range sp.Pools {
		for i, addr := range pl.Addrs {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, nil, err
			}
			pods.Items = append(pods.Items, *vllmPod(pl.Namespace, podName(pl, i), pl.App, host, port, groupLabels(pl, i, sp.GroupSizes)))
		}
		hpas = append(hpas, &autoscalingv2.HorizontalPodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: pl.Namespace, Name: pl.App},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: pl.App},
				MinReplicas:    ptr.To[int32](1), MaxReplicas: int32(2 * len(pl.Addrs)),
				Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
					Metric: autoscalingv2.MetricIdentifier{Name: sp.Metric, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": pl.App}}},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: resource.NewQuantity(1, resource.DecimalSI)},
				}}},
			},
		})
	}
	return pods, hpas, nil
}

// vllmPod returns a pod of a vLLM Deployment serving on host:port, with the
// extra labels.
func vllmPod(namespace, name, app, host, port string, extra map[string]string) *corev1.Pod {
	lbls := map[string]string{"app": app, "pod-template-hash": "7c9f8d6b5d"}
	for k, v := range extra {
		lbls[k] = v
	}
	portNum, _ := strconv.Atoi(port)
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(portNum))}},
			PeriodSeconds: 10, FailureThreshold: 3}
	}
	start := metav1.NewTime(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name, UID: types.UID(namespace + "-" + name),
			Labels:      lbls,
			Annotations: map[string]string{podselect.AnnotationPort: port, "prometheus.io/scrape": "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-7c9f8d6b5d",
				UID: types.UID(app + "-rs"), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			CreationTimestamp: start,
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "vllm",
				Image: "vllm/vllm-openai:v0.10.2",
				Args: []string{"--model", "Qwen/Qwen3-4B-Instruct-2507-FP8", "--port", port, "--max-num-seqs", "64",
					"--gpu-memory-utilization", "0.9", "--max-model-len", "32768"},
				Env:   []corev1.EnvVar{{Name: "HF_HOME", Value: "/cache/huggingface"}, {Name: "VLLM_LOGGING_LEVEL", Value: "INFO"}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(portNum), Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("32Gi"), "nvidia.com/gpu": resource.MustParse("1")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Gi"), "nvidia.com/gpu": resource.MustParse("1")},
				},
				VolumeMounts:   []corev1.VolumeMount{{Name: "shm", MountPath: "/dev/shm"}, {Name: "cache", MountPath: "/cache"}},
				ReadinessProbe: probe("/health"), LivenessProbe: probe("/health"),
			}},
			Volumes: []corev1.Volume{
				{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("8Gi"))}}},
				{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			NodeName:                      "gpu-node",
			ServiceAccountName:            "default",
			TerminationGracePeriodSeconds: ptr.To[int64](120),
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: host, PodIPs: []corev1.PodIP{{IP: host}}, HostIP: "10.0.0.1", StartTime: &start,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: start},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: start},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: start},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: start},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "vllm", Ready: true, Image: "vllm/vllm-openai:v0.10.2",
				ImageID: "docker.io/vllm/vllm-openai@sha256:0d5d0c1f0b3c9a1e5e9d0f8c7b6a5e4d3c2b1a0f9e8d7c6b5a4e3d2c1b0a9f8e", ContainerID: "containerd://" + name,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}}}},
		},
	}
}
