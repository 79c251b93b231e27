//go:build linux

package signals

import (
	"bytes"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// fleetBodies returns n bodies made from the real dump, as n pods of
// deployments Deployments serve them: each deployment its own model name,
// each pod its own values (every sample scaled by a factor of its own, so
// histograms stay cumulative).
func fleetBodies(dump []byte, n, deployments int) [][]byte {
	const model = `model_name="Qwen/Qwen3-4B-Instruct-2507-FP8"`
	bodies := make([][]byte, n)
	for pod := range n {
		var out bytes.Buffer
		factor := 1 + float64(pod%97)/100
		for line := range bytes.Lines(dump) {
			line = bytes.ReplaceAll(line, []byte(model), fmt.Appendf(nil, `model_name="fleet/model-%02d"`, pod%deployments))
			i := bytes.LastIndexByte(bytes.TrimRight(line, "\n"), ' ')
			v, err := strconv.ParseFloat(string(bytes.TrimSpace(line[i+1:])), 64)
			if line[0] == '#' || i < 0 || err != nil {
				out.Write(line)
				continue
			}
			out.Write(line[:i+1])
			out.WriteString(strconv.FormatFloat(v*factor, 'g', -1, 64))
			out.WriteByte('\n')
		}
		bodies[pod] = out.Bytes()
	}
	return bodies
}

// BenchmarkExtract3000Engines is issue 19's test of the extraction shortcuts
// at fleet scale: 3,000 engines (pods of 30 deployments, each pod its own
// values) read three ways, one after the other so that the machine's load
// weighs on all alike (a pass over the 3,000 bodies per path, the first path
// in turn), in CPU time (the process's user and system time: the VM is
// shared, and wall time counts the others' turns): through the series cache (cached-ns;
// the steady state: every deployment's series learned), with the cache off
// (nocache-ns: every line read goes to textparse, the prefilter kept) and by
// the library path (textparse-ns: the whole body through textparse, the same
// fold). x-cache = nocache / cached and x-textparse = textparse / cached; the
// cache is on only where x-cache is at least 1.5 (issue 19): with every
// family (a latency term), not in the server's default extraction, both
// measured here with the cache on.
func BenchmarkExtract3000Engines(b *testing.B) {
	bodies := fleetBodies(readTestdata(b, realV1Dump), 3000, 30)
	for _, c := range []struct {
		name string
		opts ExtractOptions
	}{{"default", ExtractOptions{}}, {"every", ExtractOptions{Histograms: true}}} {
		b.Run(c.name, func(b *testing.B) {
			cached, nocache, library := NewExtractorWith(c.opts), NewExtractorWith(c.opts), NewExtractorWith(c.opts)
			// On in both configurations, to measure it where it is off too.
			cached.series.off, nocache.series.off = false, true
			for _, body := range bodies { // learn
				if _, err := cached.Extract(body); err != nil {
					b.Fatal(err)
				}
			}
			reference := func(body []byte) (Reading, error) { return library.extractReference(body, "") }
			paths := []func([]byte) (Reading, error){cached.Extract, nocache.Extract, reference}
			var spent [3]time.Duration
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				// A pass over every body per path, the first path in turn: a
				// path's garbage is collected mostly in its own pass (the
				// reference path allocates a label set per series).
				for k := range paths {
					p := (i + k) % len(paths)
					t0 := cpuTime(b)
					for _, body := range bodies {
						if _, err := paths[p](body); err != nil {
							b.Fatal(err)
						}
					}
					spent[p] += cpuTime(b) - t0
				}
			}
			tCached, tNocache, tLibrary := spent[0], spent[1], spent[2]
			n := float64(b.N * len(bodies))
			b.ReportMetric(float64(tCached.Nanoseconds())/n, "cached-ns")
			b.ReportMetric(float64(tNocache.Nanoseconds())/n, "nocache-ns")
			b.ReportMetric(float64(tLibrary.Nanoseconds())/n, "textparse-ns")
			b.ReportMetric(tNocache.Seconds()/tCached.Seconds(), "x-cache")
			b.ReportMetric(tLibrary.Seconds()/tCached.Seconds(), "x-textparse")
		})
	}
}

// cpuTime returns the user and system CPU time of this process so far.
func cpuTime(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
