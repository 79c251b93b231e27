package hpaindex

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func hpa(ns, name string, minReplicas *int32, metrics ...autoscalingv2.MetricSpec) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: minReplicas, Metrics: metrics},
		Status:     autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: 3},
	}
}

func external(name string, sel *metav1.LabelSelector, typ autoscalingv2.MetricTargetType) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: name, Selector: sel}, Target: autoscalingv2.MetricTarget{Type: typ}}}
}

func names(hs []*HPA) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Key.String())
	}
	return out
}

// The index finds HPAs by namespace, metric (any case) and canonical selector,
// keeps what the pod selection and the advisor read, follows updates and
// deletes, and tells every subscriber each change once with the previous entry.
func TestIndex(t *testing.T) {
	x := New()
	type change struct{ old, cur string }
	var seen []change
	x.Subscribe(func(old, cur *HPA) {
		c := change{}
		if old != nil {
			c.old = old.Key.String()
		}
		if cur != nil {
			c.cur = cur.Key.String()
		}
		seen = append(seen, c)
	})
	h := x.Handler()
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod", "app": "vllm"}}
	zero := int32(0)
	h.OnAdd(hpa("llm", "b", nil, external("LLM_Saturation", sel, autoscalingv2.ValueMetricType)), false)
	h.OnAdd(hpa("llm", "a", &zero, external("llm_saturation", sel, autoscalingv2.AverageValueMetricType),
		autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType}), false)
	h.OnAdd(hpa("other", "a", nil, external("llm_saturation", sel, autoscalingv2.ValueMetricType)), false)
	bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}
	h.OnAdd(hpa("llm", "invalid", nil, external("llm_saturation", bad, autoscalingv2.ValueMetricType)), false)

	key := "app=vllm,tier=prod"
	if diff := cmp.Diff([]string{"llm/a", "llm/b"}, names(x.For("llm", "LLM_SATURATION", key))); diff != "" {
		t.Errorf("For (-want +got):\n%s", diff)
	}
	if got := x.For("llm", "llm_demand_replicas", key); len(got) != 0 {
		t.Errorf("For another metric = %v", names(got))
	}
	a := x.Get(types.NamespacedName{Namespace: "llm", Name: "a"})
	want := &HPA{Key: a.Key, Object: a.Object, MinReplicas: 0, CurrentReplicas: 3, NonExternal: true,
		External: []Metric{{Name: "llm_saturation", Selector: a.External[0].Selector, Key: key}}}
	if diff := cmp.Diff(want, a, cmp.Comparer(func(x, y *autoscalingv2.HorizontalPodAutoscaler) bool { return x == y }),
		cmp.Comparer(func(x, y Metric) bool { return x.Name == y.Name && x.Key == y.Key && x.Value == y.Value })); diff != "" {
		t.Errorf("entry (-want +got):\n%s", diff)
	}
	if b := x.Get(types.NamespacedName{Namespace: "llm", Name: "b"}); b.MinReplicas != 1 || !b.External[0].Value {
		t.Errorf("b = %+v, want minReplicas 1 (the API's default) and a Value target", b)
	}
	if inv := x.Get(types.NamespacedName{Namespace: "llm", Name: "invalid"}); len(inv.External) != 0 || inv.NonExternal {
		t.Errorf("an invalid selector's metric = %+v, want it left out", inv)
	}

	// b now reads another selector; a is deleted through a tombstone.
	h.OnUpdate(nil, hpa("llm", "b", nil, external("llm_saturation", nil, autoscalingv2.ValueMetricType)))
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "llm/a", Obj: hpa("llm", "a", nil)})
	h.OnDelete(hpa("llm", "never-added", nil))
	if got := x.For("llm", "llm_saturation", key); len(got) != 0 {
		t.Errorf("For after the update and delete = %v, want none", names(got))
	}
	if diff := cmp.Diff([]string{"llm/b"}, names(x.For("llm", "llm_saturation", ""))); diff != "" {
		t.Errorf("For the empty selector (-want +got):\n%s", diff)
	}
	wantSeen := []change{{"", "llm/b"}, {"", "llm/a"}, {"", "other/a"}, {"", "llm/invalid"}, {"llm/b", "llm/b"}, {"llm/a", ""}}
	if diff := cmp.Diff(wantSeen, seen, cmp.AllowUnexported(change{})); diff != "" {
		t.Errorf("changes seen (-want +got):\n%s", diff)
	}
	n := 0
	x.Range(func(*HPA) bool { n++; return true })
	if n != 3 {
		t.Errorf("Range saw %d HPAs, want 3", n)
	}
}
