// Package nodeagent stands in for the kubelet in end-to-end tests. For each pod of one
// namespace it assigns a unique loopback IP (127.x.y.z) through the status subresource,
// marks the pod Running, starts the pod's engine as a local process bound to that IP after
// a configurable cold start, and marks the pod Ready once the engine answers its readiness
// path. When the pod is deleted it marks it not Ready, waits for the engine's running and
// waiting requests to drain (up to the pod's termination grace period), stops the process
// and removes the pod, as the kubelet would.
package nodeagent

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/controlplane"
)

// Engine says how to run the containers of one image as a local process.
type Engine struct {
	// Binary is the executable to start.
	Binary string
	// Args are passed to Binary after expanding $(POD_IP), $(PORT), $(POD_NAME) and
	// $(POD_NAMESPACE). The container's own args are appended after these, expanded the same.
	Args []string
	// ReadyPath is polled with GET until it answers 2xx; default the container's
	// readinessProbe httpGet path, else /health.
	ReadyPath string
	// AllInterfaces marks an engine that cannot bind to one address. The agent then gives
	// it a free port ($(PORT) expands to that port) and forwards the pod's IP and port to it.
	AllInterfaces bool
	// InCluster runs the container as its pod would run on a kubelet, for a program that
	// talks to the API server (the adapter's image): the pod's volumes mounted at their
	// paths, its service-account token among them, KUBERNETES_SERVICE_HOST/PORT, the
	// container's env and user (see sandbox.go). Binary stands for the image's
	// entrypoint. A deleted pod's process gets SIGTERM, without the engine drain.
	InCluster bool
	// RootFS, with InCluster, is the image's filesystem unpacked: the container runs
	// chrooted in it (through an overlay, so the directory is never written), read-only
	// when its securityContext says readOnlyRootFilesystem, and Binary is the
	// entrypoint's path inside it. Without it the container sees this machine's root.
	RootFS string
}

// Options configure an Agent.
type Options struct {
	Client    kubernetes.Interface
	Namespace string
	// Engines maps a container image to how it runs. Pods whose first container's image is
	// not listed are marked Failed.
	Engines map[string]Engine
	// Resolve, when set, is asked for an image Engines does not list, as a kubelet pulls
	// an image it has not seen (an image reference by digest, resolved to the binary
	// unpacked from that image); false: unknown, the pod is marked Failed. It may be
	// called more than once for one image.
	Resolve func(image string) (Engine, bool)
	// ColdStart is how long a pod stays Running-but-not-Ready before its engine starts
	// (model download and load in real life).
	ColdStart time.Duration
	// LogDir receives one log file per engine process.
	LogDir string
	// Subnet is the second octet of the pod IPs, 127.<Subnet>.y.z; 0 leases one
	// (LeaseSubnet) until Stop, so that agents of concurrent tests and test processes
	// never share addresses. A caller that sets it holds its lease.
	Subnet byte
	// NodeName is the Node the agent registers and binds its pods to, as the scheduler
	// would (the API server deletes unbound pods at once, without a grace period, so
	// draining needs bound pods); default "e2e-node".
	NodeName string
	// DefaultPort is used when a pod has neither a prometheus.io/port annotation nor a
	// container port; default 8000.
	DefaultPort int
	// APIServer is the API server's host:port, which pods of InCluster engines get as
	// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (a kubelet gives the
	// kubernetes Service's ClusterIP, which nothing here serves).
	APIServer string
	// Services makes the agent also stand in for kube-proxy and the EndpointSlice
	// controller for the Services of Namespace (see services.go). Their ClusterIPs must
	// be loopback addresses (controlplane's Options.ServiceCIDR).
	Services bool
	Logf     func(format string, args ...any)
}

// Pod is the agent's view of one pod it runs.
type Pod struct {
	Name  string
	UID   types.UID
	IP    string
	Port  int
	Ready bool
	// PID is the engine process id, 0 before it starts.
	PID int
}

// Agent runs the pods of one namespace.
type Agent struct {
	o      Options
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	pods   map[types.UID]*podRun
	nextIP int

	services *serviceProxy
	// lease is the subnet the agent leased (Options.Subnet 0), released after Stop.
	lease *SubnetLease
}

type podRun struct {
	name        string
	uid         types.UID
	ip          string
	port        int
	ready       bool
	proc        *controlplane.Process
	fwd         *forwarder
	terminating bool
	// inCluster is the pod's Engine.InCluster.
	inCluster bool
	cancel    context.CancelFunc
	done      chan struct{}
}

// Start starts an agent; it runs until Stop (ctx bounds only the start).
func Start(ctx context.Context, o Options) (_ *Agent, err error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.DefaultPort == 0 {
		o.DefaultPort = 8000
	}
	if o.NodeName == "" {
		o.NodeName = "e2e-node"
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: o.NodeName, Labels: map[string]string{"kubernetes.io/hostname": o.NodeName}},
	}
	created, err := o.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("registering node %s: %w", o.NodeName, err)
	}
	if err == nil {
		// Report the node Ready once, for people looking with kubectl; nothing in the
		// control plane run here (no node lifecycle controller) depends on it.
		now := metav1.Now()
		created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "NodeAgentReady",
			Message: "e2e node agent (kubelet stand-in)", LastHeartbeatTime: now, LastTransitionTime: now}}
		created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
		if _, err := o.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("reporting node %s Ready: %w", o.NodeName, err)
		}
	}
	if err := os.MkdirAll(o.LogDir, 0o700); err != nil {
		return nil, err
	}
	var lease *SubnetLease
	if o.Subnet == 0 {
		if lease, err = LeaseSubnet(); err != nil {
			return nil, err
		}
		o.Subnet = lease.Subnet
		defer func() {
			if err != nil {
				lease.Release()
			}
		}()
	}
	// ctx bounds the start only; the agent lives until Stop.
	runCtx, cancel := context.WithCancel(context.Background())
	a := &Agent{o: o, ctx: runCtx, cancel: cancel, pods: map[types.UID]*podRun{}, lease: lease}
	factory := informers.NewSharedInformerFactoryWithOptions(o.Client, 0, informers.WithNamespace(o.Namespace))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.sync(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { a.sync(obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				a.gone(p.UID)
			}
		},
	}); err != nil {
		cancel()
		return nil, err
	}
	if o.Services {
		if a.services, err = newServiceProxy(runCtx, o, factory); err != nil {
			cancel()
			return nil, err
		}
	}
	factory.Start(runCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		cancel()
		return nil, fmt.Errorf("pod informer for namespace %s did not sync", o.Namespace)
	}
	if a.services != nil {
		if err := a.services.start(ctx); err != nil {
			cancel()
			return nil, err
		}
	}
	return a, nil
}

// Stop stops every engine process and the agent. Pods are left as they are.
func (a *Agent) Stop() {
	a.cancel()
	if a.services != nil {
		a.services.stop()
	}
	a.mu.Lock()
	runs := make([]*podRun, 0, len(a.pods))
	for _, r := range a.pods {
		runs = append(runs, r)
	}
	a.mu.Unlock()
	for _, r := range runs {
		r.cancel()
		r.stop(a)
	}
	a.wg.Wait()
	if a.lease != nil {
		a.lease.Release()
	}
}

// Pods returns the agent's pods, sorted by nothing in particular.
func (a *Agent) Pods() []Pod {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Pod, 0, len(a.pods))
	for _, r := range a.pods {
		p := Pod{Name: r.name, UID: r.uid, IP: r.ip, Port: r.port, Ready: r.ready}
		if r.proc != nil {
			p.PID = r.proc.PID()
		}
		out = append(out, p)
	}
	return out
}

func (a *Agent) sync(pod *corev1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.pods[pod.UID]
	if !ok {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return
		}
		ctx, cancel := context.WithCancel(a.ctx)
		r = &podRun{name: pod.Name, uid: pod.UID, ip: a.allocIP(), port: a.port(pod), cancel: cancel, done: make(chan struct{})}
		if len(pod.Spec.Containers) > 0 {
			eng, _ := a.engine(pod.Spec.Containers[0].Image)
			r.inCluster = eng.InCluster
		}
		a.pods[pod.UID] = r
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer close(r.done)
			a.run(ctx, r, pod.DeepCopy())
		}()
		return
	}
	if pod.DeletionTimestamp != nil && !r.terminating {
		r.terminating = true
		grace := 30 * time.Second
		if pod.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.terminate(r, grace)
		}()
	}
}

// allocIP returns the next unused address 127.<subnet>.y.z; addresses are never reused
// within one agent, so a late connection cannot reach a new pod.
func (a *Agent) allocIP() string {
	a.nextIP++
	n := a.nextIP
	return fmt.Sprintf("127.%d.%d.%d", a.o.Subnet, n/250, n%250+1)
}

func (a *Agent) port(pod *corev1.Pod) int {
	if v, err := strconv.Atoi(pod.Annotations["prometheus.io/port"]); err == nil && v > 0 {
		return v
	}
	if len(pod.Spec.Containers) > 0 && len(pod.Spec.Containers[0].Ports) > 0 {
		return int(pod.Spec.Containers[0].Ports[0].ContainerPort)
	}
	return a.o.DefaultPort
}

func (a *Agent) gone(uid types.UID) {
	a.mu.Lock()
	r, ok := a.pods[uid]
	a.mu.Unlock()
	if !ok {
		return
	}
	r.cancel()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		<-r.done
		r.stop(a)
		a.mu.Lock()
		delete(a.pods, uid)
		a.mu.Unlock()
	}()
}

// run takes a new pod through Running → (cold start) → engine started → Ready,
// then watches the engine until it exits or the pod goes.
func (a *Agent) run(ctx context.Context, r *podRun, pod *corev1.Pod) {
	defer func() {
		if ctx.Err() != nil {
			r.stop(a) // whoever cancelled may have looked before the process existed
		}
	}()
	if len(pod.Spec.Containers) == 0 {
		return
	}
	c := pod.Spec.Containers[0]
	eng, ok := a.admit(ctx, r, pod, c)
	if !ok {
		return
	}
	started := metav1.Now()
	select {
	case <-ctx.Done():
		return
	case <-time.After(a.o.ColdStart):
	}
	proc, ok := a.startEngine(ctx, r, pod, c, eng)
	if !ok || !a.waitHealthy(ctx, r, pod, c, eng, proc) {
		return
	}
	if err := a.setStatus(ctx, r, func(s *corev1.PodStatus) {
		now := metav1.Now()
		setCondition(s, corev1.ContainersReady, true, now)
		setCondition(s, corev1.PodReady, true, now)
		s.ContainerStatuses = []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		}}
	}); err != nil {
		a.o.Logf("pod %s: setting Ready: %v", pod.Name, err)
		return
	}
	a.mu.Lock()
	r.ready = true
	a.mu.Unlock()
	a.o.Logf("pod %s ready at %s:%d (pid %d)", pod.Name, r.ip, r.port, proc.PID())
	// Watch the engine: an exited engine makes the pod not Ready, like a failing probe.
	select {
	case <-ctx.Done():
	case <-proc.Done():
		_, werr := proc.Exited()
		a.o.Logf("pod %s: engine exited: %v", pod.Name, werr)
		a.mu.Lock()
		r.ready = false
		a.mu.Unlock()
		_ = a.setStatus(a.ctx, r, func(s *corev1.PodStatus) {
			setCondition(s, corev1.ContainersReady, false, metav1.Now())
			setCondition(s, corev1.PodReady, false, metav1.Now())
		})
	}
}

// engine returns how image runs: Options.Engines, else Options.Resolve.
func (a *Agent) engine(image string) (Engine, bool) {
	if eng, ok := a.o.Engines[image]; ok {
		return eng, true
	}
	if a.o.Resolve != nil {
		return a.o.Resolve(image)
	}
	return Engine{}, false
}

// admit finds the engine of the pod's image (a pod with an unknown image is
// marked Failed), binds the pod to the agent's node as the scheduler would, and
// marks it Running with its IP but not Ready.
func (a *Agent) admit(ctx context.Context, r *podRun, pod *corev1.Pod, c corev1.Container) (Engine, bool) {
	eng, ok := a.engine(c.Image)
	if !ok {
		a.o.Logf("pod %s: no engine for image %q", pod.Name, c.Image)
		_ = a.setStatus(ctx, r, func(s *corev1.PodStatus) {
			s.Phase = corev1.PodFailed
			s.Reason, s.Message = "UnknownImage", "node agent has no engine for image "+c.Image
		})
		return Engine{}, false
	}
	if pod.Spec.NodeName == "" {
		err := a.o.Client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: a.o.NodeName},
		}, metav1.CreateOptions{})
		if err != nil {
			a.o.Logf("pod %s: binding to %s: %v", pod.Name, a.o.NodeName, err)
			return Engine{}, false
		}
	}
	now := metav1.Now()
	if err := a.setStatus(ctx, r, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.HostIP, s.PodIP = "127.0.0.1", r.ip
		s.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
		s.PodIPs = []corev1.PodIP{{IP: r.ip}}
		s.StartTime = &now
		setCondition(s, corev1.PodScheduled, true, now)
		setCondition(s, corev1.PodInitialized, true, now)
		setCondition(s, corev1.ContainersReady, false, now)
		setCondition(s, corev1.PodReady, false, now)
		s.ContainerStatuses = []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image, ImageID: c.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ColdStart"}},
		}}
	}); err != nil {
		a.o.Logf("pod %s: setting Running: %v", pod.Name, err)
		return Engine{}, false
	}
	return eng, true
}

// startEngine starts the engine process, behind a forwarder for engines that
// cannot bind one address.
func (a *Agent) startEngine(ctx context.Context, r *podRun, pod *corev1.Pod, c corev1.Container, eng Engine) (*controlplane.Process, bool) {
	enginePort := r.port
	if eng.AllInterfaces {
		p, err := controlplane.FreePort()
		if err != nil {
			a.o.Logf("pod %s: %v", pod.Name, err)
			return nil, false
		}
		enginePort = p
		to := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		fwd, err := newForwarder(net.JoinHostPort(r.ip, strconv.Itoa(r.port)), func() (string, error) { return to, nil })
		if err != nil {
			a.o.Logf("pod %s: %v", pod.Name, err)
			return nil, false
		}
		a.mu.Lock()
		r.fwd = fwd
		a.mu.Unlock()
	}
	expand := strings.NewReplacer("$(POD_IP)", r.ip, "$(PORT)", strconv.Itoa(enginePort), "$(POD_NAME)", pod.Name, "$(POD_NAMESPACE)", pod.Namespace)
	var args []string
	for _, s := range append(slices.Clone(eng.Args), c.Args...) {
		args = append(args, expand.Replace(s))
	}
	var proc *controlplane.Process
	var err error
	if eng.InCluster {
		proc, err = a.startInCluster(ctx, r, pod, c, eng, args)
	} else {
		proc, err = controlplane.StartProcess(a.o.LogDir, pod.Name, eng.Binary, args, nil)
	}
	if err != nil {
		a.o.Logf("pod %s: %v", pod.Name, err)
		return nil, false
	}
	a.mu.Lock()
	r.proc = proc
	a.mu.Unlock()
	return proc, ctx.Err() == nil
}

// waitHealthy polls the engine's readiness path until it answers 2xx; an engine
// that exits first marks the pod Failed.
func (a *Agent) waitHealthy(ctx context.Context, r *podRun, pod *corev1.Pod, c corev1.Container, eng Engine, proc *controlplane.Process) bool {
	url := readinessURL(r, c, eng)
	var exited error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if done, werr := proc.Exited(); done {
			exited = fmt.Errorf("engine exited during start: %v", werr) //nolint:errorlint // werr is nil after a clean exit
			return false, exited
		}
		return httpOK(ctx, url), nil
	})
	if exited != nil {
		a.o.Logf("pod %s: %v\n%s", pod.Name, exited, proc.Tail(2000))
		_ = a.setStatus(ctx, r, func(s *corev1.PodStatus) { s.Phase = corev1.PodFailed; s.Reason = "EngineExited" })
	}
	return err == nil
}

// terminate drains and stops a deleted pod's engine, then removes the pod object.
func (a *Agent) terminate(r *podRun, grace time.Duration) {
	ctx := a.ctx
	a.mu.Lock()
	r.ready = false
	a.mu.Unlock()
	_ = a.setStatus(ctx, r, func(s *corev1.PodStatus) {
		setCondition(s, corev1.ContainersReady, false, metav1.Now())
		setCondition(s, corev1.PodReady, false, metav1.Now())
	})
	if !r.inCluster {
		a.drain(ctx, r, grace)
	}
	r.cancel()
	<-r.done
	r.stop(a)
	a.o.Logf("pod %s stopped", r.name)
	zero := int64(0)
	err := a.o.Client.CoreV1().Pods(a.o.Namespace).Delete(ctx, r.name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &r.uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		a.o.Logf("pod %s: final delete: %v", r.name, err)
	}
}

// drain waits, up to grace, until the engine's own running and waiting counts
// are zero. No new work arrives once the pod is not Ready; but the engine's
// gauges move at the start of a step while the last tokens and the end of the
// stream reach the client after it, and a gateway may still hold a stale
// endpoint list: only two zero readings a second apart mean drained.
func (a *Agent) drain(ctx context.Context, r *podRun, grace time.Duration) {
	metricsURL := fmt.Sprintf("http://%s/metrics", net.JoinHostPort(r.ip, strconv.Itoa(r.port)))
	var zeroSince time.Time
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, grace, true, func(ctx context.Context) (bool, error) {
		a.mu.Lock()
		proc := r.proc
		a.mu.Unlock()
		if proc == nil {
			return true, nil
		}
		if exited, _ := proc.Exited(); exited {
			return true, nil
		}
		n, err := inFlight(ctx, metricsURL)
		switch {
		case err != nil || n > 0:
			zeroSince = time.Time{}
		case zeroSince.IsZero():
			zeroSince = time.Now()
		case time.Since(zeroSince) >= time.Second:
			return true, nil
		}
		return false, nil
	})
}

// setStatus applies mutate to the pod's current status and writes it, retrying conflicts.
func (a *Agent) setStatus(ctx context.Context, r *podRun, mutate func(*corev1.PodStatus)) error {
	pods := a.o.Client.CoreV1().Pods(a.o.Namespace)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		pod, err := pods.Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != r.uid {
			return apierrors.NewNotFound(corev1.Resource("pods"), r.name)
		}
		mutate(&pod.Status)
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}

func setCondition(s *corev1.PodStatus, t corev1.PodConditionType, ok bool, now metav1.Time) {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
	}
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			if s.Conditions[i].Status != status {
				s.Conditions[i].Status = status
				s.Conditions[i].LastTransitionTime = now
			}
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: now})
}

// readinessURL is the URL of the container's readinessProbe (httpGet path, port by
// number or by the container port's name, scheme), else the engine's ReadyPath, else
// /health, on the pod's IP and port.
func readinessURL(r *podRun, c corev1.Container, eng Engine) string {
	scheme, port, path := "http", r.port, eng.ReadyPath
	if p := c.ReadinessProbe; p != nil && p.HTTPGet != nil {
		if p.HTTPGet.Path != "" {
			path = p.HTTPGet.Path
		}
		if p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		if n := containerPort(c, p.HTTPGet.Port); n > 0 {
			port = n
		}
	}
	if path == "" {
		path = "/health"
	}
	return fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(r.ip, strconv.Itoa(port)), path)
}

// containerPort resolves a port of c given by number or by name; 0 if a name is unknown.
func containerPort(c corev1.Container, p intstr.IntOrString) int {
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort)
		}
	}
	return 0
}

// probeClient probes as the kubelet does: an HTTPS probe does not verify the
// server's certificate.
var probeClient = &http.Client{Timeout: time.Second, Transport: &http.Transport{
	DisableKeepAlives: true,
	TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet's HTTPS probes skip verification too
}}

func httpOK(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode/100 == 2
}

// inFlight returns the engine's running plus waiting requests, read from its
// /metrics by the adapter's own extractor (the same parser and engine rules the
// adapter scrapes with).
func inFlight(ctx context.Context, url string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return 0, err
	}
	r, err := extractor.Extract(body)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", url, err)
	}
	if r.Ptr(signals.Running) == nil && r.Ptr(signals.QueueDepth) == nil {
		return 0, fmt.Errorf("GET %s: no running or waiting requests reported", url)
	}
	var n float64
	for _, s := range []signals.Signal{signals.Running, signals.QueueDepth, signals.QueueDeferred} {
		if v, ok := r.Value(s); ok {
			n += v
		}
	}
	return n, nil
}

var extractor = signals.NewExtractor()

// stop ends the engine process and its forwarder, if any.
func (r *podRun) stop(a *Agent) {
	a.mu.Lock()
	proc, fwd := r.proc, r.fwd
	a.mu.Unlock()
	if proc != nil {
		proc.Stop(5 * time.Second)
	}
	if fwd != nil {
		fwd.Close()
	}
}
