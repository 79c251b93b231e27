// Package doctest runs the commands a Markdown document of this repository shows,
// as a reader copies them: the tests of the adapter and the lab tool use it to
// keep the README and docs/ true. It builds on shdoc, which parses the documents.
package doctest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/internal/shdoc"
)

// Command is one `PROG …` command of a document's ```sh block.
type Command struct {
	// Line is the command as written (continuation lines joined, comment cut).
	Line string
	// Args are its words as a shell splits them, without the leading program name.
	Args []string
	// Block is the block it is in.
	Block shdoc.Block
}

// Read returns the document at root/rel (rel as in the repository, e.g.
// "docs/lab.md"); the test fails when it cannot be read.
func Read(t testing.TB, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Commands returns the `prog …` commands of md's ```sh blocks under the heading
// section, in order; the test fails if there is none, or if one is not a simple
// command (it would need a shell to run as written). name names md in messages.
func Commands(t testing.TB, name, md, section, prog string) []Command {
	t.Helper()
	var out []Command
	for _, b := range shdoc.Blocks(md) {
		if b.Section != section {
			continue
		}
		for _, line := range shdoc.Commands(b.Text) {
			if !strings.HasPrefix(line, prog+" ") {
				continue
			}
			words, err := shdoc.Words(line)
			if err != nil {
				t.Fatalf("%s line %d: %v", name, b.Line, err)
			}
			out = append(out, Command{Line: line, Args: words[1:], Block: b})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no `%s` command in a ```sh block under %q", name, prog, section)
	}
	return out
}

// Output returns the content of the fenced block right after b in md, which must
// be a plain ``` block: the output the document shows for b's commands.
func Output(t testing.TB, md string, b shdoc.Block) string {
	t.Helper()
	lines := strings.Split(md, "\n")
	// b's fence is lines[b.Line-1], its text the lines after it, then its closing fence.
	i := b.Line + strings.Count(b.Text, "\n") + 1
	for i < len(lines) && !strings.HasPrefix(lines[i], "```") {
		i++
	}
	if i == len(lines) || lines[i] != "```" {
		t.Fatalf("line %d: the next fenced block is no plain ``` output block", b.Line)
	}
	var out strings.Builder
	for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
		out.WriteString(lines[i] + "\n")
	}
	return out.String()
}

// Section returns the text of md under the heading that reads heading exactly
// (without its #s), up to the next heading of the same or a higher level; the
// test fails when there is no such heading. A line inside a fenced block
// (``` or ~~~) is never a heading: a YAML or shell comment there neither
// starts nor ends a section.
func Section(t testing.TB, md, heading string) string {
	t.Helper()
	lines := strings.Split(md, "\n")
	fenced := false
	for i, line := range lines {
		level := headingLevel(line, &fenced)
		if level == 0 || strings.TrimSpace(line[level:]) != heading {
			continue
		}
		var out strings.Builder
		for _, l := range lines[i+1:] {
			if n := headingLevel(l, &fenced); n > 0 && n <= level {
				break
			}
			out.WriteString(l + "\n")
		}
		return out.String()
	}
	t.Fatalf("no heading %q", heading)
	return ""
}

// inFence reports whether line is a fence (``` or ~~~) or inside a fenced
// block; *fenced carries the state from line to line.
func inFence(line string, fenced *bool) bool {
	if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
		*fenced = !*fenced
		return true
	}
	return *fenced
}

// headingLevel returns the level of line's ATX heading (its #s, followed by a
// space), 0 for none: a fence or a line inside a fenced block is none;
// *fenced carries the state from line to line.
func headingLevel(line string, fenced *bool) int {
	if inFence(line, fenced) {
		return 0
	}
	n := len(line) - len(strings.TrimLeft(line, "#"))
	if n == 0 || !strings.HasPrefix(line[n:], " ") {
		return 0
	}
	return n
}

// InCheckoutDir makes the test's working directory a new temporary directory that
// holds the checkout's data/ and docs/ (as symbolic links to root's), where a
// documented command runs as written from the checkout's root, writes its files
// into the directory, and finds the files the test puts there. It returns the
// directory.
func InCheckoutDir(t *testing.T, root string) string {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"data", "docs"} {
		if err := os.Symlink(filepath.Join(abs, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	return dir
}
