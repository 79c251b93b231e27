package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// shBlock is one ```sh block of a Markdown file.
type shBlock struct {
	// Section is the heading the block sits under, without its #s.
	Section string
	// Line is the 1-based line of the opening fence.
	Line int
	// Text is the block's content, ending in a newline.
	Text string
}

// readmeRef names a README block: the first one in Section whose text starts with Prefix.
type readmeRef struct{ Section, Prefix string }

// shBlocks returns the ```sh blocks of a Markdown text, in order.
func shBlocks(md string) []shBlock {
	var out []shBlock
	section, in := "", false
	var cur shBlock
	for i, line := range strings.Split(md, "\n") {
		switch {
		case in && strings.TrimSpace(line) == "```":
			in = false
			out = append(out, cur)
		case in:
			cur.Text += line + "\n"
		case strings.TrimSpace(line) == "```sh":
			in, cur = true, shBlock{Section: section, Line: i + 1}
		case strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
	}
	return out
}

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
	for _, b := range shBlocks(readme(t)) {
		if b.Section == ref.Section && strings.HasPrefix(b.Text, ref.Prefix) {
			return b.Text
		}
	}
	t.Fatalf("README: no ```sh block in section %q starting with %q", ref.Section, ref.Prefix)
	return ""
}

// shCommands splits a block into its commands as a reader copies them: lines joined
// at a trailing backslash, comment-only lines dropped, a trailing comment cut, a
// here-document's body skipped (it is data; the command is its first line). A comment
// `# or: <command>` offers an alternative, which is a command too.
func shCommands(block string) []string {
	var out []string
	lines := strings.Split(strings.TrimRight(block, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		for strings.HasSuffix(line, "\\") && i+1 < len(lines) {
			i++
			line = strings.TrimRight(strings.TrimSuffix(line, "\\"), " \t") + " " + strings.TrimSpace(lines[i])
		}
		if m := hereDoc.FindStringSubmatch(line); m != nil {
			for i+1 < len(lines) {
				i++
				if lines[i] == m[1] {
					break
				}
			}
		}
		cmd, comment := cutComment(line)
		if cmd != "" {
			out = append(out, cmd)
		}
		if alt, ok := strings.CutPrefix(comment, "or: "); ok {
			out = append(out, strings.TrimSpace(alt))
		}
	}
	return out
}

var hereDoc = regexp.MustCompile(`<<-?'?([A-Z]+)'?`)

// cutComment splits a command line at its comment: a # after whitespace, outside quotes.
func cutComment(line string) (cmd, comment string) {
	quote := rune(0)
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimSpace(line[:i]), strings.TrimSpace(line[i+1:])
		}
	}
	return strings.TrimSpace(line), ""
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
		block shBlock
	}
	var readmeCmds []where
	for _, b := range shBlocks(readme(t)) {
		if !slices.Contains(installSections, b.Section) {
			continue
		}
		for _, c := range shCommands(b.Text) {
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

// TestShCommands pins the splitting of blocks into commands.
func TestShCommands(t *testing.T) {
	block := "make demo   # a comment\n" +
		"            # a comment line\n" +
		"kubectl apply -f x.yaml   # or: kubectl apply -k x\n" +
		"helm install a b \\\n  --set c=d\n" +
		"cat > k.yaml <<'EOF'\nresources: [x]  # kept\nEOF\n" +
		"kubectl get --raw \"/a#b\"\n"
	want := []string{"make demo", "kubectl apply -f x.yaml", "kubectl apply -k x", "helm install a b --set c=d",
		"cat > k.yaml <<'EOF'", `kubectl get --raw "/a#b"`}
	if diff := cmp.Diff(want, shCommands(block)); diff != "" {
		t.Errorf("shCommands (-want +got):\n%s", diff)
	}
	row := "| `a \\| b` | `TestX` \\| y |"
	if diff := cmp.Diff([]string{"`a | b`", "`TestX` | y"}, tableCells(row)); diff != "" {
		t.Errorf("tableCells (-want +got):\n%s", diff)
	}
}
