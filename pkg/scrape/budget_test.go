package scrape_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// dupBody is the body: 1.17 MB of 19,999 duplicate series of one
// engine's queue (within the 20,000-series and 4 MiB bounds).
func dupBody() []byte {
	var b bytes.Buffer
	for i := 0; i < 19999; i++ {
		fmt.Fprintf(&b, "vllm:num_requests_waiting{engine=\"0\",model_name=\"qwen3-32b\",replica=\"%019d\"} 3\n", i)
	}
	return b.Bytes()
}

// heapStats returns the live heap after a GC.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// Issue 20: 64 pods serving 1.17 MB bodies of 19,999 duplicate series (valid
// and within every bound) held a replica at 417–524 MiB: every scrape in
// flight held its body, its filtered lines and its parsed samples, and the
// pools kept them. The scrapes in flight now hold at most InflightBytes (a
// namespace a quarter of it): a scrape waits for room before it reads, and
// one whose body grows past the room left fails (over_budget) and lets go of
// it; huge buffers are not pooled. The heap stays near the bound while such a
// namespace is scraped, and another namespace's engine is read on every
// round.
func TestHugeValidBodiesStayWithinTheInflightBound(t *testing.T) {
	if testing.Short() {
		t.Skip("scrapes 64 × 1.86 MB bodies 3 times")
	}
	body := dupBody()
	if len(body) < 1100000 || len(body) > 4<<20 {
		t.Fatalf("body of %d bytes", len(body))
	}
	const bound = 64 << 20
	opts := scrape.Options{Timeout: 20 * time.Second, MaxBodyBytes: 4 << 20, Concurrency: 64, InflightBytes: bound}
	f := newFixture(t, opts)
	var targets []scrape.Target
	for i := range 64 {
		e := newEngine(t, serve(http.StatusOK, body))
		tg := e.target(fmt.Sprintf("noisy-%d", i))
		tg.Pod.Namespace = "noisy"
		targets = append(targets, tg)
	}
	quiet := newEngine(t, serve(http.StatusOK, readSample(t, vllmSample)))
	qt := quiet.target("quiet")
	qt.Pod.Namespace, qt.UID = "quiet", types.UID("quiet")
	targets = append(targets, qt)

	before := liveHeap()
	var peak int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			peak = max(peak, int64(m.HeapInuse))
		}
	}()
	for range 3 {
		f.scraper.Scrape(context.Background(), targets)
		if r, _ := f.scraper.Latest(qt.UID); r == nil || r.Err != nil {
			t.Errorf("the quiet namespace's engine: %+v, want a reading on every round", r)
		}
	}
	close(stop)
	<-sampled
	held := liveHeap() - before
	t.Logf("in-flight bound %d MiB: peak heap in use %d MiB, held after %d MiB", bound>>20, peak>>20, held>>20)
	// The bound, the garbage the GC lets accumulate (GOGC=100: as much again
	// as what is live) and the test's own engines and bodies. Without the
	// bound the same rounds peaked above 1.8 GiB in use.
	if peak > 2*bound+int64(96<<20) {
		t.Errorf("peak heap in use %d MiB with an in-flight bound of %d MiB", peak>>20, bound>>20)
	}
	if held > 32<<20 {
		t.Errorf("%d MiB held after the scrapes, want the pooled buffers let go", held>>20)
	}
	if r, _ := f.scraper.Latest(targets[0].UID); r == nil || (r.Err == nil && r.Reading() == nil) {
		t.Errorf("a noisy pod: %+v", r)
	}
}

// A namespace's kept readings are bounded: a pod whose new reading would take
// them past ReadingsBytes is not stored (over_budget, the pod ages into
// unknown), other namespaces' pods are, and a pod that leaves the scrape set
// gives its bytes back.
func TestReadingsBudgetPerNamespace(t *testing.T) {
	// 2,000 histogram buckets per reading: about 32 KB for the newest, 4 KB
	// for each older one (its histograms packed).
	var b strings.Builder
	b.WriteString("vllm:num_requests_waiting{engine=\"0\"} 1\n")
	for i := range 2000 {
		fmt.Fprintf(&b, "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"%d\"} %d\n", i, i)
	}
	b.WriteString("vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\"} 2000\n")
	big := b.String()
	cat, err := policy.NewCatalog(policy.Policy{Name: "ttft", Kind: policy.KindMean, UnknownSaturation: 1,
		Terms: []policy.Term{{Kind: policy.TermQueueDepth, SetPoint: 1}, {Kind: policy.TermTTFT, SetPoint: 1, Quantile: 0.9, Window: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	opts := defaultOptions()
	opts.ReadingsBytes = 256 << 10
	f := newFixture(t, opts)
	f.scraper.SetReader(scrape.Reader{Extractor: signals.NewExtractor(), History: history.HistoryOptions{Needs: cat.Needs()}})
	var noisy []scrape.Target
	for i := range 8 {
		tg := newEngine(t, serve(http.StatusOK, []byte(big))).target(fmt.Sprintf("big-%d", i))
		tg.Pod.Namespace = "noisy"
		noisy = append(noisy, tg)
	}
	other := newEngine(t, serve(http.StatusOK, []byte(big))).target("other")
	other.Pod.Namespace = "other"
	all := append(append([]scrape.Target(nil), noisy...), other)
	for range 6 {
		f.clock.Step(2 * time.Second)
		f.scraper.Scrape(context.Background(), all)
	}
	over := 0
	for _, tg := range noisy {
		var serr *scrape.Error
		if r, _ := f.scraper.Latest(tg.UID); r != nil && errors.As(r.Err, &serr) && serr.Reason == scrape.ReasonOverBudget {
			over++
		}
	}
	if over == 0 {
		t.Errorf("no noisy pod refused: 8 pods' histories of 6 readings (~52 KB) fit in 256 KiB?")
	}
	if r, _ := f.scraper.Latest(other.UID); r == nil || r.Err != nil {
		t.Errorf("another namespace's pod: %+v, want its readings kept", r)
	}
	kept := int64(0)
	for _, tg := range noisy {
		if r, _ := f.scraper.Latest(tg.UID); r != nil && r.History != nil {
			kept += scrape.Footprint(r.History)
		}
	}
	if kept > opts.ReadingsBytes {
		t.Errorf("the namespace keeps %d bytes of readings, more than its %d", kept, opts.ReadingsBytes)
	}
	// Once the noisy pods leave the scrape set, their bytes are given back.
	f.scraper.Sync(context.Background(), []scrape.Target{noisy[0]})
	f.clock.Step(2 * time.Second)
	f.scraper.Scrape(context.Background(), []scrape.Target{noisy[0]})
	if r, _ := f.scraper.Latest(noisy[0].UID); r == nil || r.Err != nil {
		t.Errorf("alone in its namespace: %+v, want its reading kept", r)
	}
}
