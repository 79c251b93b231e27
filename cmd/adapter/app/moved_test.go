package app

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"
)

// The subcommands that left the adapter binary: drain still drains (with a
// deprecation warning) so that existing preStop hooks keep working; simulate
// and calibrate say where they went.
func TestMovedCommands(t *testing.T) {
	idle := &testfixture.Scripted{Script: []testfixture.Response{{Status: 200, Body: testfixture.Sample(t, "vllm_v1-0.10-nvcr25.09_single-engine.prom")}}}
	srv := httptest.NewServer(idle)
	defer srv.Close()
	out, errOut, err := runRoot("drain", "--url="+srv.URL+"/metrics", "--interval=100ms", "--min-wait=0s")
	if err != nil || !strings.Contains(out, "drained: nothing running or waiting") {
		t.Errorf("adapter drain: %v\nstdout %q", err, out)
	}
	if !strings.Contains(out+errOut, `Command "drain" is deprecated, use the drain binary`) {
		t.Errorf("adapter drain printed no deprecation warning: stdout %q, stderr %q", out, errOut)
	}
	for _, name := range []string{"simulate", "calibrate"} {
		_, _, err := runRoot(name, "--trace", "x.csv")
		if err == nil || !strings.Contains(err.Error(), "run `lab "+name+"`") {
			t.Errorf("adapter %s: %v, want an error naming lab %s", name, err, name)
		}
	}
}
