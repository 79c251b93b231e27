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
// With -sources it also measures the adapter reading Prometheus
// (--source=prometheus) and prometheus-adapter (make
// bench-vs-prometheus-adapter), with a Prometheus on loopback scraping the same
// engines, and with -max-rate-pools the maximum request rate per pool size.
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
	var engines, terms, sources, sizes string
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
	fs.StringVar(&sources, "sources", cfg.Source, "comma-separated adapters, one run each per engine count and policy set: direct (this adapter scraping the engines), prometheus (this adapter with --source=prometheus) or prometheus-adapter (prometheus-adapter "+prometheusAdapterVersion+" with llm_saturation as an external rule); the last two start -prometheus scraping the engines")
	fs.DurationVar(&cfg.PromInterval, "prometheus-scrape-interval", 0, "Prometheus's scrape interval (the adapter's --prometheus-scrape-interval); -scrape-interval when 0")
	fs.StringVar(&cfg.Prometheus, "prometheus", cfg.Prometheus, "the prometheus executable")
	fs.StringVar(&cfg.PrometheusAdapter, "prometheus-adapter", cfg.PrometheusAdapter, "the prometheus-adapter executable (make bench-vs-prometheus-adapter builds it there)")
	fs.StringVar(&sizes, "max-rate-pools", "", "comma-separated pool sizes whose maximum request rate is measured after the window (e.g. 10,100,1000: the first namespace's first N pods; -pool-size × 10 must reach the largest)")
	fs.DurationVar(&cfg.MaxRateFor, "max-rate-for", 5*time.Second, "how long each maximum request rate is measured")
	fs.IntVar(&cfg.MaxRateWorkers, "max-rate-workers", cfg.MaxRateWorkers, "requests at a time while the maximum rate is measured")
	_ = fs.Parse(os.Args[1:])
	var err error
	if cfg.GroupSizes, err = sizesFlag(sizes); err != nil {
		fmt.Fprintf(os.Stderr, "benchscale: -max-rate-pools: %v\n", err)
		os.Exit(2)
	}
	if len(cfg.GroupSizes) == 0 {
		cfg.MaxRateFor = 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var rows []Result
	for _, src := range strings.Split(sources, ",") {
		for _, t := range strings.Split(terms, ",") {
			for _, e := range strings.Split(engines, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(e))
				if err != nil || n < 1 {
					fmt.Fprintf(os.Stderr, "benchscale: -engines: %q is not a positive number\n", e)
					os.Exit(2)
				}
				run := cfg
				run.Engines, run.Terms, run.Source = n, strings.TrimSpace(t), strings.TrimSpace(src)
				if run.Source == sourcePrometheusAdapter && run.Terms != "default" {
					fmt.Fprintf(os.Stderr, "benchscale: %d engines, %s terms, %s: skipped (its rules compute the built-in llm_saturation only)\n", n, run.Terms, run.Source)
					continue
				}
				fmt.Fprintf(os.Stderr, "benchscale: %d engines, %s terms, %s ...\n", n, run.Terms, run.Source)
				start := time.Now()
				r, err := Run(ctx, run)
				if err != nil {
					fmt.Fprintf(os.Stderr, "benchscale: %d engines, %s terms, %s: %v\n", n, run.Terms, run.Source, err)
					os.Exit(1)
				}
				fmt.Fprintf(os.Stderr, "benchscale: done in %s\n", time.Since(start).Round(time.Second))
				rows = append(rows, r)
			}
		}
	}
	var direct []Result
	compare := false
	for _, r := range rows {
		if r.Source == sourceDirect {
			direct = append(direct, r)
		}
		compare = compare || r.Source != sourceDirect || len(r.MaxRates) > 0
	}
	if compare {
		PrintComparison(os.Stdout, rows)
		printNotes(os.Stdout, rows)
	} else {
		PrintTable(os.Stdout, direct)
	}
}
