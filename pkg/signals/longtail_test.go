package signals

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Issue 19, item 4: smaller wrong numbers, each on a field-shaped body.

// TestDeferredOnlyByReason: an engine whose num_requests_waiting_by_reason
// has only its reason="deferred" series (vLLM's gauge per reason, the
// capacity one not exported, e.g. filtered by a relabelling that drops
// zeros) counts waiting less deferred, not every waiting request.
func TestDeferredOnlyByReason(t *testing.T) {
	const l = `engine="0",model_name="meta-llama/Llama-3.1-70B-Instruct"`
	body := "vllm:num_requests_running{" + l + "} 96\nvllm:num_requests_waiting{" + l + "} 40\n" +
		"vllm:num_requests_waiting_by_reason{" + l + ",reason=\"deferred\"} 28\nvllm:kv_cache_usage_perc{" + l + "} 0.35\n"
	r, err := NewExtractor().Extract([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	q, _ := r.Value(QueueDepth)
	d, _ := r.Value(QueueDeferred)
	if q != 12 || d != 28 {
		t.Errorf("queue %g, deferred %g; want 12 (40 waiting less 28 deferred) and 28", q, d)
	}
	// Deferred above the total (scraped a moment apart): none left, never negative.
	r, _ = NewExtractor().Extract([]byte(strings.Replace(body, "} 28", "} 45", 1)))
	if q, _ := r.Value(QueueDepth); q != 0 {
		t.Errorf("queue %g with 45 deferred of 40 waiting, want 0", q)
	}
	// Without any by-reason series the total stands.
	r, _ = NewExtractor().Extract([]byte(strings.Replace(body, "vllm:num_requests_waiting_by_reason{"+l+",reason=\"deferred\"} 28\n", "", 1)))
	if q, _ := r.Value(QueueDepth); q != 40 {
		t.Errorf("queue %g without by-reason series, want 40", q)
	}
}

// TestSGLangRouterWorkers: the SGLang router's aggregated /engine_metrics
// (hazard NC-05: sglang_ names, worker_addr added per worker) with two workers
// is two engines, not one engine's disagreeing duplicates.
func TestSGLangRouterWorkers(t *testing.T) {
	worker := func(addr string, running, queue, usage float64) string {
		l := fmt.Sprintf(`engine_type="unified",model_name="org/model_v1",moe_ep_rank="0",pp_rank="0",tp_rank="0",worker_addr="%s"`, addr)
		return fmt.Sprintf("sglang_num_running_reqs{%s} %g\nsglang_num_queue_reqs{%s} %g\nsglang_token_usage{%s} %g\n", l, running, l, queue, l, usage)
	}
	body := string(readTestdata(t, "hazards/NC-05-gateway.prom")) + worker("http://10.0.3.18:30000", 31, 4, 0.40)
	r, err := NewExtractor().Extract([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	q, _ := r.Value(QueueDepth)
	run, _ := r.Value(Running)
	kv, _ := r.Value(KVCacheUsage)
	if len(r.Engines) != 2 || q != 12+4 || run != 57+31 || !approx(kv, (0.64+0.40)/2) {
		t.Errorf("%d engines, queue %g, running %g, KV %g; want 2, 16, 88, 0.52 (warnings %q)", len(r.Engines), q, run, kv, r.Warnings)
	}
	for _, w := range r.Warnings {
		if strings.Contains(w, "disagree") {
			t.Errorf("warning %q: the workers are not duplicates", w)
		}
	}
}

// TestEngineLabelsNeverMerge: engine label values that are cut to length or
// have control characters replaced stay distinct engines, with bounded IDs.
func TestEngineLabelsNeverMerge(t *testing.T) {
	long := strings.Repeat("r", 300)
	for name, ids := range map[string][2]string{
		"cut to length":      {long + "a", long + "b"},
		"control characters": {"rank\x01", "rank\x02"},
		"replacement rune":   {"rank\uFFFD", "rank\x1b"},
		"one plain, one not": {"rank?", "rank\x07"},
	} {
		t.Run(name, func(t *testing.T) {
			body := ""
			for i, id := range ids {
				// Raw bytes in the label value: textparse keeps control
				// characters as they are.
				body += fmt.Sprintf("vllm:num_requests_waiting{engine=\"%s\"} %d\n", id, 10*(i+1))
			}
			r, err := NewExtractor().Extract([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			q, _ := r.Value(QueueDepth)
			if len(r.Engines) != 2 || q != 30 || r.Engines[0].ID == r.Engines[1].ID {
				t.Fatalf("engines %q, queue %g; want two distinct engines, 30 (warnings %q)", []string{r.Engines[0].ID}, q, r.Warnings)
			}
			for _, e := range r.Engines {
				if len(e.ID) > maxLabelBytes+4 || strings.ContainsAny(e.ID, "\x01\x02\x07\x1b") {
					t.Errorf("engine ID %q (%d bytes): not bounded or not clean", e.ID, len(e.ID))
				}
			}
		})
	}
	// Triton's model and version: ("a/b", "1") and ("a", "b/1") are two engines.
	body := "nv_inference_pending_request_count{model=\"a/b\",version=\"1\"} 3\nnv_inference_pending_request_count{model=\"a\",version=\"b/1\"} 4\n"
	r, err := NewExtractor().Extract([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if q, _ := r.Value(QueueDepth); len(r.Engines) != 2 || q != 7 {
		t.Errorf("Triton: %d engines, queue %g; want 2, 7", len(r.Engines), q)
	}
}

// TestSGLangDisaggregatedQueues (hazard NC-21): a prefill pod's backlog is
// num_queue_reqs plus its bootstrap queue (prealloc before SGLang PR #24341,
// never both), a decode pod's plus its prealloc queue; the decode transfer
// queue is deferred, the prefill inflight queue not counted.
func TestSGLangDisaggregatedQueues(t *testing.T) {
	for _, tt := range []struct {
		file            string
		queue, deferred float64
		source          string
	}{
		{"NC-21-prefill.prom", 6 + 58, -1, "sglang:num_queue_reqs + sglang:num_prefill_bootstrap_queue_reqs + sglang:num_decode_prealloc_queue_reqs"},
		{"NC-21-prefill-oldbuild.prom", 4 + 61, -1, "sglang:num_queue_reqs + sglang:num_prefill_prealloc_queue_reqs + sglang:num_decode_prealloc_queue_reqs"},
		{"NC-21-decode.prom", 0 + 41, 17, "sglang:num_queue_reqs + sglang:num_prefill_bootstrap_queue_reqs + sglang:num_decode_prealloc_queue_reqs"},
		{"NC-05-engine.prom", 12, -1, "sglang:num_queue_reqs"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			r, err := NewExtractor().Extract(readTestdata(t, "hazards/"+tt.file))
			if err != nil {
				t.Fatal(err)
			}
			q, _ := r.Value(QueueDepth)
			d, hasD := r.Value(QueueDeferred)
			if q != tt.queue || (tt.deferred >= 0) != hasD || (hasD && d != tt.deferred) || r.Sources[QueueDepth.String()] != tt.source {
				t.Errorf("queue %g (%s), deferred %g (%v); want %g (%s), %g", q, r.Sources[QueueDepth.String()], d, hasD, tt.queue, tt.source, tt.deferred)
			}
		})
	}
	// Both spellings of the bootstrap queue in one body: the new one only.
	body := string(readTestdata(t, "hazards/NC-21-prefill.prom")) +
		"sglang:num_prefill_prealloc_queue_reqs{engine_type=\"unified\",model_name=\"deepseek-ai/DeepSeek-V3\",pp_rank=\"0\",tp_rank=\"0\"} 58.0\n"
	r, err := NewExtractor().Extract([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if q, _ := r.Value(QueueDepth); q != 64 {
		t.Errorf("both spellings: queue %g, want 64", q)
	}
}

// TestTRTLLMServe (hazard NC-17): trtllm-serve's Prometheus text in both
// spellings; its /metrics JSON is an error naming the right path and the
// options; a 1.1 body without the gauges is unknown, saying why.
func TestTRTLLMServe(t *testing.T) {
	r, err := NewExtractor().Extract(readTestdata(t, "hazards/NC-17-v1.3-t0.prom"))
	if err != nil {
		t.Fatal(err)
	}
	q, hq := r.Value(QueueDepth)
	run, hr := r.Value(Running)
	fin, _ := r.Value(RequestsFinished)
	if r.Dialect != "trtllm" || !hq || !hr || q != 0 || run != 0 || fin != 18211 || r.Sources[QueueDepth.String()] != "trtllm_num_requests_waiting" {
		t.Errorf("1.3: dialect %s, queue %g (%v), running %g (%v), finished %g, sources %v", r.Dialect, q, hq, run, hr, fin, r.Sources)
	}
	// The unprefixed spelling (before 1.3), never both.
	body := strings.NewReplacer("trtllm_num_requests", "num_requests", "trtllm_request_success_total", "request_success_total").Replace(string(readTestdata(t, "hazards/NC-17-v1.3-t0.prom")))
	r, err = NewExtractor().Extract([]byte(body))
	if err != nil || r.Sources[QueueDepth.String()] != "num_requests_waiting" || r.Dialect != "trtllm" {
		t.Errorf("unprefixed: %v, %s %v", err, r.Dialect, r.Sources)
	}
	// 1.1: no queue, running or KV gauge at all.
	if _, err := NewExtractor().Extract(readTestdata(t, "hazards/NC-17-v1.1.prom")); !errors.Is(err, ErrNoEngineMetrics) || !strings.Contains(err.Error(), "enable_iter_perf_stats") {
		t.Errorf("1.1: %v, want ErrNoEngineMetrics naming enable_iter_perf_stats", err)
	}
	// GET /metrics: JSON (the iteration stats), by Content-Type or by its '['.
	for _, ctype := range []string{"application/json", ""} {
		_, err := NewExtractor().ExtractContent([]byte("[]"), ctype)
		if !errors.Is(err, ErrParse) || !strings.Contains(err.Error(), "/prometheus/metrics") || !strings.Contains(err.Error(), "return_perf_metrics") {
			t.Errorf("JSON body (Content-Type %q): %v, want ErrParse naming /prometheus/metrics and return_perf_metrics", ctype, err)
		}
	}
}

// TestTritonNeverSumsSteps: a Triton pod of the TensorRT-LLM backend's model
// repository (preprocessing, tensorrt_llm, postprocessing, ensemble) whose
// nv_trt_llm_* series are off holds each request in every step: the pod's
// queue is the tensorrt_llm model's, not the sum; with other names, the sum
// is said, never silent.
func TestTritonNeverSumsSteps(t *testing.T) {
	steps := func(names ...string) string {
		var b strings.Builder
		for _, m := range names {
			fmt.Fprintf(&b, "nv_inference_pending_request_count{model=%q,version=\"1\"} 5\nnv_inference_request_success{model=%q,version=\"1\"} 1200\n", m, m)
		}
		return b.String()
	}
	r, err := NewExtractor().Extract([]byte(steps("ensemble", "preprocessing", "tensorrt_llm", "postprocessing")))
	if err != nil {
		t.Fatal(err)
	}
	if q, _ := r.Value(QueueDepth); q != 5 || len(r.Warnings) != 0 {
		t.Errorf("backend by convention: queue %g, warnings %q; want 5, none", q, r.Warnings)
	}
	if keep := EngineFilter(&r, ""); keep == nil || !keep(&EngineSignals{Model: "tensorrt_llm"}) || keep(&EngineSignals{Model: "ensemble"}) {
		t.Error("EngineFilter does not select the tensorrt_llm model as the fold does")
	}
	r, err = NewExtractor().Extract([]byte(steps("llama-ensemble", "llama-trt")))
	if err != nil {
		t.Fatal(err)
	}
	if q, _ := r.Value(QueueDepth); q != 10 || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "set the policy's model") {
		t.Errorf("no convention: queue %g, warnings %q; want 10 and the warning", q, r.Warnings)
	}
}
