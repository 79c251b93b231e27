package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/flowgate"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// TestMain lets the node agent run this test binary as the gateway's pod (--from-zero),
// as main does for the demo binary.
func TestMain(m *testing.M) {
	if gw, ok, err := flowgate.PodArgs(os.Args[1:]); ok || err != nil {
		os.Exit(servePod(gw, err))
	}
	os.Exit(m.Run())
}

// TestDemo runs `make demo` as a user does (the same run function, its output captured),
// shortened by flags: a control plane, the burst, the scale-down, the summary and the
// chart; and the --from-zero story.
func TestDemo(t *testing.T) {
	if _, _, err := stack.DirsFromEnv(); err != nil {
		t.Fatal(err)
	}
	short := []string{"--duration=100s", "--calm=30s", "--max-replicas=4", "--interval=5s"}
	t.Run("burst", func(t *testing.T) {
		t.Parallel() // each on its own control plane
		out := t.TempDir()
		var buf bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		err := run(ctx, append(short, "--out="+out), &buf)
		t.Log(buf.String())
		if err != nil {
			t.Fatal(err)
		}
		got := buf.String()
		for _, want := range []string{
			"HPA vllm: llm_saturation, type Value, value 1, 1–4 replicas",
			"README (Your first HPA)",
			"scale up    30 s window, at most +2 pods per 60 s   0 s window, at most +4 pods per 15 s",
			"scale down  300 s window, at most -1 pod per 120 s  60 s window, at most -1 pod per 20 s",
			"the documented periods are sized for vLLM's model load (minutes)",
			" calm ", " burst ", "-- replay finished; watching the scale-down --",
			"summary", `"2m/1" is 0.002 against a target of 1`,
			"stopped; nothing left running",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("the demo's output lacks %q", want)
			}
		}
		if !strings.Contains(got, "first scale-up after") || strings.Contains(got, "peak 1 desired") {
			t.Errorf("the demo did not scale up:\n%s", got)
		}
		checkOutputs(t, out, "llm_saturation")
	})
	t.Run("from zero", func(t *testing.T) {
		t.Parallel() // each on its own control plane
		out := t.TempDir()
		var buf bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		err := run(ctx, append(short, "--from-zero", "--out="+out), &buf)
		t.Log(buf.String())
		if err != nil {
			t.Fatal(err)
		}
		got := buf.String()
		for _, want := range []string{
			"docs/scale-to-zero.md", "scale up    0 s window, at most +4 pods per 60 s    0 s window, at most +4 pods per 15 s",
			"vllm is at 0 replicas (ScaledToZero=True)",
			"-- load over; watching the pool go back to zero --",
			"summary (scale from zero)", "0 replicas",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("the demo's output lacks %q", want)
			}
		}
		if strings.Contains(got, "first Ready pod at never") || strings.Contains(got, "drained at never") {
			t.Errorf("the pool never woke or the gateway never drained:\n%s", got)
		}
		// Every request the gateway held while the pool was at zero was served.
		if l := summaryLine(got); !strings.Contains(l, " errors=0 ") {
			t.Errorf("held requests failed: %q", l)
		}
		checkOutputs(t, out, zeroPolicy)
	})
}

// checkOutputs checks the chart and the CSV the demo wrote to out.
func checkOutputs(t *testing.T, out, metric string) {
	t.Helper()
	svg, err := os.ReadFile(filepath.Join(out, "timeline.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{metric, "KV-cache usage", "TTFT p95", "calm: trace at real speed", "burst: trace 3.5x", `data-name="ready"`} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("timeline.svg lacks %q", want)
		}
	}
	csv, err := os.ReadFile(filepath.Join(out, "timeline.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(csv), "\n"); lines < 10 {
		t.Errorf("timeline.csv has %d lines, want a row every 5 s", lines)
	}
}

func summaryLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "requests:") {
			return l
		}
	}
	return ""
}
