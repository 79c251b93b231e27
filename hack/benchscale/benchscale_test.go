package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain runs the test binary as a child of the load test (the engines or
// the adapter) when the driver started it in a role.
func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		if err := runRole(role, os.Args[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "benchscale %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestHarness runs the load test small (200 engines in 4 pools, 50 requests
// per second for 3 s, under both policy sets) to check that the harness
// works: the children start, every pool answers with every pod counted, the
// requests are answered and the table has a row per run. It asserts nothing
// about time; make bench-scale measures.
func TestHarness(t *testing.T) {
	var rows []Result
	for _, terms := range []string{"default", "every"} {
		c := defaultConfig()
		c.Engines, c.PoolSize, c.Terms = 200, 50, terms
		c.Rate, c.Measure, c.NoHistoryFill = 50, 3*time.Second, true
		c.Dump = filepath.Join("..", "..", "testdata", "samples", "vllm_v1-0.10-nvcr25.09_single-engine.prom")
		c.LogDir = t.TempDir()
		r, err := Run(context.Background(), c)
		if err != nil {
			t.Fatalf("%s terms: %v", terms, err)
		}
		if r.Requests == 0 || r.OK == 0 || r.Failed > 0 {
			t.Errorf("%s terms: %d requests, %d answered fresh, %d failed (first: %s)", terms, r.Requests, r.OK, r.Failed, r.FirstError)
		}
		if r.Scrapes == 0 || r.AdapterCPU <= 0 || r.RSS == 0 {
			t.Errorf("%s terms: %g scrapes, adapter CPU %s, RSS %d bytes: the measurements are missing", terms, r.Scrapes, r.AdapterCPU, r.RSS)
		}
		rows = append(rows, r)
	}
	var b strings.Builder
	PrintTable(&b, rows)
	t.Logf("\n%s", b.String())
	for _, want := range []string{"| 200 | default | – |", "| 200 | every | – |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table has no row starting %q:\n%s", want, b.String())
		}
	}
}

// TestHarnessSources runs make bench-vs-prometheus-adapter's harness small
// (100 engines in one namespace, pools of 10 and 100 pods) through Prometheus:
// this adapter with --source=prometheus, and prometheus-adapter when make
// bench-vs-prometheus-adapter has built it. Each run must answer, read
// Prometheus's scrapes and CPU, and measure a maximum rate on both pool sizes.
// It skips a source whose executable is missing (Debian's prometheus on PATH,
// prometheus-adapter in .cache); it asserts nothing about time.
func TestHarnessSources(t *testing.T) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("no prometheus on PATH (apt-get install prometheus)")
	}
	pa := filepath.Join("..", "..", ".cache", "prometheus-adapter-"+prometheusAdapterVersion, "prometheus-adapter")
	for _, source := range []string{sourcePrometheus, sourcePrometheusAdapter} {
		t.Run(source, func(t *testing.T) {
			if _, err := os.Stat(pa); source == sourcePrometheusAdapter && err != nil {
				t.Skipf("%s: make bench-vs-prometheus-adapter builds it", err)
			}
			c := defaultConfig()
			c.Engines, c.PoolSize, c.Source, c.Prometheus, c.PrometheusAdapter = 100, 10, source, prom, pa
			c.Rate, c.Measure, c.NoHistoryFill = 20, 3*time.Second, true
			c.GroupSizes, c.MaxRateFor, c.MaxRateWorkers = []int{10, 100}, time.Second, 2
			c.Dump = filepath.Join("..", "..", "testdata", "samples", "vllm_v1-0.10-nvcr25.09_single-engine.prom")
			c.LogDir = t.TempDir()
			r, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if r.Requests == 0 || r.OK == 0 || r.Failed > 0 {
				t.Errorf("%d requests, %d answered fresh, %d failed (first: %s)", r.Requests, r.OK, r.Failed, r.FirstError)
			}
			if r.Scrapes == 0 || r.AdapterCPU <= 0 || r.RSS == 0 || r.PromCPU <= 0 || r.PromRSS == 0 || r.OldestAge <= 0 {
				t.Errorf("%g scrapes, adapter CPU %s, RSS %d, Prometheus CPU %s, RSS %d, oldest sample %s: the measurements are missing",
					r.Scrapes, r.AdapterCPU, r.RSS, r.PromCPU, r.PromRSS, r.OldestAge)
			}
			if len(r.MaxRates) != 2 || r.MaxRates[0].OK == 0 || r.MaxRates[1].OK == 0 {
				t.Errorf("max rates %+v, want answers on the 10- and 100-pod pools", r.MaxRates)
			}
			var b strings.Builder
			PrintComparison(&b, []Result{r})
			t.Logf("\n%s", b.String())
		})
	}
}
