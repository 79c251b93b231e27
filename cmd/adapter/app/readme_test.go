package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/internal/shdoc"
)

// repoRoot is the checkout's root, from this package's directory.
const repoRoot = "../../.."

// readmeText returns the repository's README.md.
func readmeText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeCommand is one `adapter …` command of a README ```sh block.
type readmeCommand struct {
	// Line is the command as written (continuation lines joined, comment cut).
	Line string
	// Args are its words as a shell splits them, without the leading "adapter".
	Args []string
	// Block is the block it is in.
	Block shdoc.Block
}

// readmeAdapterCommands returns the `adapter …` commands of the README's ```sh
// blocks under the heading section, in order; the test fails if there is none,
// or if one is not a simple command (it would need a shell to run as written).
func readmeAdapterCommands(t *testing.T, section string) []readmeCommand {
	t.Helper()
	var out []readmeCommand
	for _, b := range shdoc.Blocks(readmeText(t)) {
		if b.Section != section {
			continue
		}
		for _, line := range shdoc.Commands(b.Text) {
			if !strings.HasPrefix(line, "adapter ") {
				continue
			}
			words, err := shdoc.Words(line)
			if err != nil {
				t.Fatalf("README line %d: %v", b.Line, err)
			}
			out = append(out, readmeCommand{Line: line, Args: words[1:], Block: b})
		}
	}
	if len(out) == 0 {
		t.Fatalf("README: no `adapter` command in a ```sh block under %q", section)
	}
	return out
}

// readmeOutput returns the content of the fenced block right after b in md, which
// must be a plain ``` block: the output the README shows for b's commands.
func readmeOutput(t *testing.T, md string, b shdoc.Block) string {
	t.Helper()
	lines := strings.Split(md, "\n")
	// b's fence is lines[b.Line-1], its text the lines after it, then its closing fence.
	i := b.Line + strings.Count(b.Text, "\n") + 1
	for i < len(lines) && !strings.HasPrefix(lines[i], "```") {
		i++
	}
	if i == len(lines) || lines[i] != "```" {
		t.Fatalf("README line %d: the next fenced block is no plain ``` output block", b.Line)
	}
	var out strings.Builder
	for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
		out.WriteString(lines[i] + "\n")
	}
	return out.String()
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

// inReadmeDir makes the test's working directory a new temporary directory that
// holds the checkout's data/ and docs/ (as symbolic links), where a README command
// runs as written from the checkout's root, writes its files into the directory,
// and finds the files the test puts there. It returns the directory.
func inReadmeDir(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"data", "docs"} {
		if err := os.Symlink(filepath.Join(root, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	return dir
}
