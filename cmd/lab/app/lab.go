// Package app is the lab tool's commands: simulate (policies compared on a
// trace, lab/simulate), calibrate (a stepped load test against one engine,
// lab/calibrate) and emulator (emulated vLLM engines over HTTP, lab/emulator).
package app

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/component-base/version"
)

// Name is the lab tool's name in its --version output.
const Name = "saturation-lab"

// NewCommand returns the lab command and its subcommands; every one stops
// when ctx is done (the first SIGINT or SIGTERM).
func NewCommand(ctx context.Context) *cobra.Command {
	var printVersion bool
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Compare autoscalers offline, calibrate an engine, emulate vLLM",
		Long: `lab is saturation-adapter's lab tool. It never runs in a cluster:

  lab simulate   replay a request trace against a simulated fleet under several
                 autoscalers (the HPA on the adapter's metrics, KEDA-style queue
                 triggers, GPU utilization, an oracle) and compare them
  lab scoreboard compare autoscaler families fairly: frontiers over many seeds,
                 tuned on one slice of a trace and scored on another
  lab calibrate  run a stepped load test against one live engine, find its
                 saturation point and recommend the adapter's set points
  lab emulator   serve emulated vLLM engines (completions, /metrics, faults) for
                 tests and demos`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printVersion {
				v := version.Get()
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s (commit %s, built %s, %s %s)\n", Name, v.GitVersion, v.GitCommit, v.BuildDate, v.GoVersion, v.Platform)
				return err
			}
			return cmd.Help()
		},
	}
	cmd.Flags().BoolVar(&printVersion, "version", false, "Print the version and exit.")
	cmd.AddCommand(NewSimulateCommand(ctx), NewScoreboardCommand(ctx), NewCalibrateCommand(ctx), NewEmulatorCommand(ctx))
	return cmd
}

// untilDone runs f and returns its error, or, as soon as ctx is done, an
// error saying the run was interrupted. The replays of simulate and scoreboard
// are CPU-bound loops without a cancellation point; returning lets the process
// exit on the first signal (main exits on the error) rather than only on the
// second, leaving them behind (the reports are written when the replays are
// done, so an interrupted run leaves none).
func untilDone(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("interrupted before the run finished: %w", context.Cause(ctx))
	}
}
