package nodeagent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestInFlight(t *testing.T) {
	for name, tc := range map[string]struct {
		body    string
		want    float64
		wantErr bool
	}{
		"v1 two engines": {body: `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
vllm:num_requests_waiting_total 99
`, want: 6},
		"no labels, no final newline": {body: "vllm:num_requests_running 0\nvllm:num_requests_waiting 0", want: 0},
		// An engine exposes its queue beside its batch: a body without either
		// queue or KV usage is no engine's (signals.ErrNoEngineMetrics).
		"label value with a space": {body: "vllm:num_requests_running{model_name=\"a b\"} 2\nvllm:num_requests_waiting{model_name=\"a b\"} 0\n", want: 2},
		// The hand scanner this replaced read the value after an escaped quote wrong.
		"escaped quote in a label": {body: "vllm:num_requests_running{model_name=\"a\\\" 7 b\"} 2\nvllm:num_requests_waiting 1\n", want: 3},
		"sglang":                   {body: "sglang:num_running_reqs 1\nsglang:num_queue_reqs 4\n", want: 5},
		"not an engine":            {body: "process_cpu_seconds_total 1\n", wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, tc.body) }))
			defer srv.Close()
			got, err := inFlight(context.Background(), srv.URL)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Errorf("inFlight = %g, want %g", got, tc.want)
			}
		})
	}
}
