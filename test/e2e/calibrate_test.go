package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saturation-adapter/saturation-adapter/lab/calibrate"
	"github.com/saturation-adapter/saturation-adapter/lab/simulate"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/controlplane"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// TestCalibrateInferenceSim runs `lab calibrate` (the built binary, as a user
// runs it) against llm-d-inference-sim v0.10.2, a third-party vLLM simulator with
// its own HTTP server, streaming and metrics: batches of 4, 100 ms to the first
// token, 20 ms per token, so about 4 / (0.1 s + 19 × 0.02 s) ≈ 8 requests/s. The
// run must complete with every request answered, every step judged on the
// simulator's gauges, a saturation point below the top rate, the KV cache's shape
// read from its vllm:cache_config_info, and a profile simulate can load, written
// to --profile-out only when its replay reproduces the saturation point. The
// simulator's fixed latencies are not lab/emulator's step model (there a
// prefill stalls the batch's decodes, as in vLLM), so its profile saturates a
// step lower, and the command then fails saying so, without writing it.
func TestCalibrateInferenceSim(t *testing.T) {
	tools, bin, err := stack.DirsFromEnv()
	if err != nil {
		t.Skip(err)
	}
	sim := filepath.Join(tools, "llm-d-inference-sim")
	if _, err := os.Stat(sim); err != nil {
		t.Fatalf("llm-d-inference-sim not built (make e2e-tools): %v", err)
	}
	dir := t.TempDir()
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// The simulator binds every interface; only its loopback address is used.
	proc, err := controlplane.StartProcess(dir, "llm-d-inference-sim", sim, append([]string{
		"--port=" + strconv.Itoa(port), "--model=" + stack.Model, "--force-dummy-tokenizer", "--mode=random", "--seed=1",
	}, simArgs...), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proc.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("llm-d-inference-sim log:\n%s", proc.Tail(4000))
		}
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return httpGet(ctx, url+"/v1/models") == nil, nil
	}); err != nil {
		t.Fatalf("llm-d-inference-sim did not answer: %v", err)
	}

	jsonPath, profilePath := filepath.Join(dir, "calibration.json"), filepath.Join(dir, "profile.yaml")
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "lab"), "calibrate", "--url", url,
		"--rates", "2,4,6,8,10,12,14", "--step-length", "4s", "--warmup-requests", "5",
		"--prompt-tokens", "100", "--output-tokens", "20", "--ttft-slo", "1s", "--metrics-interval", "250ms",
		"--progress-interval", "0", "--json", jsonPath, "--profile-out", profilePath)
	out, runErr := cmd.CombinedOutput()
	t.Logf("lab calibrate:\n%s", out)
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep calibrate.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Model != stack.Model || len(rep.Steps) < 2 {
		t.Fatalf("model %q, %d steps; want %q (from /v1/models) and at least 2 steps", rep.Model, len(rep.Steps), stack.Model)
	}
	for _, s := range rep.Steps {
		if s.Errors != 0 || s.Sent == 0 || s.QueueDepth == nil || s.Running == nil || s.KVCacheUsage == nil || s.TTFTSeconds.P50 == nil {
			t.Errorf("step %d: %d of %d requests failed (%s), queue %v, running %v, KV %v, TTFT p50 %v; want every request answered and every gauge read",
				s.Step, s.Errors, s.Sent, s.FirstError, s.QueueDepth, s.Running, s.KVCacheUsage, s.TTFTSeconds.P50)
		}
	}
	if rep.Saturation == nil || !rep.Saturation.Reached || rep.Recommended == nil {
		t.Errorf("saturation %+v, recommended %+v; want a saturation point below 14 requests/s and set points", rep.Saturation, rep.Recommended)
	}
	if rep.Fit.KVCacheFrom != "cache_config_info" || rep.Profile.MaxNumSeqs != 4 || rep.Fit.MaxNumSeqsFrom != "observed" {
		t.Errorf("fit %+v, maxNumSeqs %d; want the KV cache from vllm:cache_config_info and the batch of 4 observed", rep.Fit, rep.Profile.MaxNumSeqs)
	}
	// The report's profile loads whether or not it was written.
	b, err := simulate.MarshalProfile(rep.Profile)
	if err == nil {
		_, err = simulate.ParseProfile(b)
	}
	if err != nil {
		t.Errorf("the report's profile does not load: %v", err)
	}
	_, statErr := os.Stat(profilePath)
	switch c := rep.ProfileCheck; {
	case c == nil:
		t.Errorf("no profile check in the report")
	case c.Agrees:
		if runErr != nil || statErr != nil {
			t.Errorf("the profile reproduces the engine, but lab calibrate = %v and the profile file %v", runErr, statErr)
		} else if _, err := simulate.LoadProfile(profilePath); err != nil {
			t.Errorf("the written profile does not load: %v", err)
		}
	default:
		if runErr == nil || !strings.Contains(string(out), "not written: the fitted profile does not reproduce the engine: "+c.Disagreement) || statErr == nil {
			t.Errorf("the profile does not reproduce the engine (%s), but lab calibrate = %v and the profile file %v; want a failure naming why and no file", c.Disagreement, runErr, statErr)
		}
	}
	if !strings.Contains(string(out), "saturation point:") {
		t.Errorf("no saturation line in the output")
	}
}
