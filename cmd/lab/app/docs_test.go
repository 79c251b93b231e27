package app

import (
	"bytes"
	"context"
)

// repoRoot is the checkout's root, from this package's directory.
const repoRoot = "../../.."

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
