package app

import (
	"bytes"
	"context"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/internal/doctest"
)

// repoRoot is the checkout's root, from this package's directory.
const repoRoot = "../../.."

// readmeText returns the repository's README.md.
func readmeText(t *testing.T) string {
	t.Helper()
	return doctest.Read(t, repoRoot, "README.md")
}

// readmeAdapterCommands returns the `adapter …` commands of the README's ```sh
// blocks under the heading section (doctest.Commands).
func readmeAdapterCommands(t *testing.T, section string) []doctest.Command {
	t.Helper()
	return doctest.Commands(t, "README.md", readmeText(t), section, "adapter")
}

// runRoot runs `adapter args...` through the root command, as a user does, and
// returns its standard output and error.
func runRoot(args ...string) (string, string, error) {
	cmd := NewCommand(context.Background())
	var out, errOut bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}
