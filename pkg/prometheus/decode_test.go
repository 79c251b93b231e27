package prometheus

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// TestDecode: the server's decoder (decodeStream) reads saved answers and
// hazards, and refuses what is not a vector or matrix answer with a clear error.
func TestDecode(t *testing.T) {
	tests := []struct {
		name, body string
		series     int
		err        string
	}{
		{"BC-01: a NaN vector", hazard(t, "BC-01.json"), 1, ""},
		{"BC-05: duplicates", hazard(t, "BC-05.json"), 3, ""},
		{"a matrix", `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"pod":"a"},"values":[[1,"1"],[2,"+Inf"]]}]}}`, 1, ""},
		{"an error", `{"status":"error","errorType":"bad_data","error":"parse error at char 3"}`, 0, `bad_data: parse error at char 3`},
		{"a scalar", `{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}`, 0, `result type "scalar"`},
		{"not JSON", `<html>`, 0, "not a Prometheus API response"},
		{"a value that is not a number", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"many"]}]}}`, 0, `not a [time, "value"] pair`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := decodeStream(strings.NewReader(tt.body), decodeLimits{}, nil)
			if tt.err != "" {
				var qerr *QueryError
				if !(errors.Is(err, ErrResponse) || errors.As(err, &qerr)) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want ErrResponse or a QueryError saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := len(a.series); got != tt.series {
				t.Errorf("%d series, want %d", got, tt.series)
			}
		})
	}
}

// checkHistory asserts what any history built from any answer must hold:
// every value present finite, non-negative and in range, and a pool value
// that can be served.
func checkHistory(t *testing.T, h *history.History) {
	t.Helper()
	r := h.Latest()
	for _, p := range []*float64{r.QueueDepthPtr(), r.RunningPtr(), r.KVCacheUsagePtr(), r.PreemptionsPtr(), r.KVCacheUsageMax} {
		if p != nil && (math.IsNaN(*p) || math.IsInf(*p, 0) || *p < 0) {
			t.Fatalf("reading value %g", *p)
		}
	}
	if p := r.KVCacheUsagePtr(); p != nil && *p > 1 {
		t.Fatalf("KV usage %g", *p)
	}
	c, err := policy.NewCatalog(policy.Policy{Name: "p", Kind: policy.KindDemand, UnknownSaturation: 1, Terms: []policy.Term{
		{Kind: policy.TermQueueDepth, SetPoint: 5}, {Kind: policy.TermPreemptionRate, SetPoint: 1, Window: time.Minute},
		{Kind: policy.TermTTFT, SetPoint: 1, Quantile: 0.9, Window: time.Minute},
	}})
	if err != nil {
		t.Fatal(err)
	}
	b := c.Lookup("p").NewPool(r.At(), time.Minute)
	b.Add(h, "")
	if v := b.Pool().Value; v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0) {
		t.Fatalf("pool value %g", *v)
	}
}

// FuzzDecode: any body either fails to decode (the server's decoder) with
// ErrResponse or a *QueryError, or becomes series that build into histories
// whose every value is valid, and explain's reading of it (ReadingsOf) fails
// the same way or gives valid readings; nothing panics.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "hazards", "BC-0*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"vllm:num_requests_waiting","namespace":"n","pod":"p","engine":"0"},"values":[[1,"3"],[2,"1e309"],[3,"-1"]]},` +
		`{"metric":{"__name__":"vllm:kv_cache_usage_perc","namespace":"n","pod":"p","engine":"0"},"values":[[3,"1.5"]]},` +
		`{"metric":{"saturation_adapter_metric":"vllm:time_to_first_token_seconds_bucket","namespace":"n","pod":"p","le":"x"},"values":[[3,"2"]]}]}}`))
	e := signals.NewExtractor()
	f.Fuzz(func(t *testing.T, body []byte) {
		rs, _, rerr := ReadingsOf(body, DefaultLabels(), e)
		a, err := decodeStream(bytes.NewReader(body), decodeLimits{maxPoints: maxPointsPerSeries}, nil)
		if (err == nil) != (rerr == nil) {
			t.Fatalf("explain's reading fails with %v, the server's decoder with %v", rerr, err)
		}
		for _, prs := range rs {
			for _, r := range prs {
				if q := r.QueueDepthPtr(); q != nil && (math.IsNaN(*q) || math.IsInf(*q, 0) || *q < 0) {
					t.Fatalf("explain's reading: queue depth %g", *q)
				}
			}
		}
		if err != nil {
			var qerr *QueryError
			if !errors.Is(err, ErrResponse) && !errors.As(err, &qerr) {
				t.Fatalf("error %v is neither ErrResponse nor a QueryError", err)
			}
			return
		}
		pods := map[types.NamespacedName]*podData{}
		byPod(pods, a.series, DefaultLabels(), "", "", 0)
		byPod(pods, a.series, DefaultLabels(), "", "", time.Minute)
		o := newBuildOptions(e, history.HistoryOptions{}, []history.WindowKey{{Window: time.Minute}}, 15*time.Second)
		o.now = time.Unix(1767225600, 0)
		for _, d := range pods {
			h, err := build(d, o)
			if err != nil {
				continue
			}
			checkHistory(t, h)
		}
	})
}
