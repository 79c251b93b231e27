package signals

import (
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

// samplesOf returns the series of an exposition body as a time-series
// database would return them: labels, value, timestamp.
func samplesOf(t *testing.T, body []byte) []Sample {
	t.Helper()
	p := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	var out []Sample
	for {
		entry, err := p.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if entry != textparse.EntrySeries {
			continue
		}
		_, ts, v := p.Series()
		var lset labels.Labels
		p.Labels(&lset)
		s := Sample{Labels: lset.Copy(), Value: v}
		if ts != nil {
			s.T = time.UnixMilli(*ts)
		}
		out = append(out, s)
	}
}

// Samples read from a database give the Reading the body gives, series in any
// order: the same dialect, engines, values, fallbacks, duplicates and
// rejections.
func TestExtractSamplesLikeBody(t *testing.T) {
	var files []string
	for _, dir := range []string{"samples", "hazards"} {
		f, _ := filepath.Glob(filepath.Join("..", "..", "testdata", dir, "*.prom"))
		files = append(files, f...)
	}
	if len(files) < 20 {
		t.Fatalf("found %d bodies", len(files))
	}
	e := NewExtractor()
	opts := cmp.Options{
		cmp.AllowUnexported(Values{}, Fold{}, EngineSignals{}),
		cmpopts.SortSlices(func(a, b string) bool { return a < b }),
		cmpopts.EquateEmpty(),
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want, wantErr := e.Extract(body)
			samples := samplesOf(t, body)
			for _, order := range []string{"as read", "reversed"} {
				if order == "reversed" {
					slices.Reverse(samples)
				}
				got, err := e.ExtractSamples(samples)
				if (err != nil) != (wantErr != nil) || (err != nil && !errors.Is(err, ErrNoEngineMetrics)) {
					t.Fatalf("%s: ExtractSamples error %v, Extract error %v", order, err, wantErr)
				}
				if err != nil {
					continue
				}
				if diff := cmp.Diff(want, got, opts); diff != "" {
					t.Errorf("%s (-body +samples):\n%s", order, diff)
				}
			}
		})
	}
}

func TestExtractSamplesRules(t *testing.T) {
	e := NewExtractor()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := func(v float64, at time.Time, kv ...string) Sample {
		return Sample{Labels: labels.FromStrings(kv...), Value: v, T: at}
	}
	t.Run("duplicates from several monitors: the newest sample wins, NaN dropped per series", func(t *testing.T) {
		r, err := e.ExtractSamples([]Sample{
			s(12, t0, "__name__", "vllm:num_requests_waiting", "engine", "0", "job", "pm"),
			s(math.NaN(), t0, "__name__", "vllm:num_requests_waiting", "engine", "0", "job", "sm"),
			s(14, t0.Add(-time.Second), "__name__", "vllm:num_requests_waiting", "engine", "0", "job", "sm2"),
		})
		if err != nil {
			t.Fatal(err)
		}
		if q, _ := r.Value(QueueDepth); q != 12 || r.Invalid[ReasonNaN] != 1 || r.Duplicates[DuplicateOlder] != 1 {
			t.Errorf("queue %g, invalid %v, duplicates %v; want 12 (the newest), one NaN rejected and one older duplicate dropped", q, r.Invalid, r.Duplicates)
		}
		if !r.SampleTime.Equal(t0) {
			t.Errorf("SampleTime %s, want the newest duplicate's (the older one is not used)", r.SampleTime)
		}
	})
	// Issue 20: a stale job beside a live one (2 and 200) was folded to 200
	// with no warning. The stale job's older sample is dropped; equally new
	// duplicates that disagree give their maximum, warned and counted.
	t.Run("a stale job beside a live one: the older sample is dropped", func(t *testing.T) {
		r, err := e.ExtractSamples([]Sample{
			s(200, t0.Add(-15*time.Second), "__name__", "vllm:num_requests_waiting", "engine", "0", "job", "stale"),
			s(2, t0, "__name__", "vllm:num_requests_waiting", "engine", "0", "job", "live"),
		})
		if err != nil {
			t.Fatal(err)
		}
		if q, _ := r.Value(QueueDepth); q != 2 || r.Duplicates[DuplicateOlder] != 1 || r.Duplicates[DuplicateDisagree] != 0 {
			t.Errorf("queue %g, duplicates %v; want 2 and one older duplicate dropped", q, r.Duplicates)
		}
		if !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "newer sample") }) {
			t.Errorf("warnings %q, want one about the dropped older duplicate", r.Warnings)
		}
	})
	t.Run("equally new duplicates that disagree: their maximum, warned and counted", func(t *testing.T) {
		r, err := e.ExtractSamples([]Sample{
			s(200, t0, "__name__", "vllm:num_requests_waiting", "engine", "0", "job", "a"),
			s(2, t0, "__name__", "vllm:num_requests_waiting", "engine", "0", "job", "b"),
		})
		if err != nil {
			t.Fatal(err)
		}
		if q, _ := r.Value(QueueDepth); q != 200 || r.Duplicates[DuplicateDisagree] != 1 {
			t.Errorf("queue %g, duplicates %v; want the maximum 200 and one disagreement counted", q, r.Duplicates)
		}
		if !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "disagree") }) {
			t.Errorf("warnings %q, want one about the disagreement", r.Warnings)
		}
	})
	t.Run("a bucket with a bad le is a parse error", func(t *testing.T) {
		_, err := e.ExtractSamples([]Sample{
			s(1, t0, "__name__", "vllm:num_requests_waiting"),
			s(1, t0, "__name__", "vllm:time_to_first_token_seconds_bucket", "le", "x"),
		})
		if !errors.Is(err, ErrParse) {
			t.Errorf("err = %v, want ErrParse", err)
		}
	})
	t.Run("series bound", func(t *testing.T) {
		small := NewExtractorWith(ExtractOptions{MaxSeries: 2})
		_, err := small.ExtractSamples([]Sample{
			s(1, t0, "__name__", "vllm:num_requests_waiting", "engine", "0"),
			s(1, t0, "__name__", "vllm:num_requests_waiting", "engine", "1"),
			s(1, t0, "__name__", "other_metric"),
			s(1, t0, "__name__", "vllm:num_requests_waiting", "engine", "2"),
		})
		if !errors.Is(err, ErrTooManySeries) {
			t.Errorf("err = %v, want ErrTooManySeries", err)
		}
	})
	t.Run("no engine metric", func(t *testing.T) {
		_, err := e.ExtractSamples([]Sample{s(3, t0, "__name__", "vllm:num_preemptions_total")})
		if !errors.Is(err, ErrNoEngineMetrics) {
			t.Errorf("err = %v, want ErrNoEngineMetrics", err)
		}
	})
}

func TestFamilies(t *testing.T) {
	kinds := map[string]FamilyType{}
	for _, f := range NewExtractor().Families() {
		if _, dup := kinds[f.Name]; dup {
			t.Errorf("%s listed twice", f.Name)
		}
		kinds[f.Name] = f.Kind
	}
	for name, want := range map[string]FamilyType{
		"vllm:num_requests_waiting": FamilyGauge, "vllm:gpu_cache_usage_perc": FamilyGauge, "sglang_num_queue_reqs": FamilyGauge,
		"nv_trt_llm_kv_cache_block_metrics": FamilyGauge, "vllm:num_preemptions_total": FamilyCounter,
		"nv_inference_request_success": FamilyCounter, "vllm:time_to_first_token_seconds": FamilyHistogram,
		"sglang_e2e_request_latency_seconds": FamilyHistogram, "llamacpp:requests_deferred": FamilyGauge,
	} {
		if got, ok := kinds[name]; !ok || got != want {
			t.Errorf("%s: kind %v (listed %v), want %v", name, got, ok, want)
		}
	}
	for _, f := range NewExtractor().Families() {
		if f.Name == "vllm:time_per_output_token_seconds" && (f.Kind != FamilyHistogram || f.Histo != InterTokenLatency) {
			t.Errorf("%+v, want the inter-token latency histogram", f)
		}
	}
	for _, f := range NewExtractorWith(ExtractOptions{}).Families() {
		if f.Kind == FamilyHistogram {
			t.Errorf("an extractor without histograms lists %s", f.Name)
		}
	}
}
