package podselect

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

func startInternal(t *testing.T, opts Options, clk *clocktesting.FakeClock, objs ...runtime.Object) *Selection {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	inf, err := NewInformers(fake.NewClientset(objs...), nil)
	if err != nil {
		t.Fatal(err)
	}
	sel := New(opts, inf.Pods(), clk)
	if err := inf.AddHPAHandler(sel.HPAHandler()); err != nil {
		t.Fatal(err)
	}
	if err := inf.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return sel
}

func readyPod(ns, name string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls, UID: types.UID(ns + "/" + name)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// remembered returns the number of request interests and the member cache's
// pools and members.
func (s *Selection) remembered() (interests, pools, members int) {
	s.mu.Lock()
	interests = len(s.asked)
	if s.lru.Len() != interests {
		panic("interest index and LRU list disagree")
	}
	s.mu.Unlock()
	s.memberMu.Lock()
	defer s.memberMu.Unlock()
	n := 0
	for _, m := range s.members {
		n += len(m.members)
	}
	if n != s.cachedMembers {
		panic("cached member count is off")
	}
	return interests, len(s.members), n
}

// Issue 12, faults 5: one user with a Role in one namespace sent 58,000
// distinct selectors, or 700 of 100 KB; every one was kept for the idle
// timeout. Now the request interests, the selectors' length and the member
// cache are bounded, and the selectors of HPAs are never evicted by requests.
func TestInterestsAreBounded(t *testing.T) {
	app := map[string]string{"app": "vllm"}
	objs := []runtime.Object{readyPod("llm", "vllm-0", app)}
	for i := range 5 {
		objs = append(objs, readyPod("llm", fmt.Sprintf("other-%d", i), map[string]string{"app": "other"}))
	}
	objs = append(objs, &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: "vllm"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{Metrics: []autoscalingv2.MetricSpec{{
			Type: autoscalingv2.ExternalMetricSourceType,
			External: &autoscalingv2.ExternalMetricSource{Metric: autoscalingv2.MetricIdentifier{
				Name: "llm_saturation", Selector: &metav1.LabelSelector{MatchLabels: app}}},
		}}},
	})
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	opts := Options{Port: 8000, Path: "/metrics", Scheme: "http", IdleTimeout: 10 * time.Minute, MaxRequestSelectors: 100,
		Serves: func(m string) bool { return m == "llm_saturation" }}
	s := startInternal(t, opts, clk, objs...)
	hpaSel := labels.SelectorFromSet(app)

	t.Run("an HPA's selector is not stored again", func(t *testing.T) {
		s.RecordInterest("llm", hpaSel)
		if n, _, _ := s.remembered(); n != 0 {
			t.Errorf("%d request interests, want 0: the HPA already puts its selector in the scrape set", n)
		}
	})
	t.Run("58,000 distinct selectors", func(t *testing.T) {
		// A person re-asks one selector now and then; it must survive.
		kept, err := labels.Parse("app=other")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 58000 {
			sel, err := labels.Parse(fmt.Sprintf("app=other,run notin (r%d)", i))
			if err != nil {
				t.Fatal(err)
			}
			s.RecordInterest("llm", sel)
			if _, err := s.Members("llm", sel); err != nil {
				t.Fatal(err)
			}
			if i%50 == 0 {
				s.RecordInterest("llm", kept)
			}
		}
		interests, pools, members := s.remembered()
		if interests > opts.MaxRequestSelectors {
			t.Errorf("%d request interests remembered, want at most %d", interests, opts.MaxRequestSelectors)
		}
		if pools > maxCachedPools || members > maxCachedMembers {
			t.Errorf("member cache holds %d pools, %d members; want at most %d, %d", pools, members, maxCachedPools, maxCachedMembers)
		}
		names := map[string]bool{}
		for _, in := range s.interests() {
			names[in.namespace+"/"+in.selector.String()] = true
		}
		if !names["llm/app=other"] || !names["llm/app=vllm"] {
			t.Errorf("interests lost a selector asked again recently or the HPA's: %d interests", len(names))
		}
		targets := map[string]bool{}
		for _, tg := range s.Targets() {
			targets[tg.Pod.Name] = true
		}
		if !targets["vllm-0"] {
			t.Error("the HPA's pod left the scrape set")
		}
	})
	t.Run("100 KB selectors", func(t *testing.T) {
		before, _, _ := s.remembered()
		for i := range 10 {
			sel, err := labels.Parse(fmt.Sprintf("app=other,run notin (%s%d)", strings.Repeat("r", 60), i) + strings.Repeat(",x notin (y)", 100<<10/12))
			if err != nil {
				t.Fatal(err)
			}
			if len(sel.String()) < 100<<10 {
				t.Fatalf("selector of %d bytes, want 100 KB", len(sel.String()))
			}
			s.RecordInterest("llm", sel)
			members, err := s.Members("llm", sel)
			if err != nil || len(members) != 5 {
				t.Fatalf("Members() = %d, %v; want the 5 pods it matches", len(members), err)
			}
		}
		interests, _, _ := s.remembered()
		if interests != before {
			t.Errorf("request interests %d → %d: a selector longer than %d bytes must not be remembered", before, interests, MaxSelectorBytes)
		}
		s.memberMu.Lock()
		defer s.memberMu.Unlock()
		for k := range s.members {
			if len(k) > MaxSelectorBytes+len("llm")+1 {
				t.Fatalf("member cache keeps a %d-byte selector", len(k))
			}
		}
	})
}

// A namespace's flood of selectors once emptied the whole member cache each
// time it filled, so every other namespace's pools were listed and matched
// again (and their aggregates rebuilt): now the namespace holding the most
// lists (or members) lets its own go, and the others keep the same lists.
func TestMemberCacheEvictsTheNamespaceHoldingMost(t *testing.T) {
	app := map[string]string{"app": "vllm"}
	objs := []runtime.Object{readyPod("quiet", "vllm-0", app), readyPod("quiet", "vllm-1", app)}
	for i := range 30 {
		objs = append(objs, readyPod("noisy", fmt.Sprintf("pod-%d", i), map[string]string{"app": "vllm", "i": fmt.Sprint(i)}))
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	s := startInternal(t, Options{Port: 8000, Path: "/metrics", Scheme: "http", IdleTimeout: time.Minute, MaxRequestSelectors: 10,
		Serves: func(string) bool { return true }}, clk, objs...)
	quietSel := labels.SelectorFromSet(app)
	quiet, err := s.Members("quiet", quietSel)
	if err != nil || len(quiet) != 2 {
		t.Fatalf("Members(quiet) = %d, %v; want 2", len(quiet), err)
	}
	// 3 × maxCachedPools selectors of one pod each (the list bound), then as
	// many of all 30 pods (past maxCachedMembers in all).
	for _, flood := range []struct {
		selector string
		pods     int
	}{{"app=vllm,i=7,run notin (r%d)", 1}, {"app=vllm,run notin (r%d)", 30}} {
		for i := range 3 * maxCachedPools {
			sel, err := labels.Parse(fmt.Sprintf(flood.selector, i))
			if err != nil {
				t.Fatal(err)
			}
			if m, err := s.Members("noisy", sel); err != nil || len(m) != flood.pods {
				t.Fatalf("Members(noisy) = %d, %v; want %d", len(m), err, flood.pods)
			}
		}
		_, pools, members := s.remembered()
		if pools > maxCachedPools || members > maxCachedMembers {
			t.Errorf("%s: member cache holds %d pools, %d members; want at most %d, %d", flood.selector, pools, members, maxCachedPools, maxCachedMembers)
		}
		again, err := s.Members("quiet", quietSel)
		if err != nil || len(again) != 2 || &again[0] != &quiet[0] {
			t.Errorf("%s: the quiet namespace's list was dropped by another namespace's flood", flood.selector)
		}
	}
}

// One namespace's flood of request selectors once forgot every other
// namespace's, least recently asked first: the selector an HPA of type Pods
// asks every 15 s in a quiet namespace went whenever the flood was faster, and
// its pods left the background scrape. Now the namespace holding the most
// forgets its own least recently asked; the counts follow the list.
func TestInterestsEvictTheNamespaceHoldingMost(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	s := startInternal(t, Options{Port: 8000, Path: "/metrics", Scheme: "http", IdleTimeout: time.Hour, MaxRequestSelectors: 10,
		Serves: func(string) bool { return true }}, clk)
	ask := func(ns, sel string) {
		s.RecordInterest(ns, labels.SelectorFromSet(map[string]string{"app": sel}))
		clk.Step(time.Second)
	}
	ask("quiet", "pods-hpa")
	ask("middle", "m1")
	ask("middle", "m2")
	for i := range 500 {
		ask("noisy", fmt.Sprint("n", i))
	}
	byNS := map[string][]string{}
	for _, in := range s.interests() {
		byNS[in.namespace] = append(byNS[in.namespace], in.selector.String())
	}
	if len(byNS["quiet"]) != 1 || len(byNS["middle"]) != 2 || len(byNS["noisy"]) != 7 {
		t.Errorf("interests by namespace %v, want quiet's 1, middle's 2 and the 7 most recent of noisy", byNS)
	}
	if got := byNS["noisy"][0]; got != "app=n499" {
		t.Errorf("noisy's most recent interest is %s, want app=n499 (the newest kept)", got)
	}
	// The per-namespace counts follow the list.
	s.mu.Lock()
	total := 0
	for _, c := range s.askedByNS {
		total += c
	}
	s.mu.Unlock()
	if total != 10 {
		t.Errorf("askedByNS counts %d interests, the list holds 10", total)
	}
}

// The least recently asked request selector goes first; idle ones go after
// the idle timeout.
func TestInterestsEvictLeastRecentlyAsked(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	opts := Options{Port: 8000, Path: "/metrics", Scheme: "http", IdleTimeout: time.Minute, MaxRequestSelectors: 3,
		Serves: func(string) bool { return true }}
	s := startInternal(t, opts, clk)
	ask := func(sel string) {
		s.RecordInterest("llm", labels.SelectorFromSet(map[string]string{"app": sel}))
		clk.Step(time.Second)
	}
	names := func() []string {
		var out []string
		for _, in := range s.interests() {
			out = append(out, in.selector.String())
		}
		return out
	}
	ask("a")
	ask("b")
	ask("c")
	ask("a") // a is recent again
	ask("d") // b goes
	if got, want := strings.Join(names(), " "), "app=d app=a app=c"; got != want {
		t.Errorf("interests %q, want %q", got, want)
	}
	clk.Step(time.Minute - 2*time.Second) // c (asked 4 s ago + 58 s) is idle
	if got, want := strings.Join(names(), " "), "app=d app=a"; got != want {
		t.Errorf("interests %q, want %q", got, want)
	}
}
