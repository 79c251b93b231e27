// Package discovery decides which pods are scraped and how: the pods matched by
// any selector an HPA asked about recently, or named in a HorizontalPodAutoscaler
// that uses the adapter's metrics, read from client-go informer caches.
package discovery

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
)

// The pod annotations that override the scrape defaults, as understood by
// Prometheus's kubernetes_sd example configuration.
const (
	AnnotationPort   = "prometheus.io/port"
	AnnotationPath   = "prometheus.io/path"
	AnnotationScheme = "prometheus.io/scheme"
)

// PodLister lists pods from a cache. Errors name a namespace that is not watched.
type PodLister interface {
	List(namespace string, selector labels.Selector) ([]*corev1.Pod, error)
	// Generation changes whenever a pod of namespace changes in the cache.
	Generation(namespace string) uint64
}

// HPALister lists HorizontalPodAutoscalers from a cache, across watched namespaces.
type HPALister interface {
	List() ([]*autoscalingv2.HorizontalPodAutoscaler, error)
}

// Options configure discovery.
type Options struct {
	// Port, Path and Scheme build the /metrics URL of a pod without annotations.
	Port   int
	Path   string
	Scheme string
	// IdleTimeout is how long a selector stays in the scrape set after the last
	// request that used it.
	IdleTimeout time.Duration
	// Metrics are the metric names served; an HPA whose External metric has one of
	// these names puts its selector in the scrape set.
	Metrics []string
	// OnIdle, if set, is called with the namespace and canonical selector of each
	// request interest that expired, e.g. to delete its per-selector self-metrics.
	OnIdle func(namespace, selector string)
}

// Discovery tracks the selectors of interest and turns them into scrape targets.
// It is safe for concurrent use.
type Discovery struct {
	opts  Options
	pods  PodLister
	hpas  HPALister
	clock clock.PassiveClock

	mu    sync.Mutex
	asked map[string]*interest

	// matches caches the pods of each (namespace, selector) until a pod of the
	// namespace changes: listing a namespace index and matching every pod's labels
	// was most of the cost of an HPA request (BenchmarkGetExternalMetric1000Pods).
	matchMu sync.Mutex
	matches map[string]podMatch
}

type podMatch struct {
	generation uint64
	pods       []*corev1.Pod
}

type interest struct {
	namespace string
	selector  labels.Selector
	lastAsked time.Time
}

// New returns a Discovery. hpas may be nil, then only requests declare interest.
func New(opts Options, pods PodLister, hpas HPALister, clk clock.PassiveClock) *Discovery {
	return &Discovery{opts: opts, pods: pods, hpas: hpas, clock: clk, asked: map[string]*interest{}, matches: map[string]podMatch{}}
}

// interestKey keys request state by (namespace, canonical selector), so two
// namespaces never share an entry. labels.Selector.String sorts requirements.
func interestKey(namespace string, selector labels.Selector) string {
	return namespace + "\x00" + selector.String()
}

// Touch records that a request asked about selector in namespace.
func (d *Discovery) Touch(namespace string, selector labels.Selector) {
	key := interestKey(namespace, selector)
	d.mu.Lock()
	defer d.mu.Unlock()
	if in, ok := d.asked[key]; ok {
		in.lastAsked = d.clock.Now()
		return
	}
	d.asked[key] = &interest{namespace: namespace, selector: selector, lastAsked: d.clock.Now()}
}

// Pods lists the pods of namespace matched by selector, in no particular order.
// The slice and the pods are shared: callers must not modify them.
func (d *Discovery) Pods(namespace string, selector labels.Selector) ([]*corev1.Pod, error) {
	key := interestKey(namespace, selector)
	gen := d.pods.Generation(namespace)
	d.matchMu.Lock()
	m, ok := d.matches[key]
	d.matchMu.Unlock()
	if ok && m.generation == gen {
		return m.pods, nil
	}
	pods, err := d.pods.List(namespace, selector)
	if err != nil {
		return nil, err
	}
	d.matchMu.Lock()
	d.matches[key] = podMatch{generation: gen, pods: pods}
	d.matchMu.Unlock()
	return pods, nil
}

// Targets returns the scrape targets: every scrapeable pod matched by a selector
// asked about within the idle timeout or named by an HPA on our metrics. It
// drops selectors idle for longer than the timeout.
func (d *Discovery) Targets() []scrape.Target {
	interests := d.interests()
	seen := map[types.NamespacedName]struct{}{}
	var out []scrape.Target
	for _, in := range interests {
		pods, err := d.pods.List(in.namespace, in.selector)
		if err != nil {
			klog.V(2).InfoS("listing pods for scrape set", "namespace", in.namespace, "selector", in.selector.String(), "err", err)
			continue
		}
		for _, p := range pods {
			if !Scrapeable(p) {
				continue
			}
			t, err := d.TargetFor(p)
			if err != nil {
				klog.V(2).InfoS("pod not scrapeable", "pod", klog.KObj(p), "err", err)
				continue
			}
			if _, dup := seen[t.Key]; dup {
				continue
			}
			seen[t.Key] = struct{}{}
			out = append(out, t)
		}
	}
	return out
}

// interests returns the live request interests and the HPA selectors.
func (d *Discovery) interests() []interest {
	now := d.clock.Now()
	var out, idle []interest
	d.mu.Lock()
	for k, in := range d.asked {
		if now.Sub(in.lastAsked) > d.opts.IdleTimeout {
			delete(d.asked, k)
			d.matchMu.Lock()
			delete(d.matches, k)
			d.matchMu.Unlock()
			idle = append(idle, *in)
			continue
		}
		out = append(out, *in)
	}
	d.mu.Unlock()
	if d.opts.OnIdle != nil {
		for _, in := range idle {
			d.opts.OnIdle(in.namespace, in.selector.String())
		}
	}
	if d.hpas == nil {
		return out
	}
	hpas, err := d.hpas.List()
	if err != nil {
		klog.ErrorS(err, "listing HorizontalPodAutoscalers")
		return out
	}
	for _, h := range hpas {
		for _, m := range h.Spec.Metrics {
			if m.Type != autoscalingv2.ExternalMetricSourceType || m.External == nil {
				continue
			}
			if !slices.Contains(d.opts.Metrics, strings.ToLower(m.External.Metric.Name)) {
				continue
			}
			sel := labels.Everything()
			if m.External.Metric.Selector != nil {
				s, err := metav1.LabelSelectorAsSelector(m.External.Metric.Selector)
				if err != nil {
					klog.V(2).InfoS("HPA metric selector is invalid", "hpa", klog.KObj(h), "err", err)
					continue
				}
				sel = s
			}
			out = append(out, interest{namespace: h.Namespace, selector: sel})
		}
	}
	return out
}

// Scrapeable reports whether a pod can be scraped: Running, with an IP, not
// terminating.
func Scrapeable(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil
}

// Counted reports whether a pod counts towards a pool: Running, Ready and not
// terminating, the pods the HPA's replica calculation also counts as ready.
func Counted(p *corev1.Pod) bool {
	if !Scrapeable(p) {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Key returns the key of a pod's scrape results.
func Key(p *corev1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
}

// TargetFor builds a pod's scrape target from its IP and the prometheus.io
// annotations, else the configured defaults. The URL never comes from a request.
// Errors name the bad annotation and its value.
func (d *Discovery) TargetFor(p *corev1.Pod) (scrape.Target, error) {
	if p.Status.PodIP == "" {
		return scrape.Target{}, fmt.Errorf("pod %s has no IP yet", Key(p))
	}
	port, path, scheme := d.opts.Port, d.opts.Path, d.opts.Scheme
	if v, ok := p.Annotations[AnnotationPort]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return scrape.Target{}, fmt.Errorf("pod %s: annotation %s=%q is not a port number", Key(p), AnnotationPort, v)
		}
		port = n
	}
	if v, ok := p.Annotations[AnnotationPath]; ok {
		if !strings.HasPrefix(v, "/") {
			return scrape.Target{}, fmt.Errorf("pod %s: annotation %s=%q must start with /", Key(p), AnnotationPath, v)
		}
		path = v
	}
	if v, ok := p.Annotations[AnnotationScheme]; ok {
		if v != "http" && v != "https" {
			return scrape.Target{}, fmt.Errorf("pod %s: annotation %s=%q must be http or https", Key(p), AnnotationScheme, v)
		}
		scheme = v
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port))}
	// Path may carry a query (e.g. /metrics?format=text); keep it verbatim.
	return scrape.Target{Key: Key(p), URL: u.String() + path}, nil
}
