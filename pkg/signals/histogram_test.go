package signals

import (
	"math"
	"testing"
)

func hist(bounds []float64, counts []float64, count, sum float64) *Histogram {
	return &Histogram{Bounds: bounds, Counts: counts, Count: count, Sum: sum}
}

// Quantiles computed by hand the way PromQL's histogram_quantile does
// (linear inside the bucket holding the rank; first bucket from 0; a rank in
// the +Inf bucket gives the last finite bound).
func TestHistogramQuantile(t *testing.T) {
	b := []float64{0.1, 0.5, 1, 2.5}
	tests := []struct {
		name string
		h    *Histogram
		q    float64
		want float64
		ok   bool
	}{
		// 100 observations: 10 ≤ 0.1, 50 ≤ 0.5, 90 ≤ 1, 100 ≤ 2.5.
		// p50: rank 50, bucket (0.1, 0.5] holds ranks 10..50: 0.1 + 0.4 × 40/40 = 0.5.
		{"p50 on a bound", hist(b, []float64{10, 50, 90, 100}, 100, 0), 0.5, 0.5, true},
		// p95: rank 95, bucket (1, 2.5] holds 90..100: 1 + 1.5 × 5/10 = 1.75.
		{"p95 inside a bucket", hist(b, []float64{10, 50, 90, 100}, 100, 0), 0.95, 1.75, true},
		// p5: rank 5 in the first bucket, from 0: 0.1 × 5/10 = 0.05.
		{"first bucket from zero", hist(b, []float64{10, 50, 90, 100}, 100, 0), 0.05, 0.05, true},
		// 20 of 100 observations above 2.5: p90 has rank 90 in the +Inf bucket.
		{"rank in +Inf bucket", hist(b, []float64{10, 30, 60, 80}, 100, 0), 0.9, 2.5, true},
		{"no observation", hist(b, []float64{0, 0, 0, 0}, 0, 0), 0.95, 0, false},
		{"nil", nil, 0.5, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.h.Quantile(tt.q)
			if ok != tt.ok || math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("Quantile(%g) = %g, %v; want %g, %v", tt.q, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestHistogramSince(t *testing.T) {
	b := []float64{0.1, 1}
	older := hist(b, []float64{5, 8}, 10, 4)
	newer := hist(b, []float64{7, 13}, 16, 7)
	d, reset, approx := newer.Since(older)
	if reset || approx || d.Count != 6 || d.Counts[0] != 2 || d.Counts[1] != 5 || d.Sum != 3 {
		t.Errorf("Since = %+v reset=%v approx=%v; want counts [2 5], count 6, sum 3", d, reset, approx)
	}
	// A counter reset (the engine restarted): everything in the new histogram is new.
	restarted := hist(b, []float64{1, 2}, 2, 0.5)
	d, reset, _ = restarted.Since(older)
	if !reset || d.Count != 2 || d.Counts[1] != 2 {
		t.Errorf("after a restart Since = %+v reset=%v; want the new histogram whole and reset", d, reset)
	}
	// The layout changed between scrapes (custom buckets after a redeploy with
	// no restart seen): the older is interpolated onto the new bounds and
	// negative differences clamp to 0, never below.
	nb := []float64{0.05, 0.1, 0.5, 1}
	relaid := hist(nb, []float64{3, 7, 11, 14}, 17, 8)
	d, reset, approx = relaid.Since(older)
	if reset || !approx {
		t.Fatalf("relayout: reset=%v approx=%v; want an approximate delta", reset, approx)
	}
	// older at 0.05 = 5 × 0.05/0.1 = 2.5; at 0.1 = 5; at 0.5 = 5 + 3 × 0.4/0.9;
	// at 1 = 8. New minus old: 0.5, 2, 11 − 6.333…, 6; 7 observations.
	want := []float64{0.5, 2, 11 - (5 + 3*0.4/0.9), 6}
	for i := range want {
		if math.Abs(d.Counts[i]-want[i]) > 1e-9 {
			t.Errorf("relayout counts %v, want %v", d.Counts, want)
			break
		}
	}
	if d.Count != 7 {
		t.Errorf("relayout count %g, want 7", d.Count)
	}
}

// Pods (or engines) with different bucket layouts add up on the union of the
// bounds, each interpolated inside its own buckets.
func TestHistogramAddLayouts(t *testing.T) {
	a := hist([]float64{1, 2}, []float64{4, 8}, 10, 0)
	b := hist([]float64{1.5}, []float64{6}, 6, 0)
	s := a.Add(b)
	// Union bounds 1, 1.5, 2. a at 1.5 = 4 + 4 × 0.5 = 6; b at 1 = 6 × 1/1.5 = 4; b at 2 = 6.
	wantB := []float64{1, 1.5, 2}
	wantC := []float64{8, 12, 14}
	if len(s.Bounds) != 3 || s.Count != 16 {
		t.Fatalf("Add = %+v, want bounds %v and count 16", s, wantB)
	}
	for i := range wantB {
		if s.Bounds[i] != wantB[i] || math.Abs(s.Counts[i]-wantC[i]) > 1e-12 {
			t.Errorf("Add = %v %v, want %v %v", s.Bounds, s.Counts, wantB, wantC)
			break
		}
	}
	if a.Counts[0] != 4 || b.Counts[0] != 6 {
		t.Error("Add modified its inputs")
	}
}
