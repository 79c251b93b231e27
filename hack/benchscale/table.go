package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
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
	printNotes(w, rows)
}

// printNotes writes the machine's load during each run and the first stale or
// failed answer of any.
func printNotes(w io.Writer, rows []Result) {
	for _, r := range rows {
		secs := r.Window.Seconds()
		others := (r.MachineBusy - r.AdapterCPU - r.EngineCPU - r.DriverCPU).Seconds() / secs
		others -= r.PromCPU.Seconds() / secs
		fmt.Fprintf(w, "- %d engines, %s terms, %s: %.0f s window; the machine (%d CPUs) was at least %.2f cores busy: adapter %.2f, Prometheus %.2f, engines %.2f, load driver %.2f, other processes %.2f; load average %.2f; textparse over the dump took %.0f µs before the run.\n",
			r.Engines, r.Terms, r.Source, secs, r.CPUs, r.MachineBusy.Seconds()/secs, r.AdapterCPU.Seconds()/secs, r.PromCPU.Seconds()/secs, r.EngineCPU.Seconds()/secs,
			r.DriverCPU.Seconds()/secs, max(0, others), r.Load1, float64(r.Reference)/float64(time.Microsecond))
	}
	for _, r := range rows {
		if r.FirstError != "" {
			fmt.Fprintf(w, "- %d engines, %s terms, %s: %d stale and %d failed answers; first: %s\n", r.Engines, r.Terms, r.Source, r.Stale, r.Failed, strings.TrimSpace(r.FirstError))
		}
	}
}

// PrintComparison writes the runs side by side as one Markdown table: per
// adapter (source), its CPU and memory, Prometheus's when it reads one,
// Prometheus's scrapes kept, freshness, the latency at the fixed rate and the
// maximum request rate on each pool size measured.
func PrintComparison(w io.Writer, rows []Result) {
	var sizes []int
	for _, r := range rows {
		for _, pr := range r.MaxRates {
			if !slices.Contains(sizes, pr.Size) {
				sizes = append(sizes, pr.Size)
			}
		}
	}
	head := "| adapter | engines | adapter CPU (cores) | adapter RSS max | Prometheus CPU (cores) | Prometheus RSS max | scrapes kept (interval) | answers 200 | oldest sample (max age) | latency p50 / p99 at %s |"
	sep := "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	rate := "–"
	if len(rows) > 0 {
		rate = fmt.Sprintf("%.0f/s", float64(rows[0].Requests)/rows[0].Window.Seconds())
	}
	head = fmt.Sprintf(head, rate)
	for _, s := range sizes {
		head += fmt.Sprintf(" max requests/s, %d pods |", s)
		sep += "---:|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	for _, r := range rows {
		secs := r.Window.Seconds()
		name := "saturation-adapter, " + r.Source
		if r.Source == sourcePrometheusAdapter {
			name = "prometheus-adapter " + prometheusAdapterVersion
		}
		promCPU, promRSS := "–", "–"
		if r.PromInterval > 0 {
			promCPU, promRSS = fmt.Sprintf("%.3f", r.PromCPU.Seconds()/secs), mib(r.PromRSS)
		}
		kept := "–"
		if all := r.Scrapes + r.ScrapeErrors; all > 0 {
			expected := float64(r.Engines) * secs / interval(r).Seconds()
			kept = fmt.Sprintf("%.0f %% (%s)", 100*r.Scrapes/expected, interval(r))
		}
		fmt.Fprintf(w, "| %s | %d | %.3f | %s | %s | %s | %s | %d of %d | %.1f s (%s) | %s / %s |",
			name, r.Engines, r.AdapterCPU.Seconds()/secs, mib(r.RSS), promCPU, promRSS, kept, r.OK+r.Stale, r.Requests,
			r.OldestAge.Seconds(), r.MaxAge, ms(r.Quantile(0.5)), ms(r.Quantile(0.99)))
		for _, s := range sizes {
			cell := " – |"
			for _, pr := range r.MaxRates {
				if pr.Size == s {
					cell = fmt.Sprintf(" %.0f |", pr.Rate)
					if pr.Failures > 0 {
						cell = fmt.Sprintf(" %.0f (%d failed) |", pr.Rate, pr.Failures)
					}
				}
			}
			fmt.Fprint(w, cell)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

// interval is the scrape interval of a run: a third of its max age.
func interval(r Result) time.Duration { return r.MaxAge / 3 }

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
