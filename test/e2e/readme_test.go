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

// installSections are the README sections whose commands TestReadmeCommands checks:
// installing, checking and removing the adapter, and the per-pod variant's install.
var installSections = []string{
	"Per-pod values (`custom.metrics.k8s.io`)",
	"Run it against a cluster",
	"Install with kubectl (kustomize)",
	"Install with Helm",
	"Check, monitor, uninstall",
	"Verified TLS: the adapter manages its own serving certificate",
	"Who owns `v1beta1.external.metrics.k8s.io`",
}

// TestReadmeCommands: every command of the ```sh blocks in the README's
// installSections has a row in test/e2e/README.md's "README commands" table saying
// which test or CI script runs it as written, or, beginning "not run", why it cannot
// run here. Rows that name TestInstall
// must be commands of the blocks TestInstall runs (installBlocks); other tests and
// scripts named must exist. A README command without a row, or a row without a README
// command, fails.
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
		if !slices.Contains(installSections, b.Section) {
			continue
		}
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
		if strings.HasPrefix(runBy, "`TestInstall`") {
			ran := slices.ContainsFunc(installBlocks, func(r readmeRef) bool {
				return r.Section == w.block.Section && strings.HasPrefix(w.block.Text, r.Prefix)
			})
			if !ran {
				t.Errorf("README line %d: %q: the table says TestInstall runs it, but its block is not in installBlocks", w.block.Line, w.cmd)
			}
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
