package app

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// userFacingFiles are what a user reads or copies, relative to repoRoot: the README,
// docs/ (but its design history, which records old names on purpose), the example
// manifests, the dashboard (each copy) and the chart's values and templates.
func userFacingFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	walk := func(dir string, keep func(string) bool) {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "design" {
				return filepath.SkipDir
			}
			if !d.IsDir() && keep(path) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	files = append(files, filepath.Join(repoRoot, "README.md"))
	walk("docs", func(p string) bool { return strings.HasSuffix(p, ".md") })
	walk("manifests/examples", func(string) bool { return true })
	walk("manifests/monitoring", func(string) bool { return true })
	walk("manifests/rendered", func(string) bool { return true })
	walk("charts/saturation-adapter", func(string) bool { return true })
	return files
}

// deprecatedNames returns the names a user should no longer be shown as current:
// the adapter's deprecated or hidden flags (its own and explain's) and the
// subcommands that moved to other binaries.
func deprecatedNames(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	add := func(f *pflag.Flag) {
		if f.Deprecated != "" || f.Hidden {
			seen["--"+f.Name] = true
		}
	}
	for _, fs := range NewOptions().Flags().FlagSets {
		fs.VisitAll(add)
	}
	newExplainCommand().Flags().VisitAll(add)
	for _, c := range movedCommands() {
		seen["adapter "+c.Name()] = true
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	if len(names) < 5 {
		t.Fatalf("deprecated names %q: want at least the two set-point aliases, --lister-kubeconfig and the moved commands", names)
	}
	return names
}

// The documentation, examples, dashboard and chart use current names only: a
// deprecated flag or moved subcommand may appear only where the text says it is
// deprecated (in the same table row, or the same paragraph).
func TestDocsUseCurrentNames(t *testing.T) {
	names := deprecatedNames(t)
	for _, path := range userFacingFiles(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, para := range strings.Split(string(b), "\n\n") {
			var units []string
			for _, line := range strings.Split(para, "\n") {
				if strings.HasPrefix(line, "|") {
					units = append(units, line)
				} else if len(units) == 0 || strings.HasPrefix(units[len(units)-1], "|") {
					units = append(units, line)
				} else {
					units[len(units)-1] += "\n" + line
				}
			}
			for _, u := range units {
				if strings.Contains(strings.ToLower(u), "deprecat") {
					continue
				}
				for _, n := range names {
					if containsName(u, n) {
						t.Errorf("%s uses %s, which is deprecated, and does not say so: %s", path, n, lineWith(u, n))
					}
				}
			}
		}
	}
}

// containsName reports whether text holds name as a whole word: not followed by
// a character that continues a flag name (--queue-depth-target-x is another flag).
func containsName(text, name string) bool {
	for i := strings.Index(text, name); i >= 0; {
		end := i + len(name)
		if end == len(text) || !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz0123456789-", rune(text[end])) {
			return true
		}
		next := strings.Index(text[end:], name)
		if next < 0 {
			return false
		}
		i = end + next
	}
	return false
}

// lineWith returns the line of text that holds name.
func lineWith(text, name string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, name) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
