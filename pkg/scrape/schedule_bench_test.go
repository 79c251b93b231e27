package scrape

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// BenchmarkSchedule10000Targets measures the schedule's own cost: one interval
// of 10,000 pods in 100 namespaces, each due once, handed to the dispatcher,
// "scraped" by a stub that returns at once, and rescheduled. ns/op is one
// interval's scheduling; ns/scrape and allocs per scrape are what the
// per-target schedule adds to each scrape (the HTTP and parsing cost is
// BenchmarkScrape1000Pods').
func BenchmarkSchedule10000Targets(b *testing.B) {
	const (
		pods       = 10000
		namespaces = 100
		interval   = 2 * time.Second
	)
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	s := New(Options{Concurrency: 64}, nil, Reader{}, clk, m)
	var scraped atomic.Int64
	res := &Result{}
	s.scrapeFn = func(context.Context, Target) *Result { scraped.Add(1); return res }
	targets := make([]Target, pods)
	for i := range targets {
		ns := fmt.Sprintf("ns-%03d", i%namespaces)
		targets[i] = Target{Pod: types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("vllm-%05d", i)},
			UID: types.UID(fmt.Sprintf("uid-%05d", i)), Pool: "p"}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, interval, func() []Target { return targets }) }()
	defer func() { cancel(); <-done }()
	settle := func() {
		for !s.Settled(0) {
			time.Sleep(50 * time.Microsecond)
		}
	}
	round := func() {
		want := scraped.Load() + pods
		settle()
		clk.Step(interval)
		for scraped.Load() < want {
			time.Sleep(50 * time.Microsecond)
		}
	}
	round() // first round: every pod joins at its phase
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.StopTimer()
	settle()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*pods), "ns/scrape")
}
