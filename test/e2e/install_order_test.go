package e2e

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// deletion is one object's deletion as a watch reported it.
type deletion struct {
	what string
	// revision is the DELETED event's resourceVersion: here the revision of the one
	// etcd, so deletions of different kinds compare in the order they happened.
	revision int64
}

// watchDeletions records the deletions of APIServices and of the adapter's Service and
// Deployment from now until the returned function is called, which returns them in the
// order they happened.
func (e *installEnv) watchDeletions(t *testing.T) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	agg, err := aggregator.NewForConfig(e.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	opts := metav1.ListOptions{}
	watches := map[string]func() (watch.Interface, error){
		"APIService": func() (watch.Interface, error) { return agg.ApiregistrationV1().APIServices().Watch(ctx, opts) },
		"Service": func() (watch.Interface, error) {
			return e.cluster.Client.CoreV1().Services(stack.AdapterNamespace).Watch(ctx, opts)
		},
		"Deployment": func() (watch.Interface, error) {
			return e.cluster.Client.AppsV1().Deployments(stack.AdapterNamespace).Watch(ctx, opts)
		},
	}
	var mu sync.Mutex
	var seen []deletion
	var wg sync.WaitGroup
	for kind, start := range watches {
		w, err := start()
		if err != nil {
			cancel()
			t.Fatalf("watching %s: %v", kind, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			for ev := range w.ResultChan() {
				m, err := meta.Accessor(ev.Object)
				if ev.Type != watch.Deleted || err != nil {
					continue
				}
				rv, _ := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
				mu.Lock()
				seen = append(seen, deletion{kind + " " + m.GetName(), rv})
				mu.Unlock()
			}
		}()
	}
	return func() []string {
		cancel()
		wg.Wait()
		slices.SortFunc(seen, func(a, b deletion) int { return cmp.Compare(a.revision, b.revision) })
		out := make([]string, len(seen))
		for i, d := range seen {
			out[i] = d.what
		}
		return out
	}
}

// checkAPIServicesFirst: every APIService went before the Service and the Deployment
// (hazards NC-10, NC-11: an APIService whose Service is gone fails discovery).
func checkAPIServicesFirst(t *testing.T, order []string) {
	t.Helper()
	lastAPIService, firstOther := -1, len(order)
	for i, d := range order {
		if strings.HasPrefix(d, "APIService ") {
			lastAPIService = i
		} else if i < firstOther {
			firstOther = i
		}
	}
	if lastAPIService < 0 || firstOther == len(order) || lastAPIService > firstOther {
		t.Errorf("deletions in order %q: want the APIServices first, then the Service and the Deployment", order)
	}
	t.Logf("deletions in order: %q", order)
}
