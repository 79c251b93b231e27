// Package app is the drain binary's command: `drain` waits until the local
// engine has nothing running or waiting (pkg/drain), `drain install DIR` copies
// the binary into a volume shared with the engine container.
package app

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/component-base/version"
	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/pkg/drain"
)

// BinaryName is the drain binary's name, and the file name `drain install DIR`
// writes in DIR.
const BinaryName = "drain"

// NewCommand returns the drain command: `drain [flags]` drains, `drain install
// DIR` copies the running binary to DIR/installName (BinaryName for the drain
// binary).
func NewCommand(installName string) *cobra.Command {
	o := drain.NewOptions()
	var printVersion bool
	cmd := &cobra.Command{
		Use:   "drain [flags]",
		Short: "Wait until the local LLM engine has nothing running or waiting (for a container's preStop hook)",
		Long: `drain polls an engine's /metrics (vLLM, SGLang, Triton, TGI, llama.cpp) until it reports
no running and no waiting requests in two readings at least 1s apart, and at least --min-wait
after it started, then exits 0. It exits 1 at --timeout, naming what is still running or
waiting, or why the engine could not be read. An engine that refuses connections twice in
a row, 1s apart, is not serving anything and counts as drained.

Use it as the engine container's preStop hook; keep --timeout below the pod's
terminationGracePeriodSeconds, which also covers the engine's shutdown after the hook.
"drain install DIR" copies this binary to DIR/drain, for an initContainer that puts it
into an emptyDir shared with the engine container (the drain image has no shell or cp).`,
		Example: `  # In the engine container's preStop hook, vLLM on its default port:
  /drain/drain --timeout=4m30s

  # In an initContainer of the drain image, with an emptyDir mounted at /drain:
  drain install /drain`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printVersion {
				v := version.Get()
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s (commit %s, built %s, %s %s)\n", BinaryName, v.GitVersion, v.GitCommit, v.BuildDate, v.GoVersion, v.Platform)
				return err
			}
			if errs := o.Validate(); len(errs) > 0 {
				return utilerrors.NewAggregate(errs)
			}
			client := &http.Client{
				// Never follow a redirect away from the local engine.
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			}
			return drain.Drain(cmd.Context(), o, client, clock.RealClock{}, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.URL, "url", o.URL, "The engine's metrics URL.")
	fs.DurationVar(&o.Interval, "interval", o.Interval, "Time between two readings.")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout,
		"Give up (exit 1) after this long. Keep it below the pod's terminationGracePeriodSeconds minus the engine's shutdown time: the kubelet kills the container at the end of the grace period whatever the hook is doing.")
	fs.DurationVar(&o.MinWait, "min-wait", o.MinWait,
		"Report drained no sooner than this after the start, so that the pod's removal from Service and gateway endpoints reaches every client first.")
	fs.BoolVar(&printVersion, "version", false, "Print the version and exit.")
	cmd.AddCommand(newInstallCommand(installName))
	return cmd
}

func newInstallCommand(name string) *cobra.Command {
	return &cobra.Command{
		Use:   "install DIR",
		Short: "Copy this binary to DIR/" + name + " (mode 0755), for an initContainer filling an emptyDir",
		Long: strings.ReplaceAll(`install copies the running binary to DIR/NAME with mode 0755, atomically
(a temporary file renamed into place). DIR must exist: mount an emptyDir there in an
initContainer that runs the drain image, and the same emptyDir in the engine container,
whose preStop hook then runs DIR/NAME.`, "NAME", name),
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, n, err := drain.InstallBinary(args[0], name)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "installed %s (%d bytes); use it as: %s\n", path, n, path)
			return nil
		},
	}
}
