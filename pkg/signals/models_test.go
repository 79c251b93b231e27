package signals

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Two vLLM containers of one pod scraped together (or a multi-model server):
// engine label "0" carries two models, with a TTFT histogram each.
const (
	twoModelsBig = "vllm:num_requests_waiting{engine=\"0\",model_name=\"big\"} 40\n" +
		"vllm:num_requests_running{engine=\"0\",model_name=\"big\"} 8\n" +
		"vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"big\"} 0.9\n" +
		"vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"big\",le=\"1\"} 2\n" +
		"vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"big\",le=\"+Inf\"} 5\n" +
		"vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"big\"} 5\n"
	twoModelsSmall = "vllm:num_requests_waiting{engine=\"0\",model_name=\"small\"} 0\n" +
		"vllm:num_requests_running{engine=\"0\",model_name=\"small\"} 0\n" +
		"vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"small\"} 0.1\n" +
		"vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"small\",le=\"1\"} 1\n" +
		"vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"small\",le=\"+Inf\"} 1\n" +
		"vllm:time_to_first_token_seconds_count{engine=\"0\",model_name=\"small\"} 1\n"
)

// engineView is what TestEngineModels pins of an engine.
type engineView struct {
	ID, Model      string
	Queue, Running *float64
	TTFTCount      float64
}

func engineViews(r *Reading) []engineView {
	var out []engineView
	for i := range r.Engines {
		e := &r.Engines[i]
		v := engineView{ID: e.ID, Model: e.Model, Queue: e.Ptr(QueueDepth), Running: e.Ptr(Running)}
		if h := e.Hist[TTFT]; h != nil {
			v.TTFTCount = h.Count
		}
		out = append(out, v)
	}
	return out
}

// TestEngineModels: series that differ in the dialect's model label are not
// duplicates of one engine. An engine label value carrying several models is
// one engine per model, its ID the value and the model joined by "/", in
// whatever order the lines come, from a body (through the series cache or
// not) and from a time-series database's samples alike; a value with one
// model keeps its ID.
func TestEngineModels(t *testing.T) {
	tests := []struct {
		name     string
		a, b     string // two halves of the body, read in both orders
		dialect  string
		engines  []engineView
		warnings []string // a substring of a warning
	}{
		{
			name: "two models on one engine label", a: twoModelsBig, b: twoModelsSmall, dialect: "vllm-v1",
			engines: []engineView{
				{ID: "0/big", Model: "big", Queue: ptr(40), Running: ptr(8), TTFTCount: 5},
				{ID: "0/small", Model: "small", Queue: ptr(0), Running: ptr(0), TTFTCount: 1},
			},
		},
		{
			name:    "one model per engine label keeps its ID",
			a:       "vllm:num_requests_waiting{engine=\"0\",model_name=\"big\"} 4\nvllm:num_preemptions_total{engine=\"0\"} 2\n",
			b:       "vllm:num_requests_waiting{engine=\"1\",model_name=\"big\"} 1\nvllm:num_requests_running{engine=\"0\",model_name=\"big\"} 3\n",
			dialect: "vllm-v1",
			engines: []engineView{{ID: "0", Model: "big", Queue: ptr(4), Running: ptr(3)}, {ID: "1", Model: "big", Queue: ptr(1)}},
		},
		{
			name:    "vLLM V0: no engine label, two models",
			a:       "vllm:num_requests_waiting{model_name=\"big\"} 4\nvllm:gpu_cache_usage_perc{model_name=\"big\"} 0.5\n",
			b:       "vllm:num_requests_waiting{model_name=\"small\"} 1\nvllm:gpu_cache_usage_perc{model_name=\"small\"} 0.2\n",
			dialect: "vllm-v0",
			engines: []engineView{{ID: "/big", Model: "big", Queue: ptr(4)}, {ID: "/small", Model: "small", Queue: ptr(1)}},
		},
		{
			// A series without the model label of a signal the models have is
			// their aggregate; of another signal, an engine of its own.
			name:    "a series without the model label beside two models",
			a:       twoModelsBig + "vllm:num_requests_waiting{engine=\"0\"} 40\n",
			b:       twoModelsSmall + "vllm:num_preemptions_total{engine=\"0\"} 3\n",
			dialect: "vllm-v1",
			engines: []engineView{
				{ID: "0"},
				{ID: "0/big", Model: "big", Queue: ptr(40), Running: ptr(8), TTFTCount: 5},
				{ID: "0/small", Model: "small", Queue: ptr(0), Running: ptr(0), TTFTCount: 1},
			},
			warnings: []string{"a series of vllm:num_requests_waiting without the model_name label beside series of several models of one engine is an aggregate"},
		},
		{
			// Engine label "0/big" beside engine "0" with models big and
			// small: three engines, never two sharing an ID.
			name:    "an engine label value that is another's ID and model",
			a:       "vllm:num_requests_waiting{engine=\"0/big\",model_name=\"x\"} 7\nvllm:num_requests_waiting{engine=\"0\",model_name=\"big\"} 40\n",
			b:       "vllm:num_requests_waiting{engine=\"0\",model_name=\"small\"} 1\n",
			dialect: "vllm-v1",
			engines: []engineView{
				{ID: "0/big", Model: "x", Queue: ptr(7)},
				{ID: modelEngineID("0", "big", true), Model: "big", Queue: ptr(40)},
				{ID: "0/small", Model: "small", Queue: ptr(1)},
			},
		},
		{
			name:    "SGLang: two models on one data-parallel rank",
			a:       "sglang:num_queue_reqs{dp_rank=\"0\",model_name=\"big\"} 6\nsglang:token_usage{dp_rank=\"0\",model_name=\"big\"} 0.5\n",
			b:       "sglang:num_queue_reqs{dp_rank=\"0\",model_name=\"small\"} 2\nsglang:token_usage{dp_rank=\"0\",model_name=\"small\"} 0.25\n",
			dialect: "sglang",
			engines: []engineView{{ID: "0/big", Model: "big", Queue: ptr(6)}, {ID: "0/small", Model: "small", Queue: ptr(2)}},
		},
		{
			name:    "trtllm-serve: no engine labels, two models",
			a:       "trtllm_num_requests_waiting{model_name=\"big\"} 3\ntrtllm_num_requests_running{model_name=\"big\"} 1\n",
			b:       "trtllm_num_requests_waiting{model_name=\"small\"} 0\ntrtllm_num_requests_running{model_name=\"small\"} 2\n",
			dialect: "trtllm",
			engines: []engineView{{ID: "/big", Model: "big", Queue: ptr(3), Running: ptr(1)}, {ID: "/small", Model: "small", Queue: ptr(0), Running: ptr(2)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shared := NewExtractor()
			var first *Reading
			for _, order := range []string{"a first", "b first"} {
				body := tt.a + tt.b
				if order == "b first" {
					body = tt.b + tt.a
				}
				cold := NewExtractor()
				cold.series.off = true
				want, err := cold.Extract([]byte(body))
				if err != nil {
					t.Fatalf("%s: %v", order, err)
				}
				if want.Dialect != tt.dialect {
					t.Errorf("%s: dialect %q, want %q", order, want.Dialect, tt.dialect)
				}
				if diff := cmp.Diff(tt.engines, engineViews(&want)); diff != "" {
					t.Errorf("%s: engines (-want +got):\n%s", order, diff)
				}
				for _, w := range tt.warnings {
					if !slices.ContainsFunc(want.Warnings, func(got string) bool { return strings.Contains(got, w) }) {
						t.Errorf("%s: no warning %q in %q", order, w, want.Warnings)
					}
				}
				// Through the series cache (learned, then answered) as without it.
				for pass := range 2 {
					got, err := shared.Extract([]byte(body))
					if err != nil {
						t.Fatal(err)
					}
					if diff := cmp.Diff(want, got, cmpReading); diff != "" {
						t.Errorf("%s, pass %d: reading through the series cache differs (-cold +cached):\n%s", order, pass, diff)
					}
				}
				// From a database's samples, in either order.
				samples := samplesOf(t, []byte(body))
				for _, rev := range []bool{false, true} {
					if rev {
						slices.Reverse(samples)
					}
					got, err := shared.ExtractSamples(samples)
					if err != nil {
						t.Fatal(err)
					}
					if diff := cmp.Diff(want, got, cmpReading, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(Reading{}, "Warnings")); diff != "" {
						t.Errorf("%s, samples reversed %v (-body +samples):\n%s", order, rev, diff)
					}
				}
				// The order of the lines changes nothing but the warnings' order.
				if first == nil {
					first = &want
				} else if diff := cmp.Diff(*first, want, cmpReading, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
					t.Errorf("the order of the lines matters (-a first +b first):\n%s", diff)
				}
			}
		})
	}
}
