package flowgate

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// PodOptions configure a gate run as a pod (RunPod): it finds its engines by listing
// the Ready pods of a selector through the API server, as the endpoint picker watches
// its InferencePool's pods.
type PodOptions struct {
	// Addr is where it listens ($(POD_IP):$(PORT) for the node agent).
	Addr string
	// Kubeconfig, Namespace and Selector find the engine pods; EnginePort is their port.
	Kubeconfig, Namespace, Selector string
	EnginePort                      int
	// Pool, Model and MaxOutstanding as in Options.
	Pool, Model    string
	MaxOutstanding int
}

// PodArgs parses the pod mode's arguments, gateway-<field>=<value> (addr, kubeconfig,
// namespace, selector, pool, model, max-outstanding, engine-port); ok is false when
// gateway-addr is absent (not in pod mode).
func PodArgs(args []string) (o PodOptions, ok bool, err error) {
	o.EnginePort, o.MaxOutstanding = 8000, 4
	for _, a := range args {
		k, v, found := strings.Cut(a, "=")
		if !found || !strings.HasPrefix(k, "gateway-") {
			continue
		}
		switch strings.TrimPrefix(k, "gateway-") {
		case "addr":
			o.Addr, ok = v, true
		case "kubeconfig":
			o.Kubeconfig = v
		case "namespace":
			o.Namespace = v
		case "selector":
			o.Selector = v
		case "pool":
			o.Pool = v
		case "model":
			o.Model = v
		case "max-outstanding":
			if o.MaxOutstanding, err = strconv.Atoi(v); err != nil {
				return o, ok, fmt.Errorf("gateway-max-outstanding: %w", err)
			}
		case "engine-port":
			if o.EnginePort, err = strconv.Atoi(v); err != nil {
				return o, ok, fmt.Errorf("gateway-engine-port: %w", err)
			}
		}
	}
	return o, ok, nil
}

// RunPod serves a gate on o.Addr until ctx ends, over the Ready pods of o.Selector
// listed every 200 ms.
func RunPod(ctx context.Context, o PodOptions) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var eps []string
	go func() {
		for ctx.Err() == nil {
			pods, err := client.CoreV1().Pods(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: o.Selector})
			if err == nil {
				var ready []string
				for i := range pods.Items {
					p := &pods.Items[i]
					if p.DeletionTimestamp == nil && p.Status.PodIP != "" && podReady(p) {
						ready = append(ready, fmt.Sprintf("http://%s:%d", p.Status.PodIP, o.EnginePort))
					}
				}
				mu.Lock()
				eps = ready
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	g := New(Options{Endpoints: func() []string { mu.Lock(); defer mu.Unlock(); return eps }, MaxOutstanding: o.MaxOutstanding, Pool: o.Pool, Model: o.Model})
	go g.Run(ctx)
	srv := &http.Server{Addr: o.Addr, Handler: g, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
