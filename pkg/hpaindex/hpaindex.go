// Package hpaindex keeps the adapter's one index of HorizontalPodAutoscalers:
// what each HPA asks of External metrics (name, label selector, target type),
// its replica bounds and its object for Events, fed by one informer event
// handler. The pod selection (pkg/podselect: which pods to scrape, which HPAs
// a request answers) and the advisor (pkg/advisor: warnings about HPAs that
// cannot do what they are set up for) both read it and subscribe to its
// changes, so the two never disagree about an HPA.
//
// The index reads only the HPA's spec and status; it knows nothing of the
// adapter's metrics, so whether a metric is served is decided by its readers
// (the policy catalog can be reloaded while the HPAs stay).
package hpaindex

import (
	"slices"
	"strings"
	"sync"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Metric is one External metric of an HPA.
type Metric struct {
	// Name is the metric's name, lower-cased (the adapter's names are
	// case-insensitive, as the metrics APIs' resource names are).
	Name string
	// Selector is the metric's label selector (labels.Everything when none).
	Selector labels.Selector
	// Key is Selector's canonical form (labels.Selector.String sorts the
	// requirements), the form requests are matched by.
	Key string
	// Value reports a target of type Value (the HPA multiplies by Ready pods
	// itself), as opposed to AverageValue.
	Value bool
}

// HPA is what the index keeps of one HorizontalPodAutoscaler. It is never
// changed once indexed: an update replaces it.
type HPA struct {
	Key types.NamespacedName
	// Object is the HPA as last seen, for Events.
	Object *autoscalingv2.HorizontalPodAutoscaler
	// MinReplicas is spec.minReplicas (1 when unset, the API's default).
	MinReplicas int32
	// CurrentReplicas is status.currentReplicas.
	CurrentReplicas int32
	// External are the HPA's External metrics with a valid selector, in spec
	// order; one with an invalid selector is left out (the HPA controller
	// fails on it too).
	External []Metric
	// NonExternal reports a metric of another type (Resource, Pods, Object,
	// ContainerResource).
	NonExternal bool
}

// Change is called with an HPA's previous and current entries after the index
// took the change: Old is nil when it was added, Cur is nil when it was
// deleted. Callbacks run on the informer's goroutine, one namespace's changes
// in order; they must be safe for concurrent use across namespaces.
type Change func(old, cur *HPA)

type metricKey struct {
	namespace, metric, selector string
}

// Index is the one index of HPAs. Safe for concurrent use.
type Index struct {
	mu       sync.RWMutex
	hpas     map[types.NamespacedName]*HPA
	byMetric map[metricKey]map[string]*HPA // HPA name → entry
	subs     []Change
}

// New returns an empty Index. Register Handler with the informers before they
// start, and Subscribe before that too so that no change is missed.
func New() *Index {
	return &Index{hpas: map[types.NamespacedName]*HPA{}, byMetric: map[metricKey]map[string]*HPA{}}
}

// Subscribe adds a callback for every later change.
func (x *Index) Subscribe(c Change) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.subs = append(x.subs, c)
}

// Handler returns the informer event handler that keeps the index.
func (x *Index) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { x.upsert(obj) },
		UpdateFunc: func(_, obj any) { x.upsert(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if h, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler); ok {
				x.set(types.NamespacedName{Namespace: h.Namespace, Name: h.Name}, nil)
			}
		},
	}
}

// Of builds the entry of one HPA. An External metric whose selector does not
// parse is logged and left out.
func Of(h *autoscalingv2.HorizontalPodAutoscaler) *HPA {
	e := &HPA{Key: types.NamespacedName{Namespace: h.Namespace, Name: h.Name}, Object: h, MinReplicas: 1,
		CurrentReplicas: h.Status.CurrentReplicas}
	if h.Spec.MinReplicas != nil {
		e.MinReplicas = *h.Spec.MinReplicas
	}
	for _, m := range h.Spec.Metrics {
		if m.Type != autoscalingv2.ExternalMetricSourceType || m.External == nil {
			e.NonExternal = true
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
		e.External = append(e.External, Metric{Name: strings.ToLower(m.External.Metric.Name), Selector: sel, Key: sel.String(),
			Value: m.External.Target.Type == autoscalingv2.ValueMetricType})
	}
	return e
}

func (x *Index) upsert(obj any) {
	if h, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler); ok {
		e := Of(h)
		x.set(e.Key, e)
	}
}

// set replaces key's entry (nil: deletes it) and tells the subscribers.
func (x *Index) set(key types.NamespacedName, cur *HPA) {
	x.mu.Lock()
	old := x.hpas[key]
	if old == nil && cur == nil {
		x.mu.Unlock()
		return
	}
	if old != nil {
		for _, m := range old.External {
			k := metricKey{key.Namespace, m.Name, m.Key}
			delete(x.byMetric[k], key.Name)
			if len(x.byMetric[k]) == 0 {
				delete(x.byMetric, k)
			}
		}
		delete(x.hpas, key)
	}
	if cur != nil {
		x.hpas[key] = cur
		for _, m := range cur.External {
			k := metricKey{key.Namespace, m.Name, m.Key}
			if x.byMetric[k] == nil {
				x.byMetric[k] = map[string]*HPA{}
			}
			x.byMetric[k][key.Name] = cur
		}
	}
	subs := x.subs
	x.mu.Unlock()
	for _, c := range subs {
		c(old, cur)
	}
}

// Get returns key's entry, nil when the index has none.
func (x *Index) Get(key types.NamespacedName) *HPA {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.hpas[key]
}

// For returns the HPAs of namespace with an External metric named metric
// (case-insensitively) whose canonical selector is selectorKey, sorted by
// name: the HPAs a request for (namespace, metric, selector) answers.
func (x *Index) For(namespace, metric, selectorKey string) []*HPA {
	x.mu.RLock()
	byName := x.byMetric[metricKey{namespace, strings.ToLower(metric), selectorKey}]
	out := make([]*HPA, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	x.mu.RUnlock()
	slices.SortFunc(out, func(a, b *HPA) int { return strings.Compare(a.Key.Name, b.Key.Name) })
	return out
}

// Range calls f with every HPA until f returns false, in no set order. The
// index is read-locked meanwhile: f must not change it.
func (x *Index) Range(f func(*HPA) bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, e := range x.hpas {
		if !f(e) {
			return
		}
	}
}
