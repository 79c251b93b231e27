package simulate

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current output")

// TestRunGolden pins the output of one seeded run: five minutes of the Azure
// conversation trace at 6 times its rate, a 60 s cold start, every built-in
// policy, seed 7. TestRunIsDeterministic shows that a seed repeats within one
// build; this shows it repeats across builds, so a change to the fleet, the
// engine, the HPA model or the signals that moves any number shows up here (and
// the golden file is regenerated with -update after checking the change is
// meant).
func TestRunGolden(t *testing.T) {
	o := DefaultWorkloadOptions()
	o.Start, o.Length, o.RateScale, o.Seed = 20*time.Minute, 5*time.Minute, 6, 7
	w := azureWindow(t, o)
	cfg := DefaultConfig()
	cfg.ColdStart, cfg.Seed = 60*time.Second, 7
	rep := mustRun(t, cfg, w, builtins(t))
	var got bytes.Buffer
	if err := rep.WriteTable(&got); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "golden-conv-20m-5m-x6-seed7.txt")
	if *update {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got.String()); diff != "" {
		t.Errorf("the seeded run's table changed (-golden +now); if meant, run go test ./lab/simulate -run TestRunGolden -update:\n%s", diff)
	}
}
