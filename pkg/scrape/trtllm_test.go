package scrape_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
)

// TestTRTLLMServeJSONMetrics (hazard NC-17): trtllm-serve answers GET
// /metrics with its iteration stats as JSON ("[]"), the response of
// NC-17-metrics-endpoint.http as captured. The scrape fails, never reads 0,
// and the error names the path of its Prometheus text and the options.
func TestTRTLLMServeJSONMetrics(t *testing.T) {
	raw := readSample(t, "hazards/NC-17-metrics-endpoint.http")
	var kept []string
	for line := range strings.Lines(string(raw)) {
		if !strings.HasPrefix(line, "#") {
			kept = append(kept, line)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(strings.ReplaceAll(strings.Join(kept, ""), "\n", "\r\n"))), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	ctype := resp.Header.Get("Content-Type")
	e := newEngine(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ctype)
		_, _ = w.Write(bytes.TrimSpace(body))
	}))
	f := newFixture(t, defaultOptions())
	r := f.scraper.ScrapeOne(context.Background(), e.target("trtllm-0"))
	var se *scrape.Error
	if !errors.As(r.Err, &se) || se.Reason != scrape.ReasonParse || !strings.Contains(r.Err.Error(), "/prometheus/metrics") || !strings.Contains(r.Err.Error(), "enable_iter_perf_stats") {
		t.Errorf("scrape of trtllm-serve's /metrics: %v, want a parse error naming /prometheus/metrics and enable_iter_perf_stats", r.Err)
	}
	if r.Reading() != nil {
		t.Errorf("a reading from a JSON body: %+v", r.Reading())
	}
}
