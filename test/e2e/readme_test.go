package e2e

import (
	"fmt"
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

// docRef names a documented block: the first ```sh block under the heading Section of
// File (README.md, or a page under docs/) whose text starts with Prefix.
type docRef struct{ File, Section, Prefix string }

// userDocs returns the documents whose commands TestReadmeCommands accounts for:
// README.md and every Markdown file under docs/, relative to the repository's root.
func userDocs(t *testing.T, root string) []string {
	t.Helper()
	docs := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			docs = append(docs, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// docText returns the document file (relative to the repository's root).
func docText(t *testing.T, file string) string {
	t.Helper()
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docBlock returns the block ref names; the test fails if there is none.
func docBlock(t *testing.T, ref docRef) string {
	t.Helper()
	for _, b := range shdoc.Blocks(docText(t, ref.File)) {
		if b.Section == ref.Section && strings.HasPrefix(b.Text, ref.Prefix) {
			return b.Text
		}
	}
	t.Fatalf("%s: no ```sh block in section %q starting with %q", ref.File, ref.Section, ref.Prefix)
	return ""
}

// docSection is a section of a document.
type docSection struct{ File, Section string }

// docRun is what a test outside this module runs of the documentation: the commands
// of Sections' blocks that start with Prefix. The test itself fails when one of them
// is not run, or not run as written.
type docRun struct {
	Sections []docSection
	Prefix   string
}

// docRunners are the tests besides TestInstall that the documented commands table
// names, with what each runs.
var docRunners = map[string]docRun{
	"TestReadmeExplainCommands": {Sections: []docSection{
		{"README.md", "Check it"},
		{"docs/explain.md", "`adapter explain`: evaluate /metrics offline"},
		{"docs/explain.md", "A wedged pod beside a sleeping one"},
		{"docs/prometheus.md", "Prometheus, Thanos or Mimir as the source"},
	}, Prefix: "adapter explain "},
	"TestScoreboardDocShortRun":  {Sections: []docSection{{"docs/scoreboard.md", "A scoreboard in seconds"}}, Prefix: "lab scoreboard "},
	"TestScoreboardDocReplay":    {Sections: []docSection{{"docs/scoreboard.md", "One replay, autoscaler by autoscaler"}}, Prefix: "lab simulate "},
	"TestLabDocEmulatorCommands": {Sections: []docSection{{"docs/lab.md", "`lab emulator`: an engine for tests and demos"}}, Prefix: "lab emulator "},
	"TestDrainDocCommands":       {Sections: []docSection{{"docs/drain.md", "`drain`: let vLLM finish before a scale-down stops it"}}, Prefix: "drain "},
}

// docCommand is one command of a document's ```sh blocks: its file, the section it
// is in ("" in a table row that stands for every section of the file) and the
// command.
type docCommand struct {
	file, section, cmd string
}

// TestReadmeCommands: every command of the ```sh blocks of the README and of every
// page under docs/ has a row in test/e2e/README.md's "Documented commands" tables
// (one per document) saying which test or CI script runs it as written, or,
// beginning "not run", why it cannot run there. A row naming TestInstall must be a
// command of the blocks TestInstall runs (installBlocks); one naming another test, a
// command of what docRunners says that test runs; one naming `.ci/run`, a line of
// .ci/run. A documented command without a row, or a row without a documented
// command, fails.
func TestReadmeCommands(t *testing.T) {
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	type where struct {
		docCommand
		block shdoc.Block
	}
	var docCmds []where
	for _, file := range userDocs(t, root) {
		for _, b := range shdoc.Blocks(docText(t, file)) {
			for _, c := range shdoc.Commands(b.Text) {
				docCmds = append(docCmds, where{docCommand{file, b.Section, c}, b})
			}
		}
	}
	if len(docCmds) < 50 {
		t.Fatalf("%d documented commands: the documents were not found", len(docCmds))
	}
	rows := commandTables(t, filepath.Join(root, "test", "e2e", "README.md"))
	var missing, stale []string
	used := map[docCommand]bool{}
	for _, w := range docCmds {
		key := w.docCommand
		runBy, ok := rows[key]
		if !ok {
			key.section = ""
			runBy, ok = rows[key]
		}
		if !ok {
			missing = append(missing, w.file+": "+w.cmd)
			continue
		}
		used[key] = true
		if msg := runsIt(root, runBy, w.file, w.cmd, w.block); msg != "" {
			t.Errorf("%s line %d: %q: %s", w.file, w.block.Line, w.cmd, msg)
		}
	}
	for dc, runBy := range rows {
		if !used[dc] {
			stale = append(stale, dc.file+": "+dc.cmd)
		}
		checkRunBy(t, root, dc.cmd, runBy)
	}
	slices.Sort(missing)
	slices.Sort(stale)
	if len(missing)+len(stale) > 0 {
		t.Errorf("test/e2e/README.md's documented commands tables (-documents +tables):\n%s", cmp.Diff(missing, stale))
	}
}

// runsIt says what is wrong with the claim that runBy runs cmd of file's block as
// written, or "".
func runsIt(root, runBy, file, cmd string, block shdoc.Block) string {
	m := testName.FindStringSubmatch(runBy)
	switch {
	case strings.HasPrefix(runBy, "`.ci/run`"):
		b, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
		if err != nil || !slices.Contains(strings.Split(string(b), "\n"), cmd) {
			return "the table says .ci/run runs it, but it is no line of .ci/run"
		}
	case m == nil || !strings.HasPrefix(runBy, m[0]):
	case m[1] == "TestInstall":
		ran := slices.ContainsFunc(installBlocks, func(r docRef) bool {
			return r.File == file && r.Section == block.Section && strings.HasPrefix(block.Text, r.Prefix)
		})
		if !ran {
			return "the table says TestInstall runs it, but its block is not in installBlocks"
		}
	default:
		r, ok := docRunners[m[1]]
		if !ok {
			return "the table names " + m[1] + ", which docRunners does not list"
		}
		if !slices.Contains(r.Sections, docSection{file, block.Section}) || !strings.HasPrefix(cmd, r.Prefix) {
			return "the table says " + m[1] + " runs it, but it runs only the " + r.Prefix + "commands of " + fmt.Sprint(r.Sections)
		}
	}
	return ""
}

// commandTables reads the rows (document, section and command → run by) of the
// tables under the heading "Documented commands": one table per document, under a
// heading that names the document in backquotes (### `docs/migration.md`), and after
// it, under a heading naming one of its sections (#### Roll back), the rows of that
// section only.
func commandTables(t *testing.T, path string) map[docCommand]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Documented commands\n")
	if !ok {
		t.Fatalf("%s: no \"## Documented commands\" section", path)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[docCommand]string{}
	file, sect := "", ""
	for _, line := range strings.Split(section, "\n") {
		if h, ok := strings.CutPrefix(line, "#### "); ok {
			sect = strings.TrimSpace(h)
			continue
		}
		if h, ok := strings.CutPrefix(line, "### "); ok {
			file, sect = strings.Trim(strings.TrimSpace(h), "`"), ""
			continue
		}
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		if file == "" {
			t.Fatalf("%s: row %q before any ### `document` heading", path, line)
		}
		cells := tableCells(line)
		if len(cells) < 2 {
			t.Fatalf("%s: row %q: want | `command` | run by |", path, line)
		}
		dc := docCommand{file, sect, strings.Trim(cells[0], "`")}
		if _, dup := rows[dc]; dup {
			t.Errorf("%s: %s: %q has two rows", path, file, dc.cmd)
		}
		rows[dc] = strings.TrimSpace(cells[1])
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
