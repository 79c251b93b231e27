package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// fakePrometheus answers the adapter's queries: the engine series query with
// one vLLM engine per pod of the test (vllm-0: 10 waiting, KV 0.4), stamped
// now; every other query with an empty vector. It records the queries.
type fakePrometheus struct {
	srv     *httptest.Server
	mu      sync.Mutex
	queries []string
	down    bool
}

func newFakePrometheus(t *testing.T) *fakePrometheus {
	f := &fakePrometheus{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.FormValue("query")
		f.mu.Lock()
		f.queries = append(f.queries, q)
		down := f.down
		f.mu.Unlock()
		if down {
			http.Error(w, "prometheus is restarting", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if !strings.Contains(q, "__name__=~") {
			io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
			return
		}
		now := float64(time.Now().UnixMilli()) / 1000
		series := func(name, v string) string {
			return fmt.Sprintf(`{"metric":{"__name__":%q,"namespace":"llm","pod":"vllm-0","engine":"0","model_name":"m"},"values":[[%.3f,%q]]}`, name, now, v)
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"matrix","result":[%s,%s]}}`,
			series("vllm:num_requests_waiting", "10"), series("vllm:kv_cache_usage_perc", "0.4"))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakePrometheus) seen(s string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range f.queries {
		if strings.Contains(q, s) {
			return true
		}
	}
	return false
}

// TestAssembledServerPrometheus builds the adapter with --source=prometheus as
// `adapter` does and checks that it serves from Prometheus (never scraping the
// pod), with the configuration file's matchers in its queries, that a failing
// Prometheus is a 503 naming it, and that /metrics carries the source's
// metrics.
func TestAssembledServerPrometheus(t *testing.T) {
	prom := newFakePrometheus(t)
	cfg := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies: []\nprometheus:\n  matchers: '{cluster=\"prod\"}'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startAdapterWith(t, func(o *Options) {
		o.Source = SourcePrometheus
		o.Prometheus.URL = prom.srv.URL
		o.Prometheus.ScrapeInterval = 5 * time.Second
		o.Prometheus.CachePeriod = 100 * time.Millisecond
		o.Scoring.ConfigFile = cfg
	}, nil, filepath.Join("..", "..", "..", "testdata", "hazards", "BC-06.prom"))
	a.waitReady(t)
	// max(10 / 5, 0.4 / 0.8) = 2 from Prometheus; the pod's own /metrics (BC-06,
	// 7.4) is never read.
	if got := a.value(t, "llm_saturation"); got != "2" {
		t.Errorf("llm_saturation = %s, want 2 from Prometheus", got)
	}
	if n := a.engine.Load(); n != 0 {
		t.Errorf("the engine was scraped %d times in prometheus mode", n)
	}
	// The default max sample age: 3 scrape intervals and the cache period.
	if !prom.seen(`namespace="llm",cluster="prod"}[15100ms]`) {
		t.Errorf("no query carried the file's matchers and a range of the max sample age (3 scrape intervals and the cache period): %q", prom.queries)
	}
	code, body := a.get(t, "/metrics")
	for _, m := range []string{"saturation_adapter_prometheus_query_duration_seconds_count{outcome=\"success\",query=\"series\"}", "saturation_adapter_prometheus_data_age_seconds_count"} {
		if code != http.StatusOK || !strings.Contains(string(body), m) {
			t.Errorf("/metrics (HTTP %d) lacks %s", code, m)
		}
	}

	prom.mu.Lock()
	prom.down = true
	prom.mu.Unlock()
	// The last answer is served while it is younger than the max age (3
	// scrape intervals, 15 s), then the failure is the answer.
	var msg string
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, body := a.get(t, "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/llm_saturation?labelSelector=app%3Dvllm")
		msg = string(body)
		return code == http.StatusServiceUnavailable, nil
	}); err != nil {
		t.Fatalf("a failing Prometheus never made the answer a 503: %s", msg)
	}
	if !strings.Contains(msg, "querying Prometheus at "+prom.srv.URL) || !strings.Contains(msg, "server error: 503") {
		t.Errorf("503 message %q does not name Prometheus and its error", msg)
	}
}
