package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/saturation-adapter/saturation-adapter/internal/shdoc"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// readmeRef names a README block: the first one in Section whose text starts with Prefix.
type readmeRef struct{ Section, Prefix string }

// readme returns the repository's README.md.
func readme(t *testing.T) string {
	t.Helper()
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeBlock returns the README block ref names; the test fails if there is none.
func readmeBlock(t *testing.T, ref readmeRef) string {
	t.Helper()
	for _, b := range shdoc.Blocks(readme(t)) {
		if b.Section == ref.Section && strings.HasPrefix(b.Text, ref.Prefix) {
			return b.Text
		}
	}
	t.Fatalf("README: no ```sh block in section %q starting with %q", ref.Section, ref.Prefix)
	return ""
}

// readmeRun is what a test outside this module runs of the README: the commands
// of Sections' blocks that start with Prefix. The test itself fails when one of
// them is not run, or not run as written.
type readmeRun struct {
	Sections []string
	Prefix   string
}

// readmeRunners are the tests besides TestInstall that the README commands table
// names, with what each runs.
var readmeRunners = map[string]readmeRun{
	"TestReadmeExplainCommands": {Sections: []string{"`adapter explain`: evaluate /metrics offline", "Prometheus, Thanos or Mimir as the source"}, Prefix: "adapter explain "},
}

// TestReadmeCommands: every command of the README's ```sh blocks has a row in
// test/e2e/README.md's "README commands" table saying which test or CI script
// runs it as written, or, beginning "not run", why it cannot run there. A row
// naming TestInstall must be a command of the blocks TestInstall runs
// (installBlocks); one naming another test, a command of what readmeRunners says
// that test runs; one naming `.ci/run`, a line of .ci/run. A README command
// without a row, or a row without a README command, fails.
func TestReadmeCommands(t *testing.T) {
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	type where struct {
		cmd   string
		block shdoc.Block
	}
	var readmeCmds []where
	for _, b := range shdoc.Blocks(readme(t)) {
		for _, c := range shdoc.Commands(b.Text) {
			readmeCmds = append(readmeCmds, where{c, b})
		}
	}
	rows := commandTable(t, filepath.Join(root, "test", "e2e", "README.md"))
	var missing, stale []string
	for _, w := range readmeCmds {
		runBy, ok := rows[w.cmd]
		if !ok {
			missing = append(missing, w.cmd)
			continue
		}
		if msg := runsIt(root, runBy, w.cmd, w.block); msg != "" {
			t.Errorf("README line %d: %q: %s", w.block.Line, w.cmd, msg)
		}
	}
	for cmd, runBy := range rows {
		if !slices.ContainsFunc(readmeCmds, func(w where) bool { return w.cmd == cmd }) {
			stale = append(stale, cmd)
		}
		checkRunBy(t, root, cmd, runBy)
	}
	slices.Sort(stale)
	if len(missing)+len(stale) > 0 {
		t.Errorf("test/e2e/README.md's README commands table (-README +table):\n%s", cmp.Diff(missing, stale))
	}
}

// runsIt says what is wrong with the claim that runBy runs cmd of block as
// written, or "".
func runsIt(root, runBy, cmd string, block shdoc.Block) string {
	m := testName.FindStringSubmatch(runBy)
	switch {
	case strings.HasPrefix(runBy, "`.ci/run`"):
		b, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
		if err != nil || !slices.Contains(strings.Split(string(b), "\n"), cmd) {
			return "the table says .ci/run runs it, but it is no line of .ci/run"
		}
	case m == nil || !strings.HasPrefix(runBy, m[0]):
	case m[1] == "TestInstall":
		ran := slices.ContainsFunc(installBlocks, func(r readmeRef) bool {
			return r.Section == block.Section && strings.HasPrefix(block.Text, r.Prefix)
		})
		if !ran {
			return "the table says TestInstall runs it, but its block is not in installBlocks"
		}
	default:
		r, ok := readmeRunners[m[1]]
		if !ok {
			return "the table names " + m[1] + ", which readmeRunners does not list"
		}
		if !slices.Contains(r.Sections, block.Section) || !strings.HasPrefix(cmd, r.Prefix) {
			return "the table says " + m[1] + " runs it, but it runs only the " + r.Prefix + "commands of " + strings.Join(r.Sections, ", ")
		}
	}
	return ""
}

// commandTable reads the rows (command → run by) of the table under the heading
// "README commands".
func commandTable(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## README commands\n")
	if !ok {
		t.Fatalf("%s: no \"## README commands\" section", path)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := tableCells(line)
		if len(cells) < 2 {
			t.Fatalf("%s: row %q: want | `command` | run by |", path, line)
		}
		cmd := strings.Trim(cells[0], "`")
		if _, dup := rows[cmd]; dup {
			t.Errorf("%s: %q has two rows", path, cmd)
		}
		rows[cmd] = strings.TrimSpace(cells[1])
	}
	return rows
}

// tableCells splits a Markdown table row at its unescaped pipes; `\|` in a cell is a
// pipe of its own.
func tableCells(row string) []string {
	var cells []string
	var cur strings.Builder
	row = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(row), "|"), "|")
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cur.WriteByte('|')
			i++
		case row[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(row[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

var testName = regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")

// checkRunBy: a "run by" cell starts with a test that exists, `.ci/run`, or "not run".
func checkRunBy(t *testing.T, root, cmd, runBy string) {
	t.Helper()
	switch {
	case strings.HasPrefix(runBy, "not run"):
		if len(runBy) < len("not run: ")+10 {
			t.Errorf("%q: %q gives no reason", cmd, runBy)
		}
		return
	case strings.HasPrefix(runBy, "`.ci/run`"):
		return
	}
	m := testName.FindStringSubmatch(runBy)
	if m == nil || !strings.HasPrefix(runBy, m[0]) {
		t.Errorf("%q: run by %q: want a `TestName`, `.ci/run` or \"not run: why\"", cmd, runBy)
		return
	}
	if !testExists(t, root, m[1]) {
		t.Errorf("%q: run by %s, which no _test.go file defines", cmd, m[1])
	}
}

func testExists(t *testing.T, root, name string) bool {
	t.Helper()
	found := false
	decl := "func " + name + "(t *testing.T)"
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || found {
			return filepath.SkipDir
		}
		if d.IsDir() && (d.Name() == ".cache" || d.Name() == ".git" || d.Name() == "_output") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, "_test.go") {
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), decl) {
				found = true
			}
		}
		return nil
	})
	return found
}

// TestTableCells pins the splitting of table rows into cells.
func TestTableCells(t *testing.T) {
	row := "| `a \\| b` | `TestX` \\| y |"
	if diff := cmp.Diff([]string{"`a | b`", "`TestX` | y"}, tableCells(row)); diff != "" {
		t.Errorf("tableCells (-want +got):\n%s", diff)
	}
}
