// Command soak runs the adapter for a long time under faults (package soak): `make soak`
// runs it for an hour over 1,000 stand-in engines and 100 HPAs, prints the report and
// exits 1 when a value served was wrong, memory was not bounded and flat, or goroutines
// grew.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/soak"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

func main() {
	c := soak.Hour()
	flag.IntVar(&c.Engines, "engines", c.Engines, "stand-in engines (10 per HPA)")
	flag.IntVar(&c.PromPools, "prometheus-pools", c.PromPools, "pools also read through Prometheus by a second adapter")
	flag.DurationVar(&c.Duration, "duration", c.Duration, "length of the run after the warm-up")
	flag.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the fault schedule")
	dir := flag.String("dir", "", "working directory (logs, certificates, data); a temporary one, removed, when empty")
	flag.Parse()
	if err := run(c, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(c soak.Config, dir string) error {
	tools, bin, err := stack.DirsFromEnv()
	if err != nil {
		return err
	}
	if c.Prometheus, err = stack.PrometheusBinary(); err != nil {
		return err
	}
	c.ToolsDir, c.BinDir = tools, bin
	if dir == "" {
		if dir, err = os.MkdirTemp("", "soak-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	c.Dir = dir
	c.Logf = func(f string, args ...any) { fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+f+"\n", args...) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := soak.Run(ctx, c)
	if err != nil {
		return err
	}
	fmt.Print(rep.String())
	if p := rep.Problems(); len(p) > 0 {
		return fmt.Errorf("%d problems", len(p))
	}
	return nil
}
