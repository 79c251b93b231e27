package discovery

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Informers holds the shared informers for pods and HorizontalPodAutoscalers of
// the watched namespaces: one factory for all namespaces, or one per namespace
// when a list is given, so that the adapter needs RBAC only there.
type Informers struct {
	all        bool
	namespaces []string
	factories  map[string]informers.SharedInformerFactory
	// generations counts pod changes per namespace (*atomic.Uint64 values), so
	// that Discovery can reuse a selector's pod list until a pod of its namespace
	// changes.
	generations sync.Map
}

// NewInformers creates (but does not start) the informers. An empty namespaces
// list watches every namespace.
func NewInformers(client kubernetes.Interface, namespaces []string) *Informers {
	i := &Informers{all: len(namespaces) == 0, namespaces: namespaces, factories: map[string]informers.SharedInformerFactory{}}
	if i.all {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		// No resync: the caches are read on demand, there are no handlers to replay.
		f := informers.NewSharedInformerFactoryWithOptions(client, 0,
			informers.WithNamespace(ns),
			informers.WithTransform(stripManagedFields))
		// Register the informers now so that Start starts them.
		bump := func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if m, err := meta.Accessor(obj); err == nil {
				i.generation(m.GetNamespace()).Add(1)
			}
		}
		if _, err := f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    bump,
			UpdateFunc: func(_, obj any) { bump(obj) },
			DeleteFunc: bump,
		}); err != nil {
			// Only a stopped informer refuses handlers, and this one has not started.
			klog.ErrorS(err, "watching pod changes")
		}
		f.Autoscaling().V2().HorizontalPodAutoscalers().Informer()
		i.factories[ns] = f
	}
	return i
}

// Start starts the informers and waits until their caches are filled or ctx ends.
func (i *Informers) Start(ctx context.Context) error {
	for _, f := range i.factories {
		f.Start(ctx.Done())
	}
	for ns, f := range i.factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("informer cache for %v in namespace %q did not sync", typ, ns)
			}
		}
	}
	return nil
}

func (i *Informers) generation(namespace string) *atomic.Uint64 {
	g, _ := i.generations.LoadOrStore(namespace, new(atomic.Uint64))
	return g.(*atomic.Uint64)
}

// Pods returns a PodLister over the watched namespaces.
func (i *Informers) Pods() PodLister { return podLister{i} }

// HPAs returns an HPALister over the watched namespaces.
func (i *Informers) HPAs() HPALister { return hpaLister{i} }

type podLister struct{ i *Informers }

// Generation returns a number that changes whenever a pod of namespace is added,
// updated or deleted in the cache.
func (l podLister) Generation(namespace string) uint64 { return l.i.generation(namespace).Load() }

func (l podLister) List(namespace string, selector labels.Selector) ([]*corev1.Pod, error) {
	f, ok := l.i.factories[namespace]
	if l.i.all {
		f, ok = l.i.factories[metav1.NamespaceAll], true
	}
	if !ok {
		return nil, fmt.Errorf("namespace %q is not watched by the adapter (--namespaces=%s)", namespace, strings.Join(l.i.namespaces, ","))
	}
	return corelisters.NewPodLister(f.Core().V1().Pods().Informer().GetIndexer()).Pods(namespace).List(selector)
}

type hpaLister struct{ i *Informers }

func (l hpaLister) List() ([]*autoscalingv2.HorizontalPodAutoscaler, error) {
	var out []*autoscalingv2.HorizontalPodAutoscaler
	keys := make([]string, 0, len(l.i.factories))
	for ns := range l.i.factories {
		keys = append(keys, ns)
	}
	slices.Sort(keys)
	for _, ns := range keys {
		hpas, err := l.i.factories[ns].Autoscaling().V2().HorizontalPodAutoscalers().Lister().List(labels.Everything())
		if err != nil {
			return nil, err
		}
		out = append(out, hpas...)
	}
	return out, nil
}

// stripManagedFields drops managedFields from cached objects: the adapter reads
// labels, phase, conditions, IP and annotations only, and managedFields are often
// the largest part of a pod.
func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
