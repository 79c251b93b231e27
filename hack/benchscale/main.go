// Command benchscale is the adapter's load test (make bench-scale): N loopback
// engines serving the real 47 KB vLLM V1 dump, scraped every 2 s by the
// assembled adapter server (Options → Config → New → Run over a fake clientset
// holding the pods and one HorizontalPodAutoscaler per pool), while External
// metric requests arrive at a fixed rate over HTTPS with a client certificate,
// as the aggregator sends them. It prints one table row per run: the adapter
// process's CPU (CPU-seconds from /proc, not wall time) and resident memory,
// per engine, the request latency, whether every answer was fresh, and how
// busy the machine was.
//
// Three kinds of process: this driver (the request load and the measurements),
// the engines (one process per engineBatch engines, so that no process needs
// more open files than a default hard limit allows) and the adapter. Each is
// this same executable, started again with roleEnv set; the driver's own CPU
// and the engines' are reported apart from the adapter's.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if role := os.Getenv(roleEnv); role != "" {
		if err := runRole(role, os.Args[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "benchscale %s: %v\n", role, err)
			os.Exit(1)
		}
		return
	}
	cfg := defaultConfig()
	var engines, terms string
	fs := flag.NewFlagSet("benchscale", flag.ExitOnError)
	fs.StringVar(&engines, "engines", "1000,3000,10000", "comma-separated engine counts, one run each")
	fs.StringVar(&terms, "terms", "default,every", "comma-separated policy sets, one run each per engine count: default (the built-in policies) or every (a policy with every term kind, histograms on)")
	fs.StringVar(&cfg.Dump, "dump", cfg.Dump, "the /metrics body the engines serve")
	fs.IntVar(&cfg.PoolSize, "pool-size", cfg.PoolSize, "pods per pool (one HPA each); 10 pools per namespace")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "External metric requests per second during the measurement")
	fs.DurationVar(&cfg.Measure, "measure", cfg.Measure, "length of the measurement window")
	fs.DurationVar(&cfg.Interval, "scrape-interval", cfg.Interval, "the adapter's --scrape-interval")
	fs.StringVar(&cfg.ProfileDir, "profile", "", "write the adapter's CPU profile (over the measurement window) and heap profiles (at its start and end: pprof -diff_base shows what the window allocated) into this directory, one set per run; profiling costs the adapter CPU, so those runs' numbers are a little high")
	fs.StringVar(&cfg.GoMemLimit, "gomemlimit", "", "the adapter's GOMEMLIMIT (e.g. 920MiB, as the chart's goMemLimit is for a 1 GiB memory limit); unset by default")
	fs.StringVar(&cfg.LogDir, "logs", "", "keep the adapter's and engines' logs in this directory (default: a temporary one, removed)")
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var rows []Result
	for _, t := range strings.Split(terms, ",") {
		for _, e := range strings.Split(engines, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(e))
			if err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "benchscale: -engines: %q is not a positive number\n", e)
				os.Exit(2)
			}
			run := cfg
			run.Engines, run.Terms = n, strings.TrimSpace(t)
			fmt.Fprintf(os.Stderr, "benchscale: %d engines, %s terms ...\n", n, run.Terms)
			start := time.Now()
			r, err := Run(ctx, run)
			if err != nil {
				fmt.Fprintf(os.Stderr, "benchscale: %d engines, %s terms: %v\n", n, run.Terms, err)
				os.Exit(1)
			}
			fmt.Fprintf(os.Stderr, "benchscale: done in %s\n", time.Since(start).Round(time.Second))
			rows = append(rows, r)
		}
	}
	PrintTable(os.Stdout, rows)
}
