package app

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// A scheduled minimum is open or closed at --at (default now): for a pool without pods (a
// gateway-only pool at zero replicas), explain evaluated it at the zero
// time.Time, 0001-01-01 00:00 UTC, a Monday, where a minimum open on Sundays
// 23:30 to Mondays 00:30 was open; and for files without timestamps at a
// made-up 2026-01-01.
func TestExplainMinimumsAtTheGivenTime(t *testing.T) {
	dir := t.TempDir()
	cfg := writePolicies(t, dir, `- name: qwen-demand
  kind: demand
  terms: [{kind: queueDepth, setPoint: 5}, {kind: kvCacheUsage, setPoint: 0.8}]
  gateway: {selector: app=qwen3-32b-epp, match: {inference_pool: qwen3-32b-pool}}
  minimums: [{schedule: "30 23 * * 0", duration: 1h, demand: 500}]
`)
	epp := filepath.Join("..", "..", "..", "testdata", "hazards", "NC-04-epp.prom")
	pod := filepath.Join(samples, "vllm_v1-0.10-nvcr25.09_single-engine.prom")
	for _, c := range []struct {
		name string
		args []string
		open bool
	}{
		{"no pods, Monday 00:10 UTC", []string{"--at=2026-12-07T00:10:00Z"}, true},
		{"no pods, Thursday", []string{"--at=2026-12-03T12:00:00Z"}, false},
		{"no pods, Monday 01:00 in Berlin is 00:00 UTC", []string{"--at=2026-12-07T01:00:00+01:00"}, true},
		{"a pod file without timestamps, Thursday", []string{"--at=2026-12-03T12:00:00Z", pod}, false},
		{"a pod file without timestamps, Sunday 23:45 UTC", []string{"--at=2026-12-06T23:45:00Z", pod}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := runExplain(t, append([]string{"--config=" + cfg, "--policy=qwen-demand", "--gateway=" + epp}, c.args...)...)
			var ex Explanation
			if err := json.Unmarshal(out, &ex); err != nil {
				t.Fatalf("explain: %s", out)
			}
			if open := ex.Pool.Ahead != nil && ex.Pool.Ahead.Scheduled != nil; open != c.open {
				t.Errorf("scheduled minimum open: %v, want %v; pool %+v", open, c.open, ex.Pool)
			}
		})
	}
	for at, want := range map[string]string{
		"yesterday": `--at="yesterday": not an RFC 3339 time (2026-12-07T09:00:00Z, or with an offset +01:00) nor now`,
		// The zero time.Time (year 1) read as the clock.
		"0001-01-01T00:00:00Z":      `--at="0001-01-01T00:00:00Z": before 1970-01-01T00:00:00Z; give a time the pods could have been scraped at`,
		"1969-12-31T23:59:59+00:00": `--at="1969-12-31T23:59:59+00:00": before 1970-01-01T00:00:00Z; give a time the pods could have been scraped at`,
	} {
		cmd := newExplainCommand()
		cmd.SetArgs([]string{"--at=" + at, pod})
		if err := cmd.Execute(); err == nil || err.Error() != want {
			t.Errorf("--at=%s: error %v, want %s", at, err, want)
		}
	}
}
