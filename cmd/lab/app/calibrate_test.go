package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture/emulated"
	"github.com/saturation-adapter/saturation-adapter/lab/calibrate"
	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
	emulatorserver "github.com/saturation-adapter/saturation-adapter/lab/emulator/server"
	"github.com/saturation-adapter/saturation-adapter/lab/simulate"
)

// calibrationEngine is the emulated engine TestCalibrateRecoversEmulatorCapacity
// measures: a batch of at most 8 requests and steps of tens of milliseconds, long
// enough that the real clock's timer latency (well under a millisecond) is a few
// percent of a step at most.
func calibrationEngine() emulator.Config {
	c := emulator.DefaultConfig()
	c.MaxNumSeqs = 8
	c.NumBlocks = 2000
	c.MaxModelLen = 4096
	c.StepTime = emulator.StepTimeModel{Base: 20 * time.Millisecond, PerSeq: 5 * time.Millisecond, PerPrefillToken: 50 * time.Microsecond}
	return c
}

// capacity is the most requests per second an engine of shape c completes with
// requests of prompt and output tokens, all prompts fitting one step's token
// budget and the KV cache holding a full batch (lab/emulator's step model).
//
// Derivation: at capacity the batch is full, every step schedules B =
// MaxNumSeqs requests. A request is scheduled in O steps (its prefill step, which
// samples its first token, and O-1 decode steps) and its prompt's P tokens are
// prefill tokens once. Over a time T at throughput λ the engine runs λT·O/B steps
// (each pays Base), λT·O request-steps (each pays PerSeq) and λT·P prefill tokens
// (each pays PerPrefillToken), and they fill T:
//
//	T = λT (O·Base/B + O·PerSeq + P·PerPrefillToken),  so  λ = 1 / (O·Base/B + O·PerSeq + P·PerPrefillToken).
//
// Below it the fluid model gives a step time τ = Base / (1 − λ(O·PerSeq +
// P·PerPrefillToken)) and a batch b = λ·O·τ, which reaches B exactly at this λ.
func capacity(c emulator.Config, prompt, output int) float64 {
	o, p := float64(output), float64(prompt)
	perRequest := o*c.StepTime.Base.Seconds()/float64(c.MaxNumSeqs) + o*c.StepTime.PerSeq.Seconds() + p*c.StepTime.PerPrefillToken.Seconds()
	return 1 / perRequest
}

// TestCalibrateRecoversEmulatorCapacity runs `lab calibrate` against the
// emulator (lab/emulator/server on loopback, real clock) end to end, as a user
// runs it against a live engine: streaming completions, the engine's /metrics
// read while it runs, a saturation point with a failing step above it, a fitted
// profile that loads, and recommended set points. Its numbers are logged, not
// held to thresholds: the emulator runs in real time, so on a shared machine
// its steps stretch with the load and what it serves moves from run to run.
// TestCalibrateRecoversDefaultEngine (lab/calibrate, virtual time) holds the
// analysis and the fit to the engine's known parameters, within 10 %.
func TestCalibrateRecoversEmulatorCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("a 75 s real-time load test")
	}
	engine := calibrationEngine()
	_, url := emulated.Serve(t, emulatorserver.Config{
		Engine: engine, Engines: 1, ModelName: "calibration-model", MetricNames: emulator.NamesV1,
		CharsPerToken: 4, Fault: emulatorserver.FaultNone, ShutdownTimeout: time.Second, Clock: clock.RealClock{},
	})

	const prompt, output = 200, 20
	want := capacity(engine, prompt, output)
	dir := t.TempDir()
	jsonPath, profilePath := filepath.Join(dir, "calibration.json"), filepath.Join(dir, "profile.yaml")
	// Steps of 0.5 requests/s (8 % of the capacity) from 64 % to 128 % of it.
	table, progress, err := runRoot("calibrate", "--url", url, "--rates", "4,4.5,5,5.5,6,6.5,7,7.5,8", "--step-length", "5s",
		"--warmup-requests", "5", "--prompt-tokens", "200", "--output-tokens", "20", "--ttft-slo", "1s",
		"--metrics-interval", "250ms", "--progress-interval", "2s", "--json", jsonPath, "--profile-out", profilePath)
	if err != nil {
		t.Fatalf("calibrate: %v\n%s", err, progress)
	}
	t.Logf("configured capacity %.3g req/s\n%s", want, table)
	if !strings.Contains(progress, "step 1/9: 4 req/s for 5s") || !strings.Contains(progress, "warm-up and context probe done") {
		t.Errorf("progress does not show the steps:\n%s", progress)
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep calibrate.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Saturation == nil || !rep.Saturation.Reached {
		t.Fatalf("saturation %+v, want a saturation point with a failing step above it", rep.Saturation)
	}
	t.Logf("saturation point %.3g req/s, measured capacity %.3g req/s (configured %.3g)", rep.Saturation.RateRequestsPerSecond, rep.CapacityRequestsPerSecond, want)
	if rep.CapacityRequestsPerSecond <= 0 || rep.CapacityRequestsPerSecond > 1.1*want {
		t.Errorf("measured capacity %.3g req/s: want above 0 and at most 10 %% over the configured %.3g (an engine cannot serve more than it is built for)", rep.CapacityRequestsPerSecond, want)
	}

	cfg, err := simulate.LoadProfile(profilePath)
	if err != nil {
		t.Fatalf("the written profile does not load: %v", err)
	}
	if rep.Fit.KVCacheFrom != "cache_config_info" || cfg.NumBlocks != engine.NumBlocks || cfg.BlockSize != engine.BlockSize {
		t.Errorf("KV cache %d blocks of %d from %q; want the engine's %d of %d from vllm:cache_config_info", cfg.NumBlocks, cfg.BlockSize, rep.Fit.KVCacheFrom, engine.NumBlocks, engine.BlockSize)
	}
	if cfg.MaxNumSeqs != engine.MaxNumSeqs || cfg.MaxModelLen != engine.MaxModelLen {
		t.Errorf("profile maxNumSeqs %d, maxModelLen %d; want the engine's %d and %d", cfg.MaxNumSeqs, cfg.MaxModelLen, engine.MaxNumSeqs, engine.MaxModelLen)
	}
	t.Logf("the fitted profile's capacity: %.3g req/s", capacity(cfg, prompt, output))
	// The context probe ran after the warm-up and measured at least one round
	// (its long prompts halved if the KV cache preempted them).
	if cp := rep.Fit.ContextProbe; cp == nil || cp.Batch != 8 || cp.PerContextTokenSeconds == nil || !strings.Contains(table, "context probe: 8 requests at once") {
		t.Errorf("context probe %+v: want a round measured and shown in the table", cp)
	} else {
		t.Logf("context probe: %+v, %.3g ns per token (the engine's: 0)", cp.Groups, 1e9**cp.PerContextTokenSeconds)
	}
	if rep.ProfileCheck == nil || len(rep.ProfileCheck.Steps) == 0 {
		t.Errorf("profile check %+v, want the steps replayed on the fitted profile", rep.ProfileCheck)
	}

	sp := rep.Recommended
	if sp == nil || !sp.KVMeasured || sp.SetPoints.KVCacheUsage > rep.Saturation.KVCacheUsage.Mean || sp.SetPoints.QueueDepth < 1 {
		t.Fatalf("recommended %+v, want a KV set point at most the KV usage at saturation (%v) and a queue set point >= 1", sp, rep.Saturation.KVCacheUsage)
	}
	if !strings.Contains(table, "recommended set points") || !strings.Contains(table, sp.Flags) {
		t.Errorf("table does not give the recommended flags %q:\n%s", sp.Flags, table)
	}
}

// TestCalibrateFlagErrors: bad flags are reported together, each with its value.
func TestCalibrateFlagErrors(t *testing.T) {
	_, _, err := runRoot("calibrate", "--rates", "4,2", "--steps", "3", "--ttft-quantile", "1.5", "--arrivals", "bursty",
		"--headroom", "0", "--max-requests", "5", "--warmup-requests", "10", "--context-probe", "257")
	for _, want := range []string{"--url is required", "--rates excludes --steps", "rates must increase: 2 follows 4",
		"TTFT quantile must be in (0, 1], got 1.5", `arrivals "bursty"`, "headroom must be in (0, 1], got 0",
		"max requests 5 leaves none for the steps after 1038 warm-up and context probe requests", "context probe must be 0 (off) to 256 requests at once, got 257"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want it to contain %q", err, want)
		}
	}
	_, _, err = runRoot("calibrate", "--url", "http://127.0.0.1:1", "--trace", "testdata/none.csv")
	if err == nil || !strings.Contains(err.Error(), "--trace") || !strings.Contains(err.Error(), "none.csv") {
		t.Errorf("error = %v, want the missing trace named", err)
	}
	_, _, err = runRoot("calibrate", "--url", "ftp://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "want an http or https URL") {
		t.Errorf("error = %v, want the URL's scheme rejected", err)
	}
	// Outputs are checked before the load test, which would otherwise run for
	// minutes and then overwrite the trace or find no directory to write to.
	tr := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(tr, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = runRoot("calibrate", "--url", "http://127.0.0.1:1", "--trace", tr, "--json", tr, "--profile-out", filepath.Join(t.TempDir(), "no", "such", "profile.yaml"))
	for _, want := range []string{"--json=" + tr + ": is an input of this run", "profile.yaml: its directory does not exist"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error = %v, want it to contain %q", err, want)
		}
	}
	same := filepath.Join(t.TempDir(), "out")
	if _, _, err = runRoot("calibrate", "--url", "http://127.0.0.1:1", "--json", same, "--profile-out", same); err == nil || !strings.Contains(err.Error(), "--json writes the same file") {
		t.Errorf("error = %v, want --json and --profile-out on one file refused", err)
	}
}

// TestCalibrationWritesOnlyACheckedProfile: --profile-out is written only when
// the replay of the steps on the fitted profile reproduced the engine; else
// the command fails saying why, and the table and the JSON report, which keep
// the profile, are still written.
func TestCalibrationWritesOnlyACheckedProfile(t *testing.T) {
	sat := 16.0
	for _, tt := range []struct {
		name  string
		check *calibrate.ProfileCheck
		want  string // "" for a written profile
	}{
		{"reproduces", &calibrate.ProfileCheck{SaturationRateRequestsPerSecond: &sat, Agrees: true}, ""},
		{"does not", &calibrate.ProfileCheck{Disagreement: "the profile saturates at 12 requests/s, the engine at 16 (more than 10 % apart)"},
			"not written: the fitted profile does not reproduce the engine: the profile saturates at 12 requests/s, the engine at 16"},
		{"unchecked", nil, "not written: the fitted profile could not be checked"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			jsonPath, profilePath := filepath.Join(dir, "calibration.json"), filepath.Join(dir, "profile.yaml")
			rep := &calibrate.Report{Profile: simulate.ProfileOf(emulator.DefaultConfig()), ProfileCheck: tt.check}
			var out strings.Builder
			err := writeCalibration(&out, rep, jsonPath, profilePath)
			if _, jerr := os.Stat(jsonPath); jerr != nil || !strings.Contains(out.String(), "engine profile:") {
				t.Errorf("JSON report %v, table %q; want both written", jerr, out.String())
			}
			_, perr := os.Stat(profilePath)
			if tt.want == "" {
				if err != nil || perr != nil {
					t.Fatalf("write = %v, profile %v; want the profile written", err, perr)
				}
				if _, err := simulate.LoadProfile(profilePath); err != nil {
					t.Errorf("the written profile does not load: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "--profile-out="+profilePath) || perr == nil {
				t.Errorf("write = %v, profile file %v; want an error containing %q and no profile", err, perr, tt.want)
			}
		})
	}
}
