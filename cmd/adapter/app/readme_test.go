package app

import (
	"bytes"
	"context"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/internal/doctest"
)

// repoRoot is the checkout's root, from this package's directory.
const repoRoot = "../../.."

// The documents whose adapter content these tests check, relative to repoRoot.
const (
	flagsDoc   = "docs/flags.md"
	explainDoc = "docs/explain.md"
)

// docText returns the document doc (relative to the repository's root).
func docText(t *testing.T, doc string) string {
	t.Helper()
	return doctest.Read(t, repoRoot, doc)
}

// docAdapterCommands returns the `adapter …` commands of doc's ```sh blocks under
// the heading section (doctest.Commands).
func docAdapterCommands(t *testing.T, doc, section string) []doctest.Command {
	t.Helper()
	return doctest.Commands(t, doc, docText(t, doc), section, "adapter")
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
