// Package help prints a command's help the way the adapter and the lab tool
// share: what it does, how to call it, examples, then its flags in named groups
// (k8s.io/component-base's sections), so that a long flag list reads by topic.
package help

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/term"
)

// Set adds every group of fss to cmd's flags and makes cmd's help and usage
// print cmd.Long (or Short), the usage line, cmd.Example and the groups in
// fss's order, wrapped to the terminal's width.
func Set(cmd *cobra.Command, fss cliflag.NamedFlagSets) {
	for _, name := range fss.Order {
		cmd.Flags().AddFlagSet(fss.FlagSets[name])
	}
	cmd.SetUsageFunc(func(c *cobra.Command) error {
		write(c.OutOrStderr(), c, fss, false)
		return nil
	})
	cmd.SetHelpFunc(func(c *cobra.Command, _ []string) {
		write(c.OutOrStdout(), c, fss, true)
	})
}

func write(w io.Writer, c *cobra.Command, fss cliflag.NamedFlagSets, long bool) {
	cols, _, _ := term.TerminalSize(w)
	if long {
		text := c.Long
		if text == "" {
			text = c.Short
		}
		fmt.Fprintf(w, "%s\n\n", text)
	}
	fmt.Fprintf(w, "Usage:\n  %s\n", c.UseLine())
	if c.HasAvailableSubCommands() {
		fmt.Fprintf(w, "\nCommands:\n")
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(w, "  %-12s %s\n", sub.Name(), sub.Short)
			}
		}
	}
	if c.Example != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", c.Example)
	}
	fmt.Fprintln(w)
	cliflag.PrintSections(w, fss, cols)
}
