package prometheus

import (
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

// The load the issue names: 200 HPAs polling every 15 s (at their own phases,
// through the HPA controller's 5 workers) over 4 namespaces cost at most one
// query per (namespace, query) per cache period, however many ask; the age of
// the data served is Prometheus's scrape interval plus the cache period at
// most. The fake Prometheus scrapes every pod every 15 s.
func TestLoad200HPAs(t *testing.T) {
	const (
		namespaces  = 4
		hpas        = 200
		podsPerHPA  = 2
		poll        = 15 * time.Second
		scrapeEvery = 15 * time.Second
		step        = 500 * time.Millisecond
		length      = 2 * time.Minute
		workers     = 5
	)
	var pods []pod
	for i := range hpas {
		for k := range podsPerHPA {
			pods = append(pods, pod{ns: fmt.Sprintf("team-%d", i%namespaces), name: fmt.Sprintf("svc-%03d-%d", i, k),
				labels: map[string]string{"app": fmt.Sprintf("svc-%03d", i)}})
		}
	}
	var f *fixture
	nsOf := regexp.MustCompile(`namespace="([^"]+)"`)
	prom := newFakeProm(t, func(q string) (int, string) {
		ns := nsOf.FindStringSubmatch(q)[1]
		if queryKind(q) == "window" {
			return http.StatusOK, emptyVector
		}
		now := f.clock.Now()
		last := now.Truncate(scrapeEvery)
		var ss []*model.SampleStream
		for _, p := range pods {
			if p.ns != ns {
				continue
			}
			var pts []any
			for at := last.Add(-45 * time.Second); !at.After(last); at = at.Add(scrapeEvery) {
				pts = append(pts, at, 3)
			}
			lbl := vllm("vllm:num_requests_waiting", p.name)
			lbl[3] = ns
			ss = append(ss, stream(lbl, pts...))
		}
		return http.StatusOK, envelope(t, model.Matrix(ss))
	})
	f = newFixture(t, prom, fixtureOptions{opts: Options{MaxAge: 45 * time.Second, ScrapeInterval: scrapeEvery}}, pods...)

	start := f.clock.Now()
	var (
		mu       sync.Mutex
		ages     []time.Duration
		failures []string
	)
	var tick time.Time
	for now := start; now.Before(start.Add(length)); now = now.Add(step) {
		f.clock.SetTime(now)
		if now.Sub(tick) >= DefaultCachePeriod {
			// Source.Run's tick: the namespaces asked about are refreshed.
			f.source.refreshAll(now)
			f.source.refreshing.Wait()
			tick = now
		}
		var due []int
		for i := range hpas {
			phase := time.Duration(i) * poll / hpas
			if d := now.Sub(start) - phase; d >= 0 && d%poll < step {
				due = append(due, i)
			}
		}
		work := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					r := f.get(t, fmt.Sprintf("team-%d", i%namespaces), policy.MetricSaturation, fmt.Sprintf("app=svc-%03d", i))
					mu.Lock()
					if r.code != http.StatusOK || r.list.Items[0].Value.String() != "600m" {
						failures = append(failures, fmt.Sprintf("HPA %d: HTTP %d %s", i, r.code, r.status.Message))
					} else {
						ages = append(ages, now.Sub(r.list.Items[0].Timestamp.Time))
					}
					mu.Unlock()
				}
			}()
		}
		for _, i := range due {
			work <- i
		}
		close(work)
		wg.Wait()
	}
	if len(failures) > 0 {
		t.Fatalf("%d failed requests, first: %s", len(failures), failures[0])
	}
	requests := len(ages)
	periods := int(math.Ceil(float64(length) / float64(DefaultCachePeriod)))
	counts := map[string]int{}
	prom.mu.Lock()
	for _, q := range prom.queries {
		counts[nsOf.FindStringSubmatch(q)[1]+"/"+queryKey(q)]++
	}
	prom.mu.Unlock()
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var report []string
	for _, k := range keys {
		report = append(report, fmt.Sprintf("%s %d", k, counts[k]))
		if counts[k] > periods {
			t.Errorf("%s: %d queries in %d cache periods, want at most one per period", k, counts[k], periods)
		}
	}
	if len(keys) != namespaces*(1+f.windowQueries()) {
		t.Errorf("queries by (namespace, query) %v, want a series query and one window query per counter family (%d) for each of %d namespaces",
			counts, f.windowQueries(), namespaces)
	}
	slices.Sort(ages)
	var sum time.Duration
	for _, a := range ages {
		sum += a
	}
	p50, p99, worst := ages[len(ages)/2], ages[len(ages)*99/100], ages[len(ages)-1]
	t.Logf("%d requests from %d HPAs over %s: queries per (namespace, query) %s (at most %d cache periods of %s); "+
		"served data age mean %s, p50 %s, p99 %s, max %s", requests, hpas, length, strings.Join(report, ", "), periods, DefaultCachePeriod,
		(sum / time.Duration(len(ages))).Round(time.Millisecond), p50, p99, worst)
	if requests < hpas*(int(length/poll)-1) {
		t.Errorf("%d requests, want every HPA polling every %s", requests, poll)
	}
	if limit := scrapeEvery + DefaultCachePeriod; worst > limit {
		t.Errorf("data served %s old, want at most the scrape interval plus the cache period (%s)", worst, limit)
	}
}
