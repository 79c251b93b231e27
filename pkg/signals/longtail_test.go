package signals

import (
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
