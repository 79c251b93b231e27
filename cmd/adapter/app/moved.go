package app

import (
	"fmt"

	"github.com/spf13/cobra"

	drainapp "github.com/saturation-adapter/saturation-adapter/cmd/drain/app"
)

// movedCommands returns the subcommands that left the adapter binary, kept for
// one release so that existing preStop hooks and scripts keep working or say
// where to go:
//
//   - drain (and drain install) still run, from the drain binary's code, with a
//     deprecation warning: pods whose preStop hook runs `/drain/adapter drain` keep
//     draining until their manifests move to the drain image;
//   - simulate and calibrate fail with an error naming the lab binary, which the
//     adapter no longer contains.
func movedCommands() []*cobra.Command {
	d := drainapp.NewCommand("adapter")
	d.Hidden = true
	d.SilenceErrors = false
	d.Deprecated = "use the drain binary and its image: `drain install DIR` in the initContainer, `DIR/drain` in the preStop hook"
	cmds := []*cobra.Command{d}
	for _, name := range []string{"simulate", "calibrate"} {
		cmds = append(cmds, &cobra.Command{
			Use:                name,
			Hidden:             true,
			DisableFlagParsing: true,
			SilenceUsage:       true,
			RunE: func(*cobra.Command, []string) error {
				return fmt.Errorf("%[1]s moved to the lab tool: run `lab %[1]s` (make build writes bin/lab)", name)
			},
		})
	}
	return cmds
}
