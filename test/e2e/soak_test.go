package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/soak"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// TestSoak is `make soak` (an hour, 1,000 engines, 100 HPAs; see package soak) made short:
// two minutes over 100 stand-in engines and 10 HPAs, with every kind of fault (engines
// restarting, hanging, serving garbage, NaN, huge and slow bodies; Prometheus down; the
// policy file reloaded, once with a bad file; kube-apiserver restarted). No value either
// adapter serves (direct, and a second one reading two pools through Prometheus) may be
// outside what the stand-ins' known values allow, and at rest after the faults each
// adapter's memory and goroutines are back near their warm level.
func TestSoak(t *testing.T) {
	t.Parallel()
	tools, bin, err := stack.DirsFromEnv()
	if err != nil {
		t.Skip(err)
	}
	c := soak.Short()
	if c.Prometheus, err = stack.PrometheusBinary(); err != nil {
		t.Fatal(err)
	}
	c.ToolsDir, c.BinDir, c.Dir = tools, bin, t.TempDir()
	c.Logf = func(f string, args ...any) { t.Logf(time.Now().Format("15:04:05.000 ")+f, args...) }
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rep, err := soak.Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.String())
	for _, p := range rep.Problems() {
		t.Error(p)
	}
}
