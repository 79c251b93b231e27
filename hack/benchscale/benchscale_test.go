package main

import (
	"context"
	"fmt"
	"os"
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
