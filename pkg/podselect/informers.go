package podselect

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Informers holds the shared informers for pods and HorizontalPodAutoscalers of
// the watched namespaces: one factory for all namespaces, or one per namespace
// when a list is given, so that the adapter needs RBAC only there.
type Informers struct {
	all        bool
	namespaces []string
	factories  map[string]informers.SharedInformerFactory
	// generations counts pod changes per namespace (*atomic.Uint64 values), so
	// that a Selection can reuse a selector's members until a pod of its
	// namespace changes. They move with the cache's writes (countChange).
	generations sync.Map

	mu sync.Mutex
	// registrations are the event handlers handed out; Start waits until each
	// has seen the initial list, so that nothing derived from events (the pod
	// generations, the HPA index) lags the caches.
	registrations []cache.ResourceEventHandlerRegistration
	synced        atomic.Bool
}

// NewInformers creates (but does not start) the informers. An empty namespaces
// list watches every namespace. Errors come from registering event handlers.
func NewInformers(client kubernetes.Interface, namespaces []string) (*Informers, error) {
	i := &Informers{all: len(namespaces) == 0, namespaces: namespaces, factories: map[string]informers.SharedInformerFactory{}}
	if i.all {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		// No resync: the caches are read on demand and the handlers keep their own
		// state from every event.
		i.factories[ns] = informers.NewSharedInformerFactoryWithOptions(client, 0,
			informers.WithNamespace(ns),
			informers.WithTransform(stripManagedFields))
	}
	for _, f := range i.factories {
		// The generation moves inside the cache's own write, under its lock: an
		// index function runs on every add, update and delete before the write is
		// visible to readers. An event handler would run later, on its own
		// goroutine, and a reader could meanwhile see the new pod (a pod re-created
		// under the same name, with a new UID) while the generation still matched
		// a member list cached with the old one.
		if err := f.Core().V1().Pods().Informer().AddIndexers(cache.Indexers{generationIndex: i.countChange}); err != nil {
			return nil, fmt.Errorf("watching pod changes: %w", err)
		}
	}
	return i, nil
}

// generationIndex names the index function that counts pod changes; it
// indexes nothing.
const generationIndex = "saturation-adapter.io/generation"

// countChange is the index function of generationIndex: it bumps the
// generation of the pod's namespace and indexes nothing.
func (i *Informers) countChange(obj any) ([]string, error) {
	if m, err := meta.Accessor(obj); err == nil {
		i.generation(m.GetNamespace()).Add(1)
	}
	return nil, nil
}

// AddHPAHandler registers h for the HorizontalPodAutoscalers of every watched
// namespace. Call it before Start, which then waits until h has seen every HPA.
func (i *Informers) AddHPAHandler(h cache.ResourceEventHandler) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, f := range i.factories {
		reg, err := f.Autoscaling().V2().HorizontalPodAutoscalers().Informer().AddEventHandler(h)
		if err != nil {
			return fmt.Errorf("watching HorizontalPodAutoscalers: %w", err)
		}
		i.registrations = append(i.registrations, reg)
	}
	return nil
}

// Start starts the informers and waits until their caches are filled and every
// registered handler has seen them, or ctx ends.
func (i *Informers) Start(ctx context.Context) error {
	for _, f := range i.factories {
		// The pod informer exists since NewInformers (its generation index);
		// HPAs here too, so that an adapter with no HPA handler still caches them.
		f.Autoscaling().V2().HorizontalPodAutoscalers().Informer()
		f.Start(ctx.Done())
	}
	for ns, f := range i.factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("informer cache for %v in namespace %q did not sync", typ, ns)
			}
		}
	}
	i.mu.Lock()
	regs := slices.Clone(i.registrations)
	i.mu.Unlock()
	synced := make([]cache.InformerSynced, len(regs))
	for k, r := range regs {
		synced[k] = r.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("informer event handlers did not sync: %w", context.Cause(ctx))
	}
	i.synced.Store(true)
	return nil
}

// HasSynced reports whether Start has filled the caches.
func (i *Informers) HasSynced() bool { return i.synced.Load() }

func (i *Informers) generation(namespace string) *atomic.Uint64 {
	g, _ := i.generations.LoadOrStore(namespace, new(atomic.Uint64))
	return g.(*atomic.Uint64)
}

// Pods returns a PodLister over the watched namespaces.
func (i *Informers) Pods() PodLister { return podLister{i} }

type podLister struct{ i *Informers }

// Generation returns a number that changes whenever a pod of namespace is added,
// updated or deleted in the cache, before the change is visible to List and Get.
func (l podLister) Generation(namespace string) uint64 { return l.i.generation(namespace).Load() }

func (l podLister) HasSynced() bool { return l.i.HasSynced() }

func (l podLister) lister(namespace string) (corelisters.PodNamespaceLister, error) {
	f, ok := l.i.factories[namespace]
	if l.i.all {
		f, ok = l.i.factories[metav1.NamespaceAll], true
	}
	if !ok {
		return nil, fmt.Errorf("namespace %q is not watched by the adapter (--namespaces=%s)", namespace, strings.Join(l.i.namespaces, ","))
	}
	return corelisters.NewPodLister(f.Core().V1().Pods().Informer().GetIndexer()).Pods(namespace), nil
}

func (l podLister) List(namespace string, selector labels.Selector) ([]*corev1.Pod, error) {
	pl, err := l.lister(namespace)
	if err != nil {
		return nil, err
	}
	return pl.List(selector)
}

func (l podLister) Get(namespace, name string) (*corev1.Pod, error) {
	pl, err := l.lister(namespace)
	if err != nil {
		return nil, err
	}
	return pl.Get(name)
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
