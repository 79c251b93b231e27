package testfixture

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// Watches counts the watches a fake clientset has opened, per resource.
//
// An informer lists, then watches. A fake clientset's tracker replays on a new
// watch the objects added since the list's resource version, but not a delete
// or an update that landed in between (k8s.io/client-go v0.37.2,
// testing/fixture.go, tracker.Watch): that change is lost for good, and a test
// waiting for it times out. A test that changes objects after its informers
// synced must first Wait until they watch.
type Watches struct {
	mu   sync.Mutex
	open map[string]int
}

// TrackWatches starts counting client's watches. Call it before any informer
// on client starts. Every watch is still served by client's tracker, as the
// fake's own watch reactor does, so the informers see the same events.
func TrackWatches(client *fake.Clientset) *Watches {
	w := &Watches{open: map[string]int{}}
	client.PrependWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := action.(clienttesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		wi, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		// Counted once the tracker holds the watcher: from here on, every
		// change to the resource reaches it.
		w.mu.Lock()
		w.open[action.GetResource().Resource]++
		w.mu.Unlock()
		return true, wi, nil
	})
	return w
}

// Wait blocks until at least n watches of resource (its plural, e.g. "pods")
// have opened, and fails t if that takes more than 30 s (informers open theirs
// within milliseconds of starting; the bound only ends a hung test).
func (w *Watches) Wait(t testing.TB, resource string, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.open[resource] >= n, nil
	})
	if err != nil {
		t.Fatalf("%d watches of %s did not open: %v", n, resource, err)
	}
}
