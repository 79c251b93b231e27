package signals

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFuse(t *testing.T) {
	def := DefaultTargets()
	tests := []struct {
		name    string
		reading Reading
		targets Targets
		want    *float64
		terms   int
	}{
		{name: "queue drives", reading: Reading{QueueDepth: ptr(10), KVCacheUsage: ptr(0.4)}, targets: def, want: ptr(2), terms: 2},
		{name: "KV drives (long contexts)", reading: Reading{QueueDepth: ptr(0), KVCacheUsage: ptr(0.96)}, targets: def, want: ptr(1.2), terms: 2},
		{name: "queue only (TGI)", reading: Reading{QueueDepth: ptr(5)}, targets: def, want: ptr(1), terms: 1},
		{name: "KV only after queue rejected", reading: Reading{KVCacheUsage: ptr(0.4)}, targets: def, want: ptr(0.5), terms: 1},
		{name: "no term is unknown, not zero", reading: Reading{Running: ptr(3)}, targets: def, want: nil},
		{name: "idle pod is zero", reading: Reading{QueueDepth: ptr(0), KVCacheUsage: ptr(0)}, targets: def, want: ptr(0), terms: 2},
		{name: "custom targets", reading: Reading{QueueDepth: ptr(25), KVCacheUsage: ptr(0.9)}, targets: Targets{QueueDepth: 25, KVCacheUsage: 0.9}, want: ptr(1), terms: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Fuse(&tt.reading, tt.targets)
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
func TestFuseDataParallelPod(t *testing.T) {
	r, err := NewExtractor().Extract(readTestdata(t, "hazards/BC-06.prom"))
	if err != nil {
		t.Fatal(err)
	}
	f := Fuse(&r, DefaultTargets())
	if f.Saturation == nil || math.Abs(*f.Saturation-7.4) > 1e-9 {
		t.Fatalf("saturation = %v, want 7.4", f.Saturation)
	}
}

func TestTargetsValidate(t *testing.T) {
	for _, tt := range []struct {
		t  Targets
		ok bool
	}{
		{DefaultTargets(), true},
		{Targets{QueueDepth: 0, KVCacheUsage: 0.8}, false},
		{Targets{QueueDepth: math.NaN(), KVCacheUsage: 0.8}, false},
		{Targets{QueueDepth: math.Inf(1), KVCacheUsage: 0.8}, false},
		{Targets{QueueDepth: 5, KVCacheUsage: 1.2}, false},
		{Targets{QueueDepth: 5, KVCacheUsage: math.NaN()}, false},
		{Targets{QueueDepth: 5, KVCacheUsage: 1}, true},
	} {
		if err := tt.t.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v.Validate() = %v, want ok=%v", tt.t, err, tt.ok)
		}
	}
}

func TestAggregate(t *testing.T) {
	known := func(q, kv float64) Member {
		r := &Reading{QueueDepth: ptr(q), Running: ptr(1), KVCacheUsage: ptr(kv)}
		return Member{Reading: r, Fusion: Fuse(r, DefaultTargets())}
	}
	tests := []struct {
		name    string
		members []Member
		unknown float64
		want    Pool
	}{
		{
			name:    "mean and sum",
			members: []Member{known(10, 0.4), known(0, 0.4)},
			unknown: 1,
			want:    Pool{Pods: 2, Known: 2, Saturation: 1.25, DemandReplicas: 2.5, QueueDepth: ptr(10), Running: ptr(2), KVCacheUsage: ptr(0.4)},
		},
		{
			name:    "unknown pod counts as saturated",
			members: []Member{known(0, 0), {}},
			unknown: 1,
			want:    Pool{Pods: 2, Known: 1, Saturation: 0.5, DemandReplicas: 1, QueueDepth: ptr(0), Running: ptr(1), KVCacheUsage: ptr(0)},
		},
		{
			name:    "pod with a reading but no term is unknown",
			members: []Member{{Reading: &Reading{Running: ptr(4)}}},
			unknown: 2,
			want:    Pool{Pods: 1, Known: 0, Saturation: 2, DemandReplicas: 2},
		},
		{name: "empty", want: Pool{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Aggregate(tt.members, tt.unknown)); diff != "" {
				t.Errorf("pool (-want +got):\n%s", diff)
			}
		})
	}
}
