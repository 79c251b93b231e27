package signals

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func ptr(v float64) *float64 { return &v }

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// want is the part of a Reading a test pins down.
type want struct {
	Dialect         string
	Models          []string
	Sources         map[string]string
	EngineIDs       []string
	QueueDepth      *float64
	Running         *float64
	KVCacheUsage    *float64
	KVCacheUsageMax *float64
	Preemptions     *float64
	Invalid         map[Reason]int
	Warnings        []string // substrings, in order
}

func summarize(r Reading) want {
	w := want{
		Dialect: r.Dialect, Models: r.Models, Sources: classicSources(r.Sources),
		QueueDepth: r.Ptr(QueueDepth), Running: r.Ptr(Running), KVCacheUsage: r.Ptr(KVCacheUsage),
		KVCacheUsageMax: r.KVCacheUsageMax, Preemptions: r.Ptr(Preemptions), Invalid: r.Invalid,
	}
	for _, e := range r.Engines {
		w.EngineIDs = append(w.EngineIDs, e.ID)
	}
	return w
}

// classicSources keeps the sources of the four classic signals, which these
// tests pin; the others are covered by their own tests.
func classicSources(m map[string]string) map[string]string {
	out := map[string]string{}
	for _, s := range []Signal{QueueDepth, Running, KVCacheUsage, Preemptions} {
		if v, ok := m[s.String()]; ok {
			out[s.String()] = v
		}
	}
	return out
}

func TestExtractRealSamples(t *testing.T) {
	tests := []struct {
		file string
		want want
	}{
		{
			file: "samples/vllm_v1-0.10-nvcr25.09_single-engine.prom",
			want: want{
				Dialect: "vllm-v1", Models: []string{"Qwen/Qwen3-4B-Instruct-2507-FP8"},
				Sources: map[string]string{
					"queueDepth": "vllm:num_requests_waiting", "running": "vllm:num_requests_running",
					"kvCacheUsage": "vllm:kv_cache_usage_perc", "preemptions": "vllm:num_preemptions_total",
				},
				EngineIDs:  []string{"0"},
				QueueDepth: ptr(0), Running: ptr(0), KVCacheUsage: ptr(0.0011764705882353343),
				KVCacheUsageMax: ptr(0.0011764705882353343), Preemptions: ptr(0),
			},
		},
		{
			file: "samples/vllm_v0-0.6-qwenvl-issue55_excerpt.prom",
			want: want{
				Dialect: "vllm-v0", Models: []string{"qwenvl"},
				Sources: map[string]string{
					"queueDepth": "vllm:num_requests_waiting", "running": "vllm:num_requests_running",
					"kvCacheUsage": "vllm:gpu_cache_usage_perc",
				},
				EngineIDs:  []string{""},
				QueueDepth: ptr(0), Running: ptr(0), KVCacheUsage: ptr(0), KVCacheUsageMax: ptr(0),
			},
		},
		{
			file: "samples/llm-d-inference-sim_v0.10.2_load.prom",
			want: want{
				Dialect: "vllm-v1", Models: []string{"fake-model"},
				Sources: map[string]string{
					"queueDepth": "vllm:num_requests_waiting", "running": "vllm:num_requests_running",
					"kvCacheUsage": "vllm:kv_cache_usage_perc",
				},
				EngineIDs:  []string{""},
				QueueDepth: ptr(4), Running: ptr(2), KVCacheUsage: ptr(0.015625), KVCacheUsageMax: ptr(0.015625),
			},
		},
		{
			file: "samples/sglang_v0.4-docs.prom",
			want: want{
				Dialect: "sglang", Models: []string{"meta-llama/Llama-3.1-8B-Instruct"},
				Sources: map[string]string{
					"queueDepth": "sglang:num_queue_reqs", "running": "sglang:num_running_reqs",
					"kvCacheUsage": "sglang:token_usage",
				},
				EngineIDs:  []string{""},
				QueueDepth: ptr(2826), Running: ptr(162), KVCacheUsage: ptr(0.28), KVCacheUsageMax: ptr(0.28),
			},
		},
		{
			file: "samples/triton-trtllm_readme.prom",
			want: want{
				Dialect: "triton-trtllm", Models: []string{"tensorrt_llm"},
				Sources: map[string]string{
					"queueDepth":   `nv_trt_llm_request_metrics{request_type="waiting"}`,
					"running":      `nv_trt_llm_request_metrics{request_type="active"}`,
					"kvCacheUsage": `nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}`,
				},
				EngineIDs:  []string{"tensorrt_llm/1"}, // model and version
				QueueDepth: ptr(1), Running: ptr(0), KVCacheUsage: ptr(0.4875), KVCacheUsageMax: ptr(0.4875),
			},
		},
		// BC-06: data-parallel engines fold by the documented rule, never last-wins.
		{
			file: "hazards/BC-06.prom",
			want: want{
				Dialect: "vllm-v1", Models: []string{"deepseek-v4-flash"},
				Sources: map[string]string{
					"queueDepth": "vllm:num_requests_waiting", "running": "vllm:num_requests_running",
					"kvCacheUsage": "vllm:kv_cache_usage_perc",
				},
				EngineIDs:  []string{"0", "1"},
				QueueDepth: ptr(37), Running: ptr(48), KVCacheUsage: ptr((0.97 + 0.02) / 2), KVCacheUsageMax: ptr(0.97),
			},
		},
		// BC-08: a negative KV-cache usage is rejected, counted, and the term drops out.
		{
			file: "hazards/BC-08.prom",
			want: want{
				Dialect: "vllm-v1", Models: []string{"DeepSeek-V4-Flash"},
				Sources: map[string]string{
					"queueDepth": "vllm:num_requests_waiting", "kvCacheUsage": "vllm:kv_cache_usage_perc",
				},
				EngineIDs:  []string{"3"},
				QueueDepth: ptr(4),
				Invalid:    map[Reason]int{ReasonNegative: 1},
				Warnings:   []string{"rejected vllm:kv_cache_usage_perc", "no valid vllm:kv_cache_usage_perc series; kvCacheUsage drops out"},
			},
		},
		// BC-09: the renamed KV metric: new name preferred, old name as fallback, never both.
		{
			file: "hazards/BC-09-old.prom",
			want: want{
				Dialect: "vllm-v0", Models: []string{"Qwen/Qwen2.5-Coder-32B-Instruct"},
				Sources:   map[string]string{"queueDepth": "vllm:num_requests_waiting", "kvCacheUsage": "vllm:gpu_cache_usage_perc"},
				EngineIDs: []string{""}, QueueDepth: ptr(3), KVCacheUsage: ptr(0.81), KVCacheUsageMax: ptr(0.81),
			},
		},
		{
			file: "hazards/BC-09-new.prom",
			want: want{
				Dialect: "vllm-v1", Models: []string{"Qwen/Qwen3-8B"},
				Sources:   map[string]string{"queueDepth": "vllm:num_requests_waiting", "kvCacheUsage": "vllm:kv_cache_usage_perc"},
				EngineIDs: []string{"0"}, QueueDepth: ptr(3), KVCacheUsage: ptr(0.81), KVCacheUsageMax: ptr(0.81),
			},
		},
		{
			file: "hazards/BC-09-window.prom",
			want: want{
				Dialect: "vllm-v1", Models: []string{"Qwen/Qwen3-8B"},
				Sources:   map[string]string{"queueDepth": "vllm:num_requests_waiting", "kvCacheUsage": "vllm:kv_cache_usage_perc"},
				EngineIDs: []string{"0"}, QueueDepth: ptr(3), KVCacheUsage: ptr(0.81), KVCacheUsageMax: ptr(0.81),
			},
		},
	}
	e := NewExtractor()
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			r, err := e.Extract(readTestdata(t, tt.file))
			if err != nil {
				t.Fatalf("Extract: %v", err)
			}
			got := summarize(r)
			wantWarnings := tt.want.Warnings
			tt.want.Warnings = nil
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("reading mismatch (-want +got):\n%s", diff)
			}
			checkWarnings(t, r.Warnings, wantWarnings)
		})
	}
}

func checkWarnings(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("warnings = %q, want %d matching %q", got, len(want), want)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("warning %d = %q, want it to contain %q", i, got[i], want[i])
		}
	}
}

// The real vLLM dump ends without a final newline; it must parse as is and with one.
func TestExtractFinalNewlineOptional(t *testing.T) {
	body := readTestdata(t, "samples/vllm_v1-0.10-nvcr25.09_single-engine.prom")
	if body[len(body)-1] == '\n' {
		t.Fatal("fixture should end without a newline, as the real dump does")
	}
	e := NewExtractor()
	a, err := e.Extract(body)
	if err != nil {
		t.Fatalf("without final newline: %v", err)
	}
	b, err := e.Extract(append(append([]byte(nil), body...), '\n'))
	if err != nil {
		t.Fatalf("with final newline: %v", err)
	}
	if diff := cmp.Diff(a, b, cmp.AllowUnexported(EngineSignals{}, Fold{}, Values{})); diff != "" {
		t.Errorf("final newline changed the reading (-without +with):\n%s", diff)
	}
}

func TestExtractValidity(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		want     want
		warnings []string
	}{
		{
			name: "NaN, Inf and above-range are rejected per series",
			body: `vllm:num_requests_waiting{engine="0"} NaN
vllm:num_requests_waiting{engine="1"} 2
vllm:num_requests_running{engine="0"} +Inf
vllm:num_requests_running{engine="1"} 1
vllm:kv_cache_usage_perc{engine="0"} 1.5
vllm:kv_cache_usage_perc{engine="1"} 0.5
`,
			want: want{
				Dialect:    "vllm-v1",
				Sources:    map[string]string{"queueDepth": "vllm:num_requests_waiting", "running": "vllm:num_requests_running", "kvCacheUsage": "vllm:kv_cache_usage_perc"},
				EngineIDs:  []string{"0", "1"},
				QueueDepth: ptr(2), Running: ptr(1), KVCacheUsage: ptr(0.5), KVCacheUsageMax: ptr(0.5),
				Invalid: map[Reason]int{ReasonNaN: 1, ReasonInf: 1, ReasonAboveRange: 1},
			},
			warnings: []string{"rejected", "rejected", "rejected", "valid for 1 of 2 engines", "valid for 1 of 2 engines", "valid for 1 of 2 engines"},
		},
		{
			name: "every term invalid leaves the pod unknown",
			body: `vllm:num_requests_waiting{engine="0"} -1
vllm:kv_cache_usage_perc{engine="0"} -Inf
`,
			want: want{
				Dialect:   "vllm-v1",
				Sources:   map[string]string{"queueDepth": "vllm:num_requests_waiting", "kvCacheUsage": "vllm:kv_cache_usage_perc"},
				EngineIDs: []string{"0"},
				Invalid:   map[Reason]int{ReasonNegative: 1, ReasonInf: 1},
			},
			warnings: []string{"rejected", "rejected", "drops out", "drops out"},
		},
		{
			name: "series differing only by pid collapse to their maximum, whatever the order",
			body: `vllm:num_requests_waiting{engine="0",pid="11"} 5
vllm:num_requests_waiting{engine="0",pid="12"} 3
vllm:num_requests_waiting{engine="0",pid="13"} 5
`,
			want: want{
				Dialect: "vllm-v1", Sources: map[string]string{"queueDepth": "vllm:num_requests_waiting"},
				EngineIDs: []string{"0"}, QueueDepth: ptr(5),
			},
			warnings: []string{`3 duplicate series of vllm:num_requests_waiting for engine "0" disagree; using their maximum 5`},
		},
		{
			name: "identical duplicates (several scrape jobs) collapse silently",
			body: `vllm:num_requests_waiting{engine="0",job="a"} 12
vllm:num_requests_waiting{engine="0",job="b"} 12
vllm:num_requests_waiting{engine="0",job="c"} 12
`,
			want: want{
				Dialect: "vllm-v1", Sources: map[string]string{"queueDepth": "vllm:num_requests_waiting"},
				EngineIDs: []string{"0"}, QueueDepth: ptr(12),
			},
		},
		{
			name: "an absurd count (uint64 underflow) is rejected, not summed",
			body: `vllm:num_requests_waiting{engine="0"} 1.8446744073709552e19
vllm:num_requests_waiting{engine="1"} 2
`,
			want: want{
				Dialect: "vllm-v1", Sources: map[string]string{"queueDepth": "vllm:num_requests_waiting"},
				EngineIDs: []string{"0", "1"}, QueueDepth: ptr(2),
				Invalid: map[Reason]int{ReasonAboveRange: 1},
			},
			warnings: []string{"rejected", "valid for 1 of 2 engines"},
		},
		{
			name: "quoted UTF-8 metric names are read",
			body: `{"vllm:num_requests_waiting",engine="0"} 3
`,
			want: want{
				Dialect: "vllm-v1", Sources: map[string]string{"queueDepth": "vllm:num_requests_waiting"},
				EngineIDs: []string{"0"}, QueueDepth: ptr(3),
			},
		},
		{
			name: "engines sort numerically",
			body: `vllm:num_requests_waiting{engine="10"} 1
vllm:num_requests_waiting{engine="2"} 1
vllm:num_requests_waiting{engine="1"} 1
`,
			want: want{
				Dialect: "vllm-v1", Sources: map[string]string{"queueDepth": "vllm:num_requests_waiting"},
				EngineIDs: []string{"1", "2", "10"}, QueueDepth: ptr(3),
			},
		},
	}
	e := NewExtractor()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := e.Extract([]byte(tt.body))
			if err != nil {
				t.Fatalf("Extract: %v", err)
			}
			if diff := cmp.Diff(tt.want, summarize(r)); diff != "" {
				t.Errorf("reading mismatch (-want +got):\n%s", diff)
			}
			checkWarnings(t, r.Warnings, tt.warnings)
		})
	}
	// Order independence of the duplicate rule.
	a, _ := e.Extract([]byte("vllm:num_requests_waiting{pid=\"1\"} 3\nvllm:num_requests_waiting{pid=\"2\"} 5\n"))
	b, _ := e.Extract([]byte("vllm:num_requests_waiting{pid=\"2\"} 5\nvllm:num_requests_waiting{pid=\"1\"} 3\n"))
	if qa, qb := *a.Ptr(QueueDepth), *b.Ptr(QueueDepth); qa != 5 || qb != 5 {
		t.Errorf("duplicate collapse depends on order: %g vs %g, want 5 both", qa, qb)
	}
}

func TestExtractErrors(t *testing.T) {
	e := NewExtractor()
	tests := []struct {
		name    string
		body    []byte
		wantIs  error
		wantMsg string
	}{
		{name: "llama.cpp build without queue metrics", body: readTestdata(t, "samples/llamacpp_mid2025-pr13196_excerpt.prom"), wantIs: ErrNoEngineMetrics, wantMsg: "looked for vllm:num_requests_waiting"},
		{name: "empty body", body: nil, wantIs: ErrNoEngineMetrics},
		{name: "not an exposition", body: []byte("<html>502 Bad Gateway</html>\n"), wantMsg: "parsing exposition"},
		{name: "truncated series", body: []byte("vllm:num_requests_waiting{engine=\"0\"\n"), wantMsg: "parsing exposition"},
		{name: "bad value", body: []byte("vllm:num_requests_waiting{engine=\"0\"} many\n"), wantMsg: "parsing exposition"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Extract(tt.body)
			if err == nil {
				t.Fatal("Extract succeeded, want error")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v, want it to wrap %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q, want it to contain %q", err, tt.wantMsg)
			}
		})
	}
}

// Thousands of broken series must not become thousands of warnings.
func TestExtractWarningsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("vllm:num_requests_waiting{engine=\"0\"} 1\n")
	for i := range 5000 {
		fmt.Fprintf(&b, "vllm:kv_cache_usage_perc{engine=\"0\",tp_rank=\"%d\"} NaN\n", i)
	}
	r, err := NewExtractor().Extract([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if r.Invalid[ReasonNaN] != 5000 {
		t.Errorf("invalid nan = %d, want 5000 (all counted)", r.Invalid[ReasonNaN])
	}
	if len(r.Warnings) != maxWarnings+1 || r.Warnings[maxWarnings] != "further warnings omitted" {
		t.Errorf("%d warnings, want %d and a note that more were omitted", len(r.Warnings), maxWarnings+1)
	}
}
