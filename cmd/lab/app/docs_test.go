package app

import (
	"bytes"
	"context"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/internal/doctest"
)

// repoRoot is the checkout's root, from this package's directory.
const repoRoot = "../../.."

// labDoc is the lab tool's manual, whose commands these tests run as written.
const labDoc = "README.md"

// labDocText returns the lab tool's manual.
func labDocText(t *testing.T) string {
	t.Helper()
	return doctest.Read(t, repoRoot, labDoc)
}

// labDocCommands returns the `lab …` commands of the manual's ```sh blocks under
// the heading section (doctest.Commands).
func labDocCommands(t *testing.T, section string) []doctest.Command {
	t.Helper()
	return doctest.Commands(t, labDoc, labDocText(t), section, "lab")
}

// runRoot runs `lab args...` through the root command, as a user does, and
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
