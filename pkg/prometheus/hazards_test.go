package prometheus

import (
	"net/http"
	"strings"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// The Prometheus hazards (testdata/hazards BC-01, BC-02, BC-03, BC-05) as the
// fake Prometheus's answers, through the real handler chain: no NaN is ever
// served, one pod's NaN never poisons the pool, an empty answer is "no data"
// (an error the HPA holds on), never 0, and a series scraped by three monitors
// counts once.
func TestHazards(t *testing.T) {
	app := map[string]string{"app": "vllm"}
	pods := []pod{{name: "vllm-pod-a", labels: app}, {name: "vllm-pod-b", labels: app}}
	tests := []struct {
		name    string
		queries Queries
		answer  func(q string) (int, string)
		pods    []pod
		metric  string
		want    string // the value; empty for an error
		code    int
		msg     []string
		labels  map[string]string
	}{
		{
			name:   "BC-01: a NaN sample without pod labels is never served",
			answer: ok(map[string]string{"series": hazard(t, "BC-01.json")}),
			pods:   pods[:1], metric: policy.MetricSaturation, code: http.StatusServiceUnavailable,
			msg: []string{"none has fresh data", "vllm-pod-a: no engine series in Prometheus for this pod"},
		},
		{
			name:   "BC-01: nor as a raw signal",
			answer: ok(map[string]string{"series": hazard(t, "BC-01.json")}),
			pods:   pods[:1], metric: policy.MetricQueueDepth, code: http.StatusServiceUnavailable,
			msg: []string{"vllm-pod-a: no engine series in Prometheus"},
		},
		{
			// BC-02's series carry no metric name: served as the answer of a
			// family's own selector, they are that family's.
			name:    "BC-02: one pod's NaN drops that pod alone",
			queries: Queries{Series: map[string]string{"vllm:kv_cache_usage_perc": `job:vllm_kv_cache_usage:max`}},
			answer: func(q string) (int, string) {
				if strings.Contains(q, "job:vllm_kv_cache_usage:max") {
					return http.StatusOK, hazard(t, "BC-02.json")
				}
				return http.StatusOK, emptyVector
			},
			pods: pods, metric: policy.MetricSaturation,
			// a: 0.42 / 0.8 = 0.525; b has no valid term: unknown, 1.0. Mean 0.7625.
			want: "763m", labels: map[string]string{"pods": "2", "pods_unknown": "1"},
		},
		{
			name:    "BC-02: the mean KV usage is over the pods that report",
			queries: Queries{Series: map[string]string{"vllm:kv_cache_usage_perc": `job:vllm_kv_cache_usage:max`}},
			answer: func(q string) (int, string) {
				if strings.Contains(q, "job:vllm_kv_cache_usage:max") {
					return http.StatusOK, hazard(t, "BC-02.json")
				}
				return http.StatusOK, emptyVector
			},
			pods: pods, metric: policy.MetricKVCacheUsage, want: "420m",
		},
		{
			name:   "BC-03: an empty vector is no data, never 0",
			answer: ok(map[string]string{"series": hazard(t, "BC-03.json")}),
			pods:   pods, metric: policy.MetricQueueDepth, code: http.StatusServiceUnavailable,
			msg: []string{"2 Ready pods match, none has fresh data", "vllm-pod-a: no engine series in Prometheus", "vllm-pod-b: no engine series"},
		},
		{
			name:   "BC-05: three monitors' copies of one series count once",
			answer: ok(map[string]string{"series": hazard(t, "BC-05.json")}),
			pods:   pods[:1], metric: policy.MetricQueueDepth, want: "12",
		},
		{
			name:   "BC-05: saturation from the deduplicated queue",
			answer: ok(map[string]string{"series": hazard(t, "BC-05.json")}),
			pods:   pods[:1], metric: policy.MetricSaturation, want: "2400m",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, newFakeProm(t, tt.answer), fixtureOptions{queries: tt.queries}, tt.pods...)
			r := f.get(t, "llm", tt.metric, "app=vllm")
			if tt.want != "" {
				if r.code != http.StatusOK || len(r.list.Items) != 1 {
					t.Fatalf("HTTP %d (%s) with %d items, want 200 with one", r.code, r.status.Message, len(r.list.Items))
				}
				if got := r.list.Items[0].Value.String(); got != tt.want {
					t.Errorf("value %s, want %s", got, tt.want)
				}
				for k, v := range tt.labels {
					if got := r.list.Items[0].MetricLabels[k]; got != v {
						t.Errorf("metricLabels[%s] = %q, want %q (all: %v)", k, got, v, r.list.Items[0].MetricLabels)
					}
				}
				return
			}
			if r.code != tt.code {
				t.Fatalf("HTTP %d (%s), want %d", r.code, r.status.Message, tt.code)
			}
			for _, m := range tt.msg {
				if !strings.Contains(r.status.Message, m) {
					t.Errorf("message %q lacks %q", r.status.Message, m)
				}
			}
		})
	}
}
