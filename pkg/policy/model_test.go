package policy

import (
	"fmt"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// One engine label value ("0") carrying two models (two vLLM containers of
// one pod scraped together, or a multi-model server) is two engines, one per
// model: big's queue of 40 once counted for small (8 = 40 / 5) when small's
// lines came first, and for neither model when big's did.
const (
	modelBig   = "vllm:num_requests_waiting{engine=\"0\",model_name=\"big\"} 40\nvllm:num_requests_running{engine=\"0\",model_name=\"big\"} 8\n"
	modelSmall = "vllm:num_requests_waiting{engine=\"0\",model_name=\"small\"} 0\nvllm:num_requests_running{engine=\"0\",model_name=\"small\"} 0\n"
)

func TestModelFilterOrderIndependent(t *testing.T) {
	c, err := NewCatalog(Policy{Name: "small", Kind: KindMean, Model: "small", UnknownSaturation: 1, Terms: []Term{{Kind: TermQueueDepth, SetPoint: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	big, small := modelBig, modelSmall
	a := poolOf(t, c, "small", t0, pod{readings: []*signals.Reading{read(t, big+small, t0)}})
	b := poolOf(t, c, "small", t0, pod{readings: []*signals.Reading{read(t, small+big, t0)}})
	if fmt.Sprint(deref(a.Value)) != fmt.Sprint(deref(b.Value)) {
		t.Errorf("order-dependent: %v vs %v", deref(a.Value), deref(b.Value))
	}
	if b.Value == nil || *b.Value != 0 {
		t.Errorf("model=small served %v: want 0 (small's own queue)", deref(b.Value))
	}
}

// TestModelFilterEachModelItsOwn: each model's policy reads its own engine's
// queue, in either order of the lines, and a policy without a model counts
// both engines.
func TestModelFilterEachModelItsOwn(t *testing.T) {
	terms := []Term{{Kind: TermQueueDepth, SetPoint: 5}}
	c, err := NewCatalog(
		Policy{Name: "small", Kind: KindMean, Model: "small", UnknownSaturation: 1, Terms: terms},
		Policy{Name: "big", Kind: KindMean, Model: "big", UnknownSaturation: 1, Terms: terms},
		Policy{Name: "both", Kind: KindMean, UnknownSaturation: 1, Terms: terms},
	)
	if err != nil {
		t.Fatal(err)
	}
	for order, body := range map[string]string{"big's lines first": modelBig + modelSmall, "small's lines first": modelSmall + modelBig} {
		for policy, want := range map[string]float64{"small": 0, "big": 8, "both": 8} {
			p := poolOf(t, c, policy, t0, pod{readings: []*signals.Reading{read(t, body, t0)}})
			if p.Value == nil || *p.Value != want {
				t.Errorf("%s, policy %s: served %v, want %g", order, policy, deref(p.Value), want)
			}
		}
	}
}
