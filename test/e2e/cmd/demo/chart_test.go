package main

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// TestChart: the chart shows every panel the README promises, the target line, the
// phases, and an axis cut at 3 × the target when the score spikes, with the peak
// written beside it; the flags reject what would make an empty replay.
func TestChart(t *testing.T) {
	start := time.Unix(1e9, 0)
	var points []point
	for i := range 40 {
		sat := 0.4
		if i > 10 && i < 25 {
			sat = 12.5 // a burst far above the target
		}
		points = append(points, point{Sample: stack.Sample{T: start.Add(time.Duration(i) * 5 * time.Second), Spec: 1, Desired: 1, HPASynced: true, Ready: 1,
			Saturation: sat, Queue: 3, KV: 0.5, HPAValue: sat}, TTFTp95: 0.2, GatewayQueue: math.NaN()})
	}
	o := options{calm: 40 * time.Second, length: 150 * time.Second, speedup: 3.5}
	svg, err := renderChart(chartSpec{title: "t", metric: "llm_saturation", target: 1, clip: true, phases: o.phases()}, start, points)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"llm_saturation (the HPA's metric; dashed: target 1)",
		"KV-cache usage (mean of the pods, %; dashed: set point 80 %)",
		"queue depth", "TTFT p95", "replicas", "offered load",
		"calm: trace at real speed", "burst: trace 3.5x", `class="phase"`,
		"axis cut at 3 to keep 1 readable; peak 12.5",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if n := strings.Count(svg, `class="ref"`); n != 2 {
		t.Errorf("%d dashed reference lines, want 2 (the target, the KV set point)", n)
	}
	// The gateway series has no value: it is left out, not drawn at 0.
	if strings.Contains(svg, `data-name="gateway"`) {
		t.Error("an all-NaN series was drawn")
	}
	if _, err := renderChart(chartSpec{}, start, nil); err == nil {
		t.Error("no samples: want an error")
	}

	for _, args := range [][]string{{"--calm=3m", "--duration=2m"}, {"--speedup=0"}, {"--max-replicas=0"}, {"stray"}} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q): want an error", args)
		}
	}
	if o, err := parseFlags([]string{"--from-zero"}, &bytes.Buffer{}); err != nil || !o.fromZero {
		t.Errorf("parseFlags(--from-zero) = %+v, %v", o, err)
	}
}

// TestDesiredBeforeFirstSync: until the HPA controller has reconciled the HPA, its status
// says 0 desired replicas whatever the pool needs; the table shows "-" and the CSV NaN
// instead of a 0 that reads as "scale to zero", and a reconciled 0 stays 0.
func TestDesiredBeforeFirstSync(t *testing.T) {
	start := time.Unix(1e9, 0)
	unsynced := point{Sample: stack.Sample{T: start, Spec: 1, Ready: 1, HPAValue: math.NaN()}}
	synced := point{Sample: stack.Sample{T: start.Add(5 * time.Second), Spec: 2, Desired: 2, Ready: 1, HPASynced: true}}
	zero := point{Sample: stack.Sample{T: start.Add(10 * time.Second), HPASynced: true}}
	for _, c := range []struct {
		p         point
		cell, csv string
	}{{unsynced, "-", "NaN"}, {synced, "2", "2"}, {zero, "0", "0"}} {
		if got := desired(c.p); got != c.cell {
			t.Errorf("desired(%+v) = %q, want %q", c.p.Sample, got, c.cell)
		}
		if got := desiredCSV(c.p); got != c.csv {
			t.Errorf("desiredCSV(%+v) = %q, want %q", c.p.Sample, got, c.csv)
		}
	}
	path := t.TempDir() + "/timeline.csv"
	if err := writeCSV(path, start, []point{unsynced, synced}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(string(b), "\n"); !strings.HasPrefix(lines[1], "0.0,0.00,1,NaN,1,") || !strings.HasPrefix(lines[2], "5.0,0.00,2,2,1,") {
		t.Errorf("CSV rows:\n%s", b)
	}
}
