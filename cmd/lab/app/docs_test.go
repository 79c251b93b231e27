package app

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/saturation-adapter/saturation-adapter/internal/doctest"
)

// repoRoot is the checkout's root, from this package's directory.
const repoRoot = "../../.."

// labDoc is the lab tool's manual, whose commands these tests run as written and
// whose flag tables they check.
const labDoc = "docs/lab.md"

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

// labDocSection returns the manual's text under the heading that reads heading
// (doctest.Section).
func labDocSection(t *testing.T, heading string) string {
	t.Helper()
	return doctest.Section(t, labDocText(t), heading)
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

// checkFlagTable: the first flag table (| flag | default | meaning |) of the
// manual's section names every flag of fs but the hidden (deprecated) ones, and
// no other, each with fs's default where the table gives a literal one (in
// backquotes; a cell naming several flags gives their defaults in order,
// comma-separated).
func checkFlagTable(t *testing.T, section string, fs *pflag.FlagSet) {
	t.Helper()
	text := labDocSection(t, section)
	tableAt := strings.Index(text, "| flag | default | meaning |")
	if tableAt < 0 {
		t.Fatalf("no flag table in %s's section %q", labDoc, section)
	}
	flagRE := regexp.MustCompile("`--([a-z0-9-]+)`")
	documented := map[string]bool{}
	for _, line := range strings.Split(text[tableAt:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 3 {
			t.Fatalf("%s flag row %q: want 3 cells", labDoc, line)
		}
		for _, m := range flagRE.FindAllStringSubmatch(cells[0]+" "+cells[2], -1) {
			documented[m[1]] = true
		}
		names := flagRE.FindAllStringSubmatch(cells[0], -1)
		defaults := strings.Split(cells[1], ", ")
		if len(defaults) != len(names) {
			if len(names) > 1 && len(defaults) > 1 {
				t.Errorf("%s row %q: %d flags, %d defaults", labDoc, cells[0], len(names), len(defaults))
			}
			continue
		}
		for i, m := range names {
			f := fs.Lookup(m[1])
			if f == nil || !strings.HasPrefix(defaults[i], "`") {
				continue
			}
			if d := strings.Trim(defaults[i], "`"); !sameDefault(d, f.DefValue) {
				t.Errorf("%s: --%s defaults to %s, the command to %q", labDoc, m[1], defaults[i], f.DefValue)
			}
		}
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && !documented[f.Name] {
			t.Errorf("--%s is not in %s's flag table of %q", f.Name, labDoc, section)
		}
		delete(documented, f.Name)
	})
	for name := range documented {
		t.Errorf("%s's flag table of %q has --%s, which the command lacks", labDoc, section, name)
	}
}

// emulatorSection is the manual's section of `lab emulator`.
const emulatorSection = "`lab emulator`: an engine for tests and demos"

// TestEmulatorFlagsDocumented: the manual's flag table for `lab emulator` names
// every flag of the command (and no other), with the command's defaults.
func TestEmulatorFlagsDocumented(t *testing.T) {
	checkFlagTable(t, emulatorSection, NewEmulatorCommand(context.Background()).Flags())
}

// TestLabDocEmulatorCommands runs the `lab emulator` commands of the manual's
// emulator section as written (its --help, which must list the flags the
// section's comments name).
func TestLabDocEmulatorCommands(t *testing.T) {
	cmds := labDocCommands(t, emulatorSection)
	for _, c := range cmds {
		if c.Args[0] != "emulator" || !strings.Contains(c.Line, "--help") {
			t.Errorf("%s line %d: %s: want only `lab emulator --help` here (a running emulator needs a test of its own)", labDoc, c.Block.Line, c.Line)
			continue
		}
		out, errOut, err := runRoot(c.Args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.Line, err, errOut)
		}
		for _, flag := range []string{"--metric-names", "--data-parallel-size", "--fault", "--step-time-base", "--max-num-seqs"} {
			if !strings.Contains(out, flag) {
				t.Errorf("%s does not list %s:\n%s", c.Line, flag, out)
			}
		}
	}
}

// sameDefault compares a documented default with a flag's: durations and numbers
// by value (the manual says 10m where the flag says 10m0s), the rest as text.
func sameDefault(documented, def string) bool {
	if a, err := time.ParseDuration(documented); err == nil {
		b, err := time.ParseDuration(def)
		return err == nil && a == b
	}
	if a, err := strconv.ParseFloat(documented, 64); err == nil {
		b, err := strconv.ParseFloat(def, 64)
		return err == nil && a == b
	}
	return documented == def
}
