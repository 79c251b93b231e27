// Package podselect decides which pods form a pool and which are scraped, from
// client-go informer caches of pods and HorizontalPodAutoscalers. A pool is the
// pods of one namespace matched by a label selector; the scrape set is every pod
// matched by a selector that a request asked about recently or that a
// HorizontalPodAutoscaler names in an External metric the adapter serves. It
// hands the provider per-pod facts (Member), and the scraper its targets, built
// by the same rules.
package podselect

import (
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
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

// PodLister reads pods from a cache. Errors name a namespace that is not watched.
type PodLister interface {
	// List returns the pods of namespace matched by selector.
	List(namespace string, selector labels.Selector) ([]*corev1.Pod, error)
	// Get returns one pod, or a NotFound error.
	Get(namespace, name string) (*corev1.Pod, error)
	// Generation changes whenever a pod of namespace changes in the cache.
	Generation(namespace string) uint64
	// HasSynced reports whether the cache holds every pod.
	HasSynced() bool
}

// Options configure a Selection.
type Options struct {
	// Port, Path and Scheme build the /metrics URL of a pod without annotations.
	Port   int
	Path   string
	Scheme string
	// IdleTimeout is how long a selector stays in the scrape set after the last
	// request that used it.
	IdleTimeout time.Duration
	// Serves reports whether the adapter serves an External metric of that
	// (lower-case) name: an HPA with such a metric puts its selector's pods in
	// the scrape set.
	Serves func(metric string) bool
	// OnHPADeleted, if set, is called with each HorizontalPodAutoscaler that is
	// deleted, e.g. to delete the self-metric series labelled with it.
	OnHPADeleted func(hpa types.NamespacedName)
}

// Member is one pod matched by a pool's selector, with the facts the provider
// needs. Members are shared between callers: do not modify them.
type Member struct {
	// Pod and UID identify the pod; scrape results are keyed by UID.
	Pod types.NamespacedName
	UID types.UID
	// Counted reports whether the pod counts towards the pool: Running, Ready
	// and not terminating, the pods the HPA's replica calculation also counts.
	Counted bool
	// Target is where the pod is scraped; valid only when TargetErr is nil.
	Target scrape.Target
	// TargetErr says why the pod cannot be scraped (no IP yet, a bad annotation).
	TargetErr error
}

// Selection tracks the selectors of interest and turns them into pool members
// and scrape targets. It is safe for concurrent use.
type Selection struct {
	opts  Options
	pods  PodLister
	clock clock.PassiveClock

	mu        sync.Mutex
	asked     map[string]*interest
	lastSweep time.Time

	hpaMu sync.RWMutex
	// hpas indexes the External metrics of every HPA by namespace and HPA name,
	// kept from informer events so that neither the scrape set nor a request
	// lists HPAs.
	hpas map[string]map[string][]hpaMetric

	// members caches the members of each (namespace, selector) until a pod of
	// the namespace changes: listing a namespace index, matching every pod's
	// labels and building its URL was most of the cost of an HPA request
	// (BenchmarkGetExternalMetric1000Pods).
	memberMu sync.Mutex
	members  map[string]memberList
}

// maxCachedPools bounds the member lists kept (one per namespace and selector).
const maxCachedPools = 10000

type memberList struct {
	generation uint64
	members    []Member
}

type interest struct {
	namespace string
	selector  labels.Selector
	lastAsked time.Time
}

type hpaMetric struct {
	metric   string // lower-case
	selector labels.Selector
	key      string // canonical selector
}

// New returns a Selection over the pods of pods. Register HPAHandler with the
// informers before they start so that HPAs declare interest.
func New(opts Options, pods PodLister, clk clock.PassiveClock) *Selection {
	return &Selection{
		opts: opts, pods: pods, clock: clk,
		asked:   map[string]*interest{},
		hpas:    map[string]map[string][]hpaMetric{},
		members: map[string]memberList{},
	}
}

// interestKey keys request state by (namespace, canonical selector), so two
// namespaces never share an entry. labels.Selector.String sorts requirements.
func interestKey(namespace string, selector labels.Selector) string {
	return namespace + "\x00" + selector.String()
}

// poolKey is the scrape pool key (scrape.Target.Pool) of a selector's pods: a
// short hash of its canonical form, so that a long selector is not copied
// into every target and the scraper's queues.
func poolKey(selector labels.Selector) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(selector.String()))
	return strconv.FormatUint(h.Sum64(), 36)
}

// Synced reports whether the pod cache is filled: before that, "no pods match"
// would be a guess.
func (s *Selection) Synced() bool { return s.pods.HasSynced() }

// RecordInterest records that a request asked about selector in namespace: its
// pods join the scrape set for IdleTimeout. Interests idle for longer are
// forgotten here, at most once per IdleTimeout.
func (s *Selection) RecordInterest(namespace string, selector labels.Selector) {
	key := interestKey(namespace, selector)
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if in, ok := s.asked[key]; ok {
		in.lastAsked = now
		return
	}
	s.asked[key] = &interest{namespace: namespace, selector: selector, lastAsked: now}
	if now.Sub(s.lastSweep) < s.opts.IdleTimeout {
		return
	}
	s.lastSweep = now
	for k, in := range s.asked {
		if s.idle(in, now) {
			delete(s.asked, k)
		}
	}
}

func (s *Selection) idle(in *interest, now time.Time) bool {
	return now.Sub(in.lastAsked) > s.opts.IdleTimeout
}

// Members returns the members of the pool of namespace matched by selector, in
// no particular order. The slice is shared: callers must not modify it.
func (s *Selection) Members(namespace string, selector labels.Selector) ([]Member, error) {
	key := interestKey(namespace, selector)
	gen := s.pods.Generation(namespace)
	s.memberMu.Lock()
	m, ok := s.members[key]
	s.memberMu.Unlock()
	if ok && m.generation == gen {
		return m.members, nil
	}
	pods, err := s.pods.List(namespace, selector)
	if err != nil {
		return nil, err
	}
	pool := poolKey(selector)
	members := make([]Member, len(pods))
	for i, p := range pods {
		members[i] = s.member(p)
		members[i].Target.Pool = pool
	}
	s.memberMu.Lock()
	s.members[key] = memberList{generation: gen, members: members}
	// The cache is a cache: past its bound it starts again rather than keep the
	// pools of selectors nobody asks about any more.
	if len(s.members) > maxCachedPools {
		s.members = map[string]memberList{key: s.members[key]}
	}
	s.memberMu.Unlock()
	return members, nil
}

// Member returns the member for one pod by name; found is false when the pod
// does not exist.
func (s *Selection) Member(namespace, name string) (m Member, found bool, err error) {
	p, err := s.pods.Get(namespace, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return Member{}, false, nil
		}
		return Member{}, false, err
	}
	return s.member(p), true, nil
}

func (s *Selection) member(p *corev1.Pod) Member {
	m := Member{Pod: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, UID: p.UID, Counted: Counted(p)}
	m.Target, m.TargetErr = s.target(p)
	return m
}

// Targets returns the scrape targets: every scrapeable pod matched by a
// selector asked about within the idle timeout or named by an HPA on a served
// metric, each once.
func (s *Selection) Targets() []scrape.Target {
	seen := map[types.UID]struct{}{}
	var out []scrape.Target
	for _, in := range s.interests() {
		pool := poolKey(in.selector)
		pods, err := s.pods.List(in.namespace, in.selector)
		if err != nil {
			klog.V(2).InfoS("Listing pods for the scrape set", "namespace", in.namespace, "selector", in.selector.String(), "err", err)
			continue
		}
		for _, p := range pods {
			if !Scrapeable(p) {
				continue
			}
			if _, dup := seen[p.UID]; dup {
				continue
			}
			t, err := s.target(p)
			if err != nil {
				klog.V(2).InfoS("Pod cannot be scraped", "pod", klog.KObj(p), "err", err)
				continue
			}
			seen[p.UID] = struct{}{}
			t.Pool = pool
			out = append(out, t)
		}
	}
	return out
}

// interests returns the live request interests and the selectors of HPAs on
// served metrics.
func (s *Selection) interests() []interest {
	now := s.clock.Now()
	var out []interest
	s.mu.Lock()
	for _, in := range s.asked {
		if !s.idle(in, now) {
			out = append(out, *in)
		}
	}
	s.mu.Unlock()
	s.hpaMu.RLock()
	defer s.hpaMu.RUnlock()
	for ns, byName := range s.hpas {
		for _, metrics := range byName {
			for _, m := range metrics {
				if s.opts.Serves(m.metric) {
					out = append(out, interest{namespace: ns, selector: m.selector})
				}
			}
		}
	}
	return out
}

// HPAsFor returns the names, sorted, of the HPAs of namespace with an External
// metric named metric (case-insensitively) whose selector equals selector: the
// HPAs a request for (namespace, metric, selector) answers.
func (s *Selection) HPAsFor(namespace, metric string, selector labels.Selector) []string {
	s.hpaMu.RLock()
	defer s.hpaMu.RUnlock()
	byName := s.hpas[namespace]
	if len(byName) == 0 {
		return nil
	}
	metric = strings.ToLower(metric)
	key := selector.String()
	var out []string
	for name, metrics := range byName {
		for _, m := range metrics {
			if m.metric == metric && m.key == key {
				out = append(out, name)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// HPAHandler returns the event handler that keeps the Selection's index of
// HorizontalPodAutoscalers; see Informers.AddHPAHandler.
func (s *Selection) HPAHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.indexHPA(obj) },
		UpdateFunc: func(_, obj any) { s.indexHPA(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			h, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler)
			if !ok {
				return
			}
			s.hpaMu.Lock()
			delete(s.hpas[h.Namespace], h.Name)
			if len(s.hpas[h.Namespace]) == 0 {
				delete(s.hpas, h.Namespace)
			}
			s.hpaMu.Unlock()
			if s.opts.OnHPADeleted != nil {
				s.opts.OnHPADeleted(types.NamespacedName{Namespace: h.Namespace, Name: h.Name})
			}
		},
	}
}

// indexHPA records the External metrics of one HPA, with their parsed
// selectors; an invalid selector is logged and left out.
func (s *Selection) indexHPA(obj any) {
	h, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	if !ok {
		return
	}
	var metrics []hpaMetric
	for _, m := range h.Spec.Metrics {
		if m.Type != autoscalingv2.ExternalMetricSourceType || m.External == nil {
			continue
		}
		sel := labels.Everything()
		if m.External.Metric.Selector != nil {
			parsed, err := metav1.LabelSelectorAsSelector(m.External.Metric.Selector)
			if err != nil {
				klog.V(2).InfoS("HPA metric selector is invalid", "hpa", klog.KObj(h), "metric", m.External.Metric.Name, "err", err)
				continue
			}
			sel = parsed
		}
		metrics = append(metrics, hpaMetric{metric: strings.ToLower(m.External.Metric.Name), selector: sel, key: sel.String()})
	}
	s.hpaMu.Lock()
	defer s.hpaMu.Unlock()
	if len(metrics) == 0 {
		delete(s.hpas[h.Namespace], h.Name)
		return
	}
	if s.hpas[h.Namespace] == nil {
		s.hpas[h.Namespace] = map[string][]hpaMetric{}
	}
	s.hpas[h.Namespace][h.Name] = metrics
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

// target builds a pod's scrape target from its IP and the prometheus.io
// annotations, else the configured defaults. The URL never comes from a
// request. Errors name the bad annotation and its value.
func (s *Selection) target(p *corev1.Pod) (scrape.Target, error) {
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	if p.Status.PodIP == "" {
		return scrape.Target{}, fmt.Errorf("pod %s has no IP yet", key)
	}
	port, path, scheme := s.opts.Port, s.opts.Path, s.opts.Scheme
	if v, ok := p.Annotations[AnnotationPort]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return scrape.Target{}, fmt.Errorf("pod %s: annotation %s=%q is not a port number", key, AnnotationPort, v)
		}
		port = n
	}
	if v, ok := p.Annotations[AnnotationPath]; ok {
		if !strings.HasPrefix(v, "/") {
			return scrape.Target{}, fmt.Errorf("pod %s: annotation %s=%q must start with /", key, AnnotationPath, v)
		}
		path = v
	}
	if v, ok := p.Annotations[AnnotationScheme]; ok {
		if v != "http" && v != "https" {
			return scrape.Target{}, fmt.Errorf("pod %s: annotation %s=%q must be http or https", key, AnnotationScheme, v)
		}
		scheme = v
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port))}
	// Path may carry a query (e.g. /metrics?format=text); keep it verbatim.
	return scrape.Target{Pod: key, UID: p.UID, URL: u.String() + path}, nil
}
