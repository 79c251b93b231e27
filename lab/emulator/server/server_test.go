package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// fastEngine steps in about a millisecond so that HTTP tests finish quickly on
// the real clock.
func fastEngine() emulator.Config {
	c := emulator.DefaultConfig()
	c.MaxModelLen = 8192
	c.StepTime = emulator.StepTimeModel{Base: time.Millisecond, PerSeq: 10 * time.Microsecond, PerPrefillToken: time.Microsecond}
	return c
}

func startServer(t *testing.T, mutate func(*Config)) (*Server, string) {
	t.Helper()
	cfg := Config{
		Engine: fastEngine(), Engines: 1, ModelName: "test-model", MetricNames: emulator.NamesV1,
		CharsPerToken: 4, Fault: FaultNone, EnableAdmin: true, ShutdownTimeout: time.Second, Clock: clock.RealClock{},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv.Start(ctx)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { cancel(); hs.Close() })
	return srv, hs.URL
}

func post(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	return readAll(t, resp, err)
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	return readAll(t, resp, err)
}

// readAll fails the test on a request error and returns the response and its body.
func readAll(t *testing.T, resp *http.Response, err error) (*http.Response, []byte) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func TestCompletions(t *testing.T) {
	_, url := startServer(t, nil)
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantUsage  usage
		wantReason string
	}{
		{"text prompt, 4 chars per token", `{"model":"test-model","prompt":"Hello there, how are you?","max_tokens":5}`,
			200, usage{7, 5, 12}, "length"},
		{"exact prompt tokens", `{"prompt_tokens":1000,"max_tokens":3}`, 200, usage{1000, 3, 1003}, "length"},
		{"token id prompt", `{"prompt":[1,2,3],"max_tokens":2}`, 200, usage{3, 2, 5}, "length"},
		{"list of one prompt", `{"prompt":["abcdefgh"],"max_tokens":1}`, 200, usage{2, 1, 3}, "length"},
		{"default max_tokens 16", `{"prompt":"x"}`, 200, usage{1, 16, 17}, "length"},
		{"simulated EOS", `{"prompt":"x","max_tokens":10,"output_tokens":4}`, 200, usage{1, 4, 5}, "stop"},
		{"unknown model", `{"model":"other","prompt":"x"}`, 404, usage{}, ""},
		{"bad JSON", `{"prompt":`, 400, usage{}, ""},
		{"no prompt", `{"max_tokens":3}`, 400, usage{}, ""},
		{"batched prompts", `{"prompt":["a","b"]}`, 400, usage{}, ""},
		{"zero max_tokens", `{"prompt":"x","max_tokens":0}`, 400, usage{}, ""},
		{"longer than max_model_len", `{"prompt_tokens":8000,"max_tokens":500}`, 400, usage{}, ""},
		{"zero output_tokens", `{"prompt":"x","output_tokens":0}`, 400, usage{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, url+"/v1/completions", tt.body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			if tt.wantStatus != 200 {
				var e struct {
					Object string `json:"object"`
					Code   int    `json:"code"`
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Object != "error" || e.Code != tt.wantStatus {
					t.Errorf("error body %s, want an OpenAI-style error", body)
				}
				return
			}
			var got completionResponse
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantUsage, *got.Usage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			if len(got.Choices) != 1 || *got.Choices[0].FinishReason != tt.wantReason ||
				len(got.Choices[0].Text) != 4*tt.wantUsage.CompletionTokens || got.Object != "text_completion" {
				t.Errorf("response %s", body)
			}
		})
	}
}

func TestCompletionsStreaming(t *testing.T) {
	_, url := startServer(t, nil)
	resp, body := post(t, url+"/v1/completions", `{"prompt":"hi","max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	var events []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, line)
		}
	}
	if len(events) != 6 || events[5] != "[DONE]" {
		t.Fatalf("events %q, want 4 tokens, usage, [DONE]", events)
	}
	for i, ev := range events[:4] {
		var c completionResponse
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		last := i == 3
		if fr := c.Choices[0].FinishReason; (fr != nil) != last || (last && *fr != "length") {
			t.Errorf("chunk %d finish_reason %v", i, fr)
		}
	}
	var u completionResponse
	if err := json.Unmarshal([]byte(events[4]), &u); err != nil || u.Usage == nil || u.Usage.CompletionTokens != 4 {
		t.Errorf("usage chunk %s", events[4])
	}
}

func TestHealthAndModels(t *testing.T) {
	_, url := startServer(t, nil)
	if resp, _ := get(t, url+"/health"); resp.StatusCode != 200 {
		t.Errorf("/health %d", resp.StatusCode)
	}
	resp, body := get(t, url+"/v1/models")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"id":"test-model"`) {
		t.Errorf("/v1/models %d %s", resp.StatusCode, body)
	}
}

func parseMetrics(t *testing.T, body []byte) error {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	_, err := p.TextToMetricFamilies(bytes.NewReader(body))
	return err
}

func TestMetricsAfterLoad(t *testing.T) {
	_, url := startServer(t, func(c *Config) { c.MetricNames = emulator.NamesV1RenameWindow })
	post(t, url+"/v1/completions", `{"prompt_tokens":100,"max_tokens":5}`)
	post(t, url+"/v1/completions", `{"prompt_tokens":50,"max_tokens":5,"output_tokens":2}`)
	resp, body := get(t, url+"/metrics")
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics %d", resp.StatusCode)
	}
	if err := parseMetrics(t, body); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`vllm:request_success_total{engine="0",finished_reason="length",model_name="test-model"} 1`,
		`vllm:request_success_total{engine="0",finished_reason="stop",model_name="test-model"} 1`,
		`vllm:prompt_tokens_total{engine="0",model_name="test-model"} 150`,
		`vllm:generation_tokens_total{engine="0",model_name="test-model"} 7`,
		`vllm:time_to_first_token_seconds_count{engine="0",model_name="test-model"} 2`,
		`vllm:e2e_request_latency_seconds_count{engine="0",model_name="test-model"} 2`,
		`vllm:inter_token_latency_seconds_count{engine="0",model_name="test-model"} 5`,
		`vllm:time_per_output_token_seconds_count{engine="0",model_name="test-model"} 5`,
		`vllm:gpu_cache_usage_perc{engine="0",model_name="test-model"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestFaults(t *testing.T) {
	srv, url := startServer(t, nil)
	setFault := func(mode string, wantStatus int) {
		t.Helper()
		resp, body := post(t, url+"/admin/fault?mode="+mode, "")
		if resp.StatusCode != wantStatus {
			t.Fatalf("set fault %s: %d %s", mode, resp.StatusCode, body)
		}
	}
	setFault("bogus", 400)

	setFault("metrics-500", 200)
	if resp, _ := get(t, url+"/metrics"); resp.StatusCode != 500 {
		t.Errorf("metrics-500: status %d", resp.StatusCode)
	}

	setFault("metrics-malformed", 200)
	resp, body := get(t, url+"/metrics")
	if resp.StatusCode != 200 || parseMetrics(t, body) == nil {
		t.Errorf("metrics-malformed: status %d, body parses: %s", resp.StatusCode, body)
	}
	if _, err := signals.NewExtractor().Extract(body); err == nil {
		t.Error("signals.Extract accepted the malformed body")
	}

	setFault("metrics-hang", 200)
	client := &http.Client{Timeout: 200 * time.Millisecond}
	start := time.Now()
	if _, err := client.Get(url + "/metrics"); err == nil {
		t.Error("metrics-hang: got an answer")
	} else if time.Since(start) < 150*time.Millisecond {
		t.Errorf("metrics-hang: failed after %v: %v", time.Since(start), err)
	}

	setFault("freeze", 200)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(`{"prompt":"x","max_tokens":2}`))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Error("frozen engine answered a completion")
		}
	}()
	deadline := time.Now().Add(time.Second)
	for srv.Runners()[0].Snapshot().Waiting != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	_, body = get(t, url+"/metrics")
	if !strings.Contains(string(body), `vllm:num_requests_waiting{engine="0",model_name="test-model"} 1`) {
		t.Errorf("frozen engine's queue not served on /metrics")
	}
	<-done // the client gave up: the request is aborted
	deadline = time.Now().Add(time.Second)
	for srv.Runners()[0].Snapshot().Finished[2] != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s := srv.Runners()[0].Snapshot(); s.Waiting != 0 || s.Finished[2] != 1 {
		t.Errorf("after client gave up: %+v, want the request aborted", s)
	}

	setFault("none", 200)
	if resp, body := post(t, url+"/v1/completions", `{"prompt":"x","max_tokens":2}`); resp.StatusCode != 200 {
		t.Errorf("after thaw: %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, url+"/admin/fault"); !strings.Contains(string(body), `"mode":"none"`) {
		t.Errorf("GET /admin/fault: %d %s", resp.StatusCode, body)
	}
}

func TestAdminDisabled(t *testing.T) {
	_, url := startServer(t, func(c *Config) { c.EnableAdmin = false })
	if resp, _ := post(t, url+"/admin/fault?mode=freeze", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("admin disabled: status %d, want 404", resp.StatusCode)
	}
}

func TestDataParallelSpreadsRequests(t *testing.T) {
	srv, url := startServer(t, func(c *Config) { c.Engines = 3; c.Fault = FaultFreeze })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 6 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(`{"prompt":"x"}`))
		go func() {
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(2 * time.Second)
	total := func() (n int, per []int) {
		for _, r := range srv.Runners() {
			w := r.Snapshot().Waiting
			per = append(per, w)
			n += w
		}
		return n, per
	}
	for n, _ := total(); n < 6 && time.Now().Before(deadline); n, _ = total() {
		time.Sleep(5 * time.Millisecond)
	}
	if _, per := total(); !cmp.Equal(per, []int{2, 2, 2}) {
		t.Errorf("waiting per engine %v, want 2 each (least-loaded dispatch)", per)
	}
	_, body := get(t, url+"/metrics")
	r, err := signals.NewExtractor().Extract(body)
	if err != nil {
		t.Fatal(err)
	}
	if q := r.Ptr(signals.QueueDepth); r.Dialect != "vllm-v1" || len(r.Engines) != 3 || q == nil || *q != 6 {
		t.Errorf("signals read dialect %q, %d engines, queue %v; want vllm-v1, 3, 6", r.Dialect, len(r.Engines), q)
	}
}
