package calibrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// sample is one reading of the engine's /metrics: the pod values the adapter
// computes (pkg/signals), nil where the engine does not export the signal or
// its value was rejected.
type sample struct {
	at                                   time.Duration // offset from the run's start
	queue, running, kv, kvMax, preempted *float64
	// steps and stepTokens are vllm:iteration_tokens_total's count and sum
	// (engine steps and the tokens they computed, cumulative, summed over
	// engines); nil when the engine does not export it.
	steps, stepTokens *float64
}

// maxMetricsBody bounds one /metrics body, as the adapter's scraper does by
// default (--scrape-max-body-bytes).
const maxMetricsBody = 4 << 20

// fetchMetrics reads the metrics URL once.
func fetchMetrics(ctx context.Context, client *http.Client, u string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetricsBody+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if len(body) > maxMetricsBody {
		return nil, fmt.Errorf("GET %s: body larger than %d bytes", u, maxMetricsBody)
	}
	return body, nil
}

// readingSample turns a pkg/signals reading into a sample.
func readingSample(at time.Duration, rd signals.Reading) sample {
	return sample{at: at, queue: rd.Ptr(signals.QueueDepth), running: rd.Ptr(signals.Running), kv: rd.Ptr(signals.KVCacheUsage),
		kvMax: rd.KVCacheUsageMax, preempted: rd.Ptr(signals.Preemptions)}
}

// parseIterationTokens reads vLLM's vllm:iteration_tokens_total histogram
// (observed once per engine step with the tokens it computed): its _count and
// _sum, summed over engines. It reports false when the family is absent.
func parseIterationTokens(body []byte) (steps, tokens float64, ok bool) {
	p := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	var lset labels.Labels
	for {
		entry, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, 0, false
		}
		if entry != textparse.EntrySeries {
			continue
		}
		p.Labels(&lset)
		_, _, v := p.Series()
		switch lset.Get(model.MetricNameLabel) {
		case "vllm:iteration_tokens_total_count":
			steps += v
			ok = true
		case "vllm:iteration_tokens_total_sum":
			tokens += v
		}
	}
	return steps, tokens, ok
}

// cacheConfig is vLLM's vllm:cache_config_info: the KV cache's shape.
type cacheConfig struct {
	blockSize, numGPUBlocks int
}

// parseCacheConfig finds vllm:cache_config_info in a /metrics body and reads
// its block_size and num_gpu_blocks labels (vLLM V0 and V1 and
// llm-d-inference-sim export it; the values of data-parallel engines are
// summed, each engine owning its blocks). It reports false when the family is
// absent or its labels are not integers. pkg/signals does not read this
// information metric, so it is parsed here with the same Prometheus parser.
func parseCacheConfig(body []byte) (cacheConfig, bool) {
	p := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	var (
		out  cacheConfig
		lset labels.Labels
		seen bool
	)
	for {
		entry, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return cacheConfig{}, false
		}
		if entry != textparse.EntrySeries {
			continue
		}
		p.Labels(&lset)
		if lset.Get(model.MetricNameLabel) != "vllm:cache_config_info" {
			continue
		}
		bs, err1 := strconv.Atoi(lset.Get("block_size"))
		n, err2 := strconv.Atoi(lset.Get("num_gpu_blocks"))
		if err1 != nil || err2 != nil || bs < 1 || n < 2 {
			return cacheConfig{}, false
		}
		if seen && bs != out.blockSize {
			return cacheConfig{}, false
		}
		out.blockSize = bs
		out.numGPUBlocks += n
		seen = true
	}
	return out, seen
}
