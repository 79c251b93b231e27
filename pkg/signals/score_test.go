package signals

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestScore(t *testing.T) {
	def := DefaultSetPoints()
	tests := []struct {
		name      string
		reading   Reading
		setPoints SetPoints
		want      *float64
		terms     int
	}{
		{name: "queue drives", reading: Reading{QueueDepth: ptr(10), KVCacheUsage: ptr(0.4)}, setPoints: def, want: ptr(2), terms: 2},
		{name: "KV drives (long contexts)", reading: Reading{QueueDepth: ptr(0), KVCacheUsage: ptr(0.96)}, setPoints: def, want: ptr(1.2), terms: 2},
		{name: "queue only (TGI)", reading: Reading{QueueDepth: ptr(5)}, setPoints: def, want: ptr(1), terms: 1},
		{name: "KV only after queue rejected", reading: Reading{KVCacheUsage: ptr(0.4)}, setPoints: def, want: ptr(0.5), terms: 1},
		{name: "no term is unknown, not zero", reading: Reading{Running: ptr(3)}, setPoints: def, want: nil},
		{name: "idle pod is zero", reading: Reading{QueueDepth: ptr(0), KVCacheUsage: ptr(0)}, setPoints: def, want: ptr(0), terms: 2},
		{name: "custom set points", reading: Reading{QueueDepth: ptr(25), KVCacheUsage: ptr(0.9)}, setPoints: SetPoints{QueueDepth: 25, KVCacheUsage: 0.9}, want: ptr(1), terms: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Score(&tt.reading, tt.setPoints)
			if diff := cmp.Diff(tt.want, f.Saturation, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-12 })); diff != "" {
				t.Errorf("saturation (-want +got):\n%s", diff)
			}
			if len(f.Terms) != tt.terms {
				t.Errorf("terms = %+v, want %d", f.Terms, tt.terms)
			}
		})
	}
}

// BC-06 end to end: the pod with one saturated engine reads 37/5 = 7.4.
func TestScoreDataParallelPod(t *testing.T) {
	r, err := NewExtractor().Extract(readTestdata(t, "hazards/BC-06.prom"))
	if err != nil {
		t.Fatal(err)
	}
	f := Score(&r, DefaultSetPoints())
	if f.Saturation == nil || math.Abs(*f.Saturation-7.4) > 1e-9 {
		t.Fatalf("saturation = %v, want 7.4", f.Saturation)
	}
}

func TestSetPointsValidate(t *testing.T) {
	for _, tt := range []struct {
		t  SetPoints
		ok bool
	}{
		{DefaultSetPoints(), true},
		{SetPoints{QueueDepth: 0, KVCacheUsage: 0.8}, false},
		{SetPoints{QueueDepth: math.NaN(), KVCacheUsage: 0.8}, false},
		{SetPoints{QueueDepth: math.Inf(1), KVCacheUsage: 0.8}, false},
		{SetPoints{QueueDepth: 5, KVCacheUsage: 1.2}, false},
		{SetPoints{QueueDepth: 5, KVCacheUsage: math.NaN()}, false},
		{SetPoints{QueueDepth: 5, KVCacheUsage: 1}, true},
	} {
		if err := tt.t.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v.Validate() = %v, want ok=%v", tt.t, err, tt.ok)
		}
	}
}

// TestPool pins each built-in policy's pool value: means and sums, unknown pods
// at the unknown saturation, and "no data" as nil, never 0.
func TestPool(t *testing.T) {
	known := func(q, kv float64) *Reading {
		return &Reading{QueueDepth: ptr(q), Running: ptr(1), KVCacheUsage: ptr(kv)}
	}
	type values map[string]*float64 // policy name → pool value
	tests := []struct {
		name        string
		pods        []*Reading
		unknown     float64
		podsN, know int
		want        values
	}{
		{
			name: "mean and sum", pods: []*Reading{known(10, 0.4), known(0, 0.4)}, unknown: 1, podsN: 2, know: 2,
			want: values{MetricSaturation: ptr(1.25), MetricDemandReplicas: ptr(2.5), MetricQueueDepth: ptr(10), MetricRunning: ptr(2), MetricKVCacheUsage: ptr(0.4)},
		},
		{
			name: "unknown pod counts as saturated", pods: []*Reading{known(0, 0), nil}, unknown: 1, podsN: 2, know: 1,
			want: values{MetricSaturation: ptr(0.5), MetricDemandReplicas: ptr(1), MetricQueueDepth: ptr(0), MetricRunning: ptr(1), MetricKVCacheUsage: ptr(0)},
		},
		{
			// No known pod: every policy's value is nil ("no data"), whatever the
			// unknown saturation, so the server answers an error and the HPA holds.
			name: "pod with a reading but no term is unknown", pods: []*Reading{{Running: ptr(4)}}, unknown: 2, podsN: 1, know: 0,
			want: values{},
		},
		{
			name: "a signal no known pod reports is nil", pods: []*Reading{{QueueDepth: ptr(3)}}, unknown: 1, podsN: 1, know: 1,
			want: values{MetricSaturation: ptr(0.6), MetricDemandReplicas: ptr(0.6), MetricQueueDepth: ptr(3)},
		},
		{name: "empty", want: values{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := BuiltinCatalog(DefaultSetPoints(), tt.unknown)
			if err != nil {
				t.Fatal(err)
			}
			got := values{}
			for _, name := range c.Names() {
				b := c.Lookup(name).NewPool()
				for _, r := range tt.pods {
					b.Add(r)
				}
				p := b.Pool()
				if p.Pods != tt.podsN || p.Known != tt.know {
					t.Errorf("%s: pods %d known %d, want %d and %d", name, p.Pods, p.Known, tt.podsN, tt.know)
				}
				if p.Value != nil {
					got[name] = p.Value
				}
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-12 })); diff != "" {
				t.Errorf("pool values (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodValueMatchesScore: the per-pod part a pool reports is the saturation
// Score computes, for every pod and kind, so per-pod answers, pool answers and
// explain agree.
func TestPodValueMatchesScore(t *testing.T) {
	c, err := BuiltinCatalog(DefaultSetPoints(), 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewExtractor().Extract(readTestdata(t, "hazards/BC-06.prom"))
	if err != nil {
		t.Fatal(err)
	}
	want := Score(&r, DefaultSetPoints())
	for _, name := range []string{MetricSaturation, MetricDemandReplicas} {
		b := c.Lookup(name).NewPool()
		if v := b.Add(&r); !v.Known || !v.Present || v.Value != *want.Saturation {
			t.Errorf("%s: pod value %+v, want known and present at %g", name, v, *want.Saturation)
		}
		if v := b.Add(nil); v.Known || v.Present {
			t.Errorf("%s: a pod without a reading is %+v, want unknown and absent", name, v)
		}
	}
	b := c.Lookup(MetricQueueDepth).NewPool()
	if v := b.Add(&r); !v.Present || v.Value != 37 {
		t.Errorf("queue depth pod value %+v, want 37", v)
	}
}

func TestCatalog(t *testing.T) {
	c, err := BuiltinCatalog(DefaultSetPoints(), DefaultUnknownSaturation)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{MetricSaturation, MetricDemandReplicas, MetricQueueDepth, MetricRunning, MetricKVCacheUsage}, c.Names()); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{MetricSaturation, MetricQueueDepth, MetricRunning, MetricKVCacheUsage}, c.PerPodNames()); diff != "" {
		t.Errorf("per-pod names (-want +got):\n%s", diff)
	}
	// BC-15: the HPA lower-cases names; lookups are case-insensitive.
	if c.Lookup("LLM_Saturation") == nil || c.Lookup("cpu_usage") != nil {
		t.Error("lookup is not case-insensitive or finds an unknown name")
	}
	for _, bad := range []struct {
		p    Policy
		want string
	}{
		{Policy{Name: "LLM", Kind: KindSignal, Signal: QueueDepth}, "lower-case"},
		{Policy{Name: "x", Kind: KindMean, SetPoints: SetPoints{QueueDepth: 0, KVCacheUsage: 0.8}}, "queue depth set point"},
		{Policy{Name: "x", Kind: KindMean, SetPoints: DefaultSetPoints(), UnknownSaturation: math.NaN()}, "unknown-pod saturation"},
		{Policy{Name: "x", Kind: KindSignal, Signal: Preemptions}, "cannot be served"},
		{Policy{Name: "x", Kind: "median"}, "unknown kind"},
	} {
		if _, err := NewCatalog(bad.p); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("NewCatalog(%+v) = %v, want an error containing %q", bad.p, err, bad.want)
		}
	}
	p := Policy{Name: "x", Kind: KindSignal, Signal: Running}
	if _, err := NewCatalog(p, p); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate policy: %v", err)
	}
}
