package signals

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// Each case is a minimal input that once served a wrong number (issue 12,
// "wrong numbers served today"), or a hazard of ../testdata/hazards; the
// assertions are the right answer.
func TestExtractHazards(t *testing.T) {
	e := NewExtractor()
	type check func(t *testing.T, r Reading)
	value := func(s Signal, want float64) check {
		return func(t *testing.T, r Reading) {
			t.Helper()
			if v, ok := r.Value(s); !ok || !approx(v, want) {
				t.Errorf("%s = %v, want %g", s, deref(r.Ptr(s)), want)
			}
		}
	}
	absent := func(s Signal) check {
		return func(t *testing.T, r Reading) {
			t.Helper()
			if p := r.Ptr(s); p != nil {
				t.Errorf("%s = %g, want absent", s, *p)
			}
		}
	}
	warns := func(sub string) check {
		return func(t *testing.T, r Reading) {
			t.Helper()
			for _, w := range r.Warnings {
				if strings.Contains(w, sub) {
					return
				}
			}
			t.Errorf("warnings %q, want one containing %q", r.Warnings, sub)
		}
	}
	source := func(s Signal, want string) check {
		return func(t *testing.T, r Reading) {
			t.Helper()
			if got := r.Sources[s.String()]; got != want {
				t.Errorf("source of %s = %q, want %q", s, got, want)
			}
		}
	}
	invalid := func(reason Reason, want int) check {
		return func(t *testing.T, r Reading) {
			t.Helper()
			if r.Invalid[reason] != want {
				t.Errorf("invalid %s = %d, want %d", reason, r.Invalid[reason], want)
			}
		}
	}
	engines := func(ids ...string) check {
		return func(t *testing.T, r Reading) {
			t.Helper()
			var got []string
			for _, e := range r.Engines {
				got = append(got, e.ID)
			}
			if strings.Join(got, ",") != strings.Join(ids, ",") {
				t.Errorf("engines %q, want %q", got, ids)
			}
		}
	}
	dialect := func(want string) check {
		return func(t *testing.T, r Reading) {
			t.Helper()
			if r.Dialect != want {
				t.Errorf("dialect %q, want %q", r.Dialect, want)
			}
		}
	}
	tests := []struct {
		name   string
		body   string
		ctype  string
		checks []check
	}{
		{
			// A line with leading blanks was silently dropped (0.125 served instead of 8).
			name:   "leading blanks are ignored, as the exposition format says",
			body:   "vllm:num_requests_running{engine=\"0\"} 3\n  vllm:num_requests_waiting{engine=\"0\"} 40\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.1\n",
			checks: []check{value(QueueDepth, 40), value(Running, 3)},
		},
		{
			name:   "CRLF line endings and a UTF-8 byte order mark",
			body:   "\xef\xbb\xbfvllm:num_requests_waiting{engine=\"0\"} 7\r\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.5\r\n",
			checks: []check{value(QueueDepth, 7), value(KVCacheUsage, 0.5)},
		},
		{
			// A bad line elsewhere (an absurd float, OpenMetrics types, a NUL byte)
			// must not void the pod: the families read are parsed, the others skipped.
			name: "a broken line in a family the adapter does not read",
			body: "# TYPE python_info info\npython_info{version=\"3.12\"} 1\nprocess_open_fds 1e309x\nhttp_requests\x00_total 5\n" +
				"vllm:num_requests_waiting{engine=\"0\"} 4\n",
			checks: []check{value(QueueDepth, 4)},
		},
		{
			// Unlabelled and engine-labelled series of one metric were added (8 instead of 4).
			name:   "an unlabelled series beside engine-labelled ones is an aggregate",
			body:   "vllm:num_requests_waiting 4\nvllm:num_requests_waiting{engine=\"0\"} 1\nvllm:num_requests_waiting{engine=\"1\"} 3\n",
			checks: []check{value(QueueDepth, 4), engines("0", "1"), warns("is an aggregate, not an engine")},
		},
		{
			// A NaN kv_cache_usage_perc hid a valid gpu_cache_usage_perc 0.96 (0 served instead of 1.2).
			name:   "an invalid preferred KV series falls back to the old name, per engine",
			body:   "vllm:num_requests_waiting{engine=\"0\"} 0\nvllm:kv_cache_usage_perc{engine=\"0\"} NaN\nvllm:gpu_cache_usage_perc{engine=\"0\"} 0.96\n",
			checks: []check{value(KVCacheUsage, 0.96), warns("read vllm:gpu_cache_usage_perc instead")},
		},
		{
			// SGLang gauges and one stray vLLM counter were read as vLLM and the pod went unknown.
			name:   "the dialect with the signals wins; a mixed body is warned about",
			body:   "sglang:num_queue_reqs 6\nsglang:num_running_reqs 2\nsglang:token_usage 0.3\nvllm:num_preemptions_total 9\n",
			checks: []check{dialect("sglang"), value(QueueDepth, 6), warns("mixed body")},
		},
		{
			name:   "KV at 1 + float noise is 1, not rejected",
			body:   "vllm:num_requests_waiting{engine=\"0\"} 0\nvllm:kv_cache_usage_perc{engine=\"0\"} 1.0000001\n",
			checks: []check{value(KVCacheUsage, 1)},
		},
		{
			name:   "Triton without the fraction series: used / max KV blocks",
			body:   "nv_trt_llm_request_metrics{model=\"m\",request_type=\"waiting\",version=\"1\"} 2\nnv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"used\",model=\"m\",version=\"1\"} 300\nnv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"max\",model=\"m\",version=\"1\"} 1200\n",
			checks: []check{value(KVCacheUsage, 0.25), source(KVCacheUsage, `nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used"} / nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"}`)},
		},
		{
			name:   "two Triton versions of one model are two engines whose queues add",
			body:   "nv_trt_llm_request_metrics{model=\"m\",request_type=\"waiting\",version=\"1\"} 2\nnv_trt_llm_request_metrics{model=\"m\",request_type=\"waiting\",version=\"2\"} 5\n",
			checks: []check{value(QueueDepth, 7), engines("m/1", "m/2")},
		},
		{
			// Triton ensembles report one request under each step's model: only the
			// TensorRT-LLM backend model counts.
			name: "a Triton ensemble counts its backend model only",
			body: "nv_inference_pending_request_count{model=\"ensemble\",version=\"1\"} 4\nnv_inference_pending_request_count{model=\"preprocessing\",version=\"1\"} 4\n" +
				"nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"waiting\",version=\"1\"} 4\n",
			checks: []check{value(QueueDepth, 4)},
		},
		{
			name:   "NC-05: the router's sglang_ spelling is read, and said",
			body:   string(readTestdata(t, "hazards/NC-05-gateway.prom")),
			checks: []check{dialect("sglang"), value(QueueDepth, 12), source(QueueDepth, "sglang_num_queue_reqs")},
		},
		{
			name:   "NC-05: both spellings in one body are never added",
			body:   string(readTestdata(t, "hazards/NC-05-engine.prom")) + string(readTestdata(t, "hazards/NC-05-gateway.prom")),
			checks: []check{value(QueueDepth, 12), source(QueueDepth, "sglang:num_queue_reqs"), warns(`read "sglang:" only`)},
		},
		{
			name:   "NC-06: hybrid SGLang KV from the attention pools, the state pool apart",
			body:   string(readTestdata(t, "hazards/NC-06.prom")),
			checks: []check{value(KVCacheUsage, 0.22), value(StateUsage, 0.97), source(KVCacheUsage, "max(sglang:full_token_usage, sglang:swa_token_usage)")},
		},
		{
			name:   "NC-03: deferred waits are not queue depth",
			body:   string(readTestdata(t, "hazards/NC-03-decode.prom")),
			checks: []check{value(QueueDepth, 0), value(QueueDeferred, 40)},
		},
		{
			// 50 deferred of 10 waiting once read as a queue of 0, silently.
			name: "deferred waits above the waiting that includes them: the queue drops out",
			body: "vllm:num_requests_waiting_by_reason{engine=\"0\",reason=\"deferred\"} 50\n" +
				"vllm:num_requests_waiting{engine=\"0\"} 10\nvllm:num_requests_running{engine=\"0\"} 1\n",
			checks: []check{absent(QueueDepth), value(QueueDeferred, 50), value(Running, 1), invalid(ReasonInconsistent, 1),
				warns(`vllm:num_requests_waiting_by_reason{reason="deferred"} is 50 for engine "0", more than vllm:num_requests_waiting's 10`), warns("no valid")},
		},
		{
			name: "deferred waits equal to the waiting: a queue of 0",
			body: "vllm:num_requests_waiting_by_reason{engine=\"0\",reason=\"deferred\"} 10\n" +
				"vllm:num_requests_waiting{engine=\"0\"} 10\nvllm:num_requests_running{engine=\"0\"} 1\n",
			checks: []check{value(QueueDepth, 0), value(QueueDeferred, 10), invalid(ReasonInconsistent, 0)},
		},
		{
			// A NaN bootstrap queue once read as 0 beside num_queue_reqs 6.
			name:   "NC-21: a rejected part of a summed queue makes the queue unknown, not smaller",
			body:   withValue(t, string(readTestdata(t, "hazards/NC-21-prefill.prom")), "sglang:num_prefill_bootstrap_queue_reqs", "NaN"),
			checks: []check{absent(QueueDepth), value(KVCacheUsage, 0.88), invalid(ReasonNaN, 1), warns("rejected sglang:num_prefill_bootstrap_queue_reqs")},
		},
		{
			name:   "NC-21: a negative part of a summed queue, likewise",
			body:   withValue(t, string(readTestdata(t, "hazards/NC-21-decode.prom")), "sglang:num_decode_prealloc_queue_reqs", "-40"),
			checks: []check{absent(QueueDepth), invalid(ReasonNegative, 1)},
		},
		{
			// full_token_usage 1.5 rejected, swa 0.1: the KV once read 0.1.
			name: "NC-06: a rejected KV pool falls back to token_usage, never to the other pool alone",
			body: withValue(t, string(readTestdata(t, "hazards/NC-06.prom")), "sglang:full_token_usage", "1.5") +
				"sglang:swa_token_usage{engine_type=\"unified\",model_name=\"Qwen/Qwen3-Next-80B-A3B-Instruct\",tp_rank=\"0\"} 0.1\n",
			checks: []check{value(KVCacheUsage, 0.97), warns("read sglang:token_usage instead"), invalid(ReasonAboveRange, 1)},
		},
		{
			name:   "NC-06: a rejected KV pool without token_usage: no KV term",
			body:   "sglang:num_queue_reqs 0\nsglang:num_running_reqs 5\nsglang:full_token_usage NaN\nsglang:swa_token_usage 0.1\n",
			checks: []check{absent(KVCacheUsage), value(QueueDepth, 0)},
		},
		{
			name:   "NC-02: admission rejections of a one-engine pod belong to its engine",
			body:   string(readTestdata(t, "hazards/NC-02-t0.prom")),
			checks: []check{engines("0"), value(Rejections, 1204), value(QueueDepth, 150)},
		},
		{
			name:   "sleep mode",
			body:   "vllm:num_requests_waiting{engine=\"0\"} 0\nvllm:engine_sleep_state{engine=\"0\",sleep_state=\"awake\"} 0\nvllm:engine_sleep_state{engine=\"0\",sleep_state=\"discard_all\"} 1\n",
			checks: []check{value(Awake, 0)},
		},
		{
			name:   "OpenMetrics with exemplars, timestamps in seconds and # EOF",
			ctype:  "application/openmetrics-text; version=1.0.0; charset=utf-8",
			body:   "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\"} 3 1764590400.5\n# TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total{engine=\"0\"} 2 # {trace_id=\"a\"} 1\n# EOF\n",
			checks: []check{value(QueueDepth, 3), value(Preemptions, 2)},
		},
		{
			name:   "an exemplar in a text-format body is ignored",
			body:   "vllm:num_requests_waiting{engine=\"0\"} 3 # {trace_id=\"a\"} 1\n",
			checks: []check{value(QueueDepth, 3)},
		},
		{
			name:   "an exemplar after a series without labels is ignored",
			body:   "vllm:num_requests_waiting 3 # {trace_id=\"a\"} 1\nvllm:num_requests_running 1\n",
			checks: []check{value(QueueDepth, 3), value(Running, 1)},
		},
		{
			name:   "an exemplar after a TGI counter without labels is ignored",
			body:   "tgi_queue_size 3\ntgi_batch_current_size 1\ntgi_request_success 10 # {trace_id=\"abc\"} 1\n",
			checks: []check{value(QueueDepth, 3)},
		},
		{
			name: "histograms are read with the bounds of each scrape",
			body: "vllm:num_requests_waiting{engine=\"0\"} 0\nvllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.3\"} 2\nvllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"7\"} 5\nvllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\"} 6\nvllm:time_to_first_token_seconds_count{engine=\"0\"} 6\nvllm:time_to_first_token_seconds_sum{engine=\"0\"} 9\n",
			checks: []check{func(t *testing.T, r Reading) {
				h := r.Hist[TTFT]
				if h == nil || len(h.Bounds) != 2 || h.Bounds[1] != 7 || h.Counts[1] != 5 || h.Count != 6 || h.Sum != 9 {
					t.Errorf("TTFT histogram %+v, want bounds [0.3 7], counts [2 5], 6 observations, sum 9", h)
				}
			}},
		},
		{
			name: "a histogram that is not cumulative is rejected and counted",
			body: "vllm:num_requests_waiting{engine=\"0\"} 0\nvllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"1\"} 5\nvllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"2\"} 3\nvllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\"} 6\n",
			checks: []check{func(t *testing.T, r Reading) {
				if r.Hist[TTFT] != nil || r.Invalid[ReasonMalformed] != 1 {
					t.Errorf("histogram %+v invalid %v, want rejected as malformed", r.Hist[TTFT], r.Invalid)
				}
			}, warns("not cumulative")},
		},
		{
			// A negative bound gave a negative TTFT quantile (a pool served 0),
			// and le="-Inf" a NaN once pooled with another pod's layout.
			name: "a latency histogram with a bound below 0 is rejected and counted",
			body: "vllm:num_requests_waiting{engine=\"0\"} 0\nvllm:num_requests_running{engine=\"0\"} 1\nvllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"-5\"} 5\nvllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\"} 6\n" +
				"vllm:inter_token_latency_seconds_bucket{engine=\"0\",le=\"-Inf\"} 1\nvllm:inter_token_latency_seconds_bucket{engine=\"0\",le=\"1\"} 2\nvllm:inter_token_latency_seconds_bucket{engine=\"0\",le=\"+Inf\"} 2\n",
			checks: []check{value(QueueDepth, 0), value(Running, 1), func(t *testing.T, r Reading) {
				if r.Hist[TTFT] != nil || r.Hist[InterTokenLatency] != nil || r.Invalid[ReasonMalformed] != 2 {
					t.Errorf("histograms %+v %+v, invalid %v: want both rejected as malformed", r.Hist[TTFT], r.Hist[InterTokenLatency], r.Invalid)
				}
			}, warns("below 0")},
		},
		{
			// (A longer line fails the scrape: TestExtractBounds.)
			name: "a 60 KB label value is cut in what is kept",
			body: "vllm:num_requests_waiting{engine=\"0\",model_name=\"" + strings.Repeat("x", 60<<10) + "\"} 2\n",
			checks: []check{value(QueueDepth, 2), func(t *testing.T, r Reading) {
				if len(r.Models) != 1 || len(r.Models[0]) > maxLabelBytes+4 {
					t.Errorf("kept a model name of %d bytes", len(r.Models[0]))
				}
			}},
		},
		{
			name:   "counter families without a value are absent, not 0",
			body:   "vllm:num_requests_waiting{engine=\"0\"} 1\n",
			checks: []check{absent(Preemptions), absent(GenerationTokens)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := e.ExtractContent([]byte(tt.body), tt.ctype)
			if err != nil {
				t.Fatalf("Extract: %v", err)
			}
			for _, c := range tt.checks {
				c(t, r)
			}
		})
	}
}

// Bodies past the bounds fail their scrape with a counted reason, whatever
// else they hold.
func TestExtractBounds(t *testing.T) {
	var many strings.Builder
	for i := range 300 {
		many.WriteString("vllm:num_requests_waiting{engine=\"" + ftoa(float64(i)) + "\"} 1\n")
	}
	e := NewExtractorWith(ExtractOptions{MaxSeries: 100})
	if _, err := e.Extract([]byte(many.String())); !errors.Is(err, ErrTooManySeries) {
		t.Errorf("300 series with MaxSeries 100: %v, want ErrTooManySeries", err)
	}
	e = NewExtractorWith(ExtractOptions{MaxEngines: 256})
	if _, err := e.Extract([]byte(many.String())); !errors.Is(err, ErrTooManyEngines) {
		t.Errorf("300 engines with MaxEngines 256: %v, want ErrTooManyEngines", err)
	}
	// Unrelated families do not count towards the bound.
	var other strings.Builder
	for i := range 50000 {
		other.WriteString("http_requests_total{path=\"/" + ftoa(float64(i)) + "\"} 1\n")
	}
	other.WriteString("vllm:num_requests_waiting{engine=\"0\"} 2\n")
	if r, err := NewExtractorWith(ExtractOptions{MaxSeries: 10}).Extract([]byte(other.String())); err != nil || *r.Ptr(QueueDepth) != 2 {
		t.Errorf("50,000 unrelated series: %v", err)
	}
	// A NUL byte or an over-long line in a family read fails with the line named.
	for _, body := range []string{"vllm:num_requests_waiting{engine=\"0\"} 2\x00\n", "vllm:num_requests_waiting{engine=\"" + strings.Repeat("1", 70000) + "\"} 2\n"} {
		_, err := NewExtractor().Extract([]byte(body))
		if !errors.Is(err, ErrParse) || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("error %v, want ErrParse naming line 1", err)
		}
		if len(err.Error()) > 400 {
			t.Errorf("error is %d bytes long", len(err.Error()))
		}
	}
}

// TestEpochTimestampIsOld: a sample stamped at the epoch (timestamp 0, the
// extractor's "no timestamp") is as old as that, on the text path and on
// Prometheus samples, not fresh.
func TestEpochTimestampIsOld(t *testing.T) {
	r, err := NewExtractor().Extract([]byte("vllm:num_requests_waiting{engine=\"0\"} 3 0\nvllm:num_requests_running{engine=\"0\"} 1 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r.SampleTime.IsZero() || r.SampleTime.After(time.Unix(1, 0)) {
		t.Errorf("text: sample time %v, want the epoch (not none)", r.SampleTime)
	}
	lset := labels.FromStrings("__name__", "vllm:num_requests_waiting", "engine", "0")
	r, err = NewExtractor().ExtractSamples([]Sample{{Labels: lset, Value: 3, T: time.Unix(0, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	if r.SampleTime.IsZero() || r.SampleTime.After(time.Unix(1, 0)) {
		t.Errorf("samples: sample time %v, want the epoch (not none)", r.SampleTime)
	}
}

// withValue returns body with the value of metric's (one) series replaced.
func withValue(t *testing.T, body, metric, value string) string {
	t.Helper()
	lines := strings.Split(body, "\n")
	n := 0
	for i, l := range lines {
		if strings.HasPrefix(l, metric+"{") || strings.HasPrefix(l, metric+" ") {
			lines[i] = l[:strings.LastIndexByte(l, ' ')+1] + value
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d series of %s in the body, want 1", n, metric)
	}
	return strings.Join(lines, "\n")
}
