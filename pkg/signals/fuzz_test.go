package signals

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// seedBodies adds every sample and hazard body as a seed.
func seedBodies(f *testing.F) {
	for _, dir := range []string{"samples", "hazards"} {
		files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", dir, "*.prom"))
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, "")
		}
	}
	f.Add([]byte("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\"} 3 1764590400.5\n# EOF\n"), "application/openmetrics-text; version=1.0.0")
	f.Add([]byte("\xef\xbb\xbf  vllm:num_requests_waiting{engine=\"0\"} 1e309\r\nvllm:kv_cache_usage_perc 1.0000001\n"), "")
	// Two models on one engine label: two engines, whatever the order.
	f.Add([]byte(twoModelsSmall+twoModelsBig+"vllm:num_requests_waiting{engine=\"0\"} 3\n"), "")
}

// checkReading asserts the invariants of any reading: every value present is
// finite, non-negative, and within its range; warnings and labels are bounded.
func checkReading(t *testing.T, r *Reading) {
	t.Helper()
	check := func(where string, x *Values) {
		for s := range NumSignals {
			v, ok := x.Value(s)
			if !ok {
				continue
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || (s.isRatio() && v > 1) {
				t.Fatalf("%s: %s = %g", where, s, v)
			}
		}
	}
	check("pod", &r.Values)
	for i := range r.Engines {
		check("engine "+r.Engines[i].ID, &r.Engines[i].Values)
		if len(r.Engines[i].ID) > maxLabelBytes+4 || len(r.Engines[i].Model) > maxLabelBytes+4 {
			t.Fatalf("engine label kept at %d bytes", len(r.Engines[i].ID))
		}
		for _, h := range r.Engines[i].Hist {
			checkHistogram(t, h)
		}
	}
	if len(r.Warnings) > maxWarnings+1 || len(r.Models) > maxModels {
		t.Fatalf("%d warnings, %d models kept", len(r.Warnings), len(r.Models))
	}
	for _, w := range r.Warnings {
		if len(w) > maxWarningBytes+4 {
			t.Fatalf("warning of %d bytes", len(w))
		}
	}
}

func checkHistogram(t *testing.T, h *Histogram) {
	t.Helper()
	if h == nil {
		return
	}
	prev := 0.0
	for i, c := range h.Counts {
		if math.IsNaN(c) || c < prev || c > h.Count || math.IsInf(h.Bounds[i], 0) || (i > 0 && h.Bounds[i] <= h.Bounds[i-1]) {
			t.Fatalf("histogram %+v is not cumulative with finite ascending bounds", h)
		}
		prev = c
	}
	for _, q := range []float64{0, 0.5, 0.95, 1} {
		if v, ok := h.Quantile(q); ok && (math.IsNaN(v) || math.IsInf(v, 0) || v < math.Min(0, h.Bounds[0]) || v > h.Bounds[len(h.Bounds)-1]) {
			t.Fatalf("quantile %g = %g of %+v", q, v, h)
		}
	}
}

// FuzzExtract: any body either fails with a bounded, named error, or gives a
// reading whose every value is finite, non-negative and in range; never a panic.
// And the series cache changes nothing: a fresh extractor (nothing learned)
// and the shared one, once and again (everything learnable learned), give
// the same reading or the same error.
func FuzzExtract(f *testing.F) {
	seedBodies(f)
	opts := ExtractOptions{Histograms: true, MaxSeries: 2000, MaxEngines: 64}
	e := NewExtractorWith(opts)
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		cold, coldErr := NewExtractorWith(opts).ExtractContent(body, contentType)
		for range 2 {
			r, err := e.ExtractContent(body, contentType)
			if fmt.Sprint(err) != fmt.Sprint(coldErr) {
				t.Fatalf("error %v, without the series cache %v", err, coldErr)
			}
			if diff := cmp.Diff(cold, r, cmp.AllowUnexported(Reading{}, Fold{}, EngineSignals{}, Values{})); diff != "" {
				t.Fatalf("reading differs from the one without the series cache (-without +with):\n%s", diff)
			}
		}
		if coldErr != nil {
			if len(coldErr.Error()) > 1024 {
				t.Fatalf("error of %d bytes", len(coldErr.Error()))
			}
			return
		}
		checkReading(t, &cold)
	})
}

// FuzzHistogramSince: deltas of arbitrary cumulative histograms stay
// cumulative, non-negative and bounded by the newer one.
func FuzzHistogramSince(f *testing.F) {
	f.Add(1.0, 2.0, 3.0, 10.0, 0.5, 1.0, 4.0, 6.0)
	f.Fuzz(func(t *testing.T, b1, b2, c1, c2, ob, oc1, oc2, ocount float64) {
		mk := func(bounds, counts []float64, count float64) *Histogram {
			for i, b := range bounds {
				if math.IsNaN(b) || math.IsInf(b, 0) || (i > 0 && b <= bounds[i-1]) {
					return nil
				}
			}
			prev := 0.0
			for _, c := range counts {
				if math.IsNaN(c) || c < prev || c > 1e15 {
					return nil
				}
				prev = c
			}
			if math.IsNaN(count) || count < prev || count > 1e15 {
				return nil
			}
			return &Histogram{Bounds: bounds, Counts: counts, Count: count}
		}
		newer := mk([]float64{b1, b2}, []float64{c1, c2}, math.Max(c2, 12))
		older := mk([]float64{ob}, []float64{oc1}, math.Max(oc1, ocount))
		if newer == nil || older == nil {
			return
		}
		_ = oc2
		d, _, _ := newer.Since(older)
		checkHistogram(t, d)
		if d.Count > newer.Count {
			t.Fatalf("delta %+v larger than %+v", d, newer)
		}
	})
}
