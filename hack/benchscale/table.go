package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"
)

func numCPU() int { return runtime.NumCPU() }

// PrintTable writes the runs as one Markdown table, then the machine's load
// during each run and the first stale or failed answer of any.
func PrintTable(w io.Writer, rows []Result) {
	fmt.Fprintln(w, "| engines | terms | GOMEMLIMIT | adapter CPU (cores) | CPU per scrape | RSS max (peak) | RSS per engine | Go heap | scrapes per engine per interval | scrape errors, skipped | answers fresh | oldest reading (max age) | requests/s | latency p50 / p99 / max |")
	fmt.Fprintln(w, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		secs := r.Window.Seconds()
		perScrape := "–"
		if r.Scrapes > 0 {
			perScrape = fmt.Sprintf("%.0f µs", r.AdapterCPU.Seconds()/r.Scrapes*1e6)
		}
		intervals := secs / interval(r).Seconds()
		limit := r.GoMemLimit
		if limit == "" {
			limit = "–"
		}
		fmt.Fprintf(w, "| %d | %s | %s | %.3f | %s | %s (%s) | %.1f KiB | %s | %.2f | %.0f, %.0f | %d of %d | %.1f s (%s) | %.0f | %s / %s / %s |\n",
			r.Engines, r.Terms, limit, r.AdapterCPU.Seconds()/secs, perScrape, mib(r.RSS), mib(r.Peak), float64(r.RSS)/1024/float64(r.Engines),
			mib(r.HeapInuse), r.Scrapes/float64(r.Engines)/intervals, r.ScrapeErrors, r.Skipped, r.OK, r.Requests,
			r.OldestAge.Seconds(), r.MaxAge, float64(r.Requests)/secs, ms(r.Quantile(0.5)), ms(r.Quantile(0.99)), ms(r.Quantile(1)))
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		secs := r.Window.Seconds()
		others := (r.MachineBusy - r.AdapterCPU - r.EngineCPU - r.DriverCPU).Seconds() / secs
		fmt.Fprintf(w, "- %d engines, %s terms: %.0f s window; the machine (%d CPUs) was at least %.2f cores busy: adapter %.2f, engines %.2f, load driver %.2f, other processes %.2f; load average %.2f; textparse over the dump took %.0f µs before the run.\n",
			r.Engines, r.Terms, secs, r.CPUs, r.MachineBusy.Seconds()/secs, r.AdapterCPU.Seconds()/secs, r.EngineCPU.Seconds()/secs,
			r.DriverCPU.Seconds()/secs, max(0, others), r.Load1, float64(r.Reference)/float64(time.Microsecond))
	}
	for _, r := range rows {
		if r.FirstError != "" {
			fmt.Fprintf(w, "- %d engines, %s terms: %d stale and %d failed answers; first: %s\n", r.Engines, r.Terms, r.Stale, r.Failed, strings.TrimSpace(r.FirstError))
		}
	}
}

// interval is the scrape interval of a run: a third of its max age.
func interval(r Result) time.Duration { return r.MaxAge / 3 }

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
