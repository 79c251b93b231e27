package doctest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the checkout's root, from this package's directory.
const repoRoot = "../.."

// TestDocLinks: every relative link of the README and of the pages under docs/
// points at a file or directory of the checkout and, with an #anchor into a
// Markdown file, at one of its headings (as GitHub makes anchors of them).
func TestDocLinks(t *testing.T) {
	docs := []string{filepath.Join(repoRoot, "README.md")}
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			docs = append(docs, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 10 {
		t.Fatalf("%d documents found: want the README and the pages under docs/", len(docs))
	}
	links := 0
	for _, doc := range docs {
		for _, target := range mdLinks(t, doc) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, anchor, _ := strings.Cut(target, "#")
			file := doc
			if path != "" {
				file = filepath.Join(filepath.Dir(doc), path)
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s: link %q: %v", doc, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !anchors(t, file)[anchor] {
				t.Errorf("%s: link %q: %s has no heading with the anchor #%s", doc, target, file, anchor)
			}
		}
	}
	if links < 50 {
		t.Errorf("%d relative links checked: the link pattern no longer matches the documents", links)
	}
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// mdLinks returns the targets of the Markdown links of file, outside fenced blocks
// and code spans.
func mdLinks(t *testing.T, file string) []string {
	t.Helper()
	var out []string
	for _, line := range proseLines(t, file) {
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

var codeSpan = regexp.MustCompile("`[^`]*`")

// proseLines returns the lines of file outside fenced blocks.
func proseLines(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if !inFence(line, &fenced) {
			out = append(out, line)
		}
	}
	return out
}

// anchors returns the anchors GitHub gives the headings of file: lower case,
// punctuation dropped but hyphens and underscores, spaces made hyphens.
func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, line := range proseLines(t, file) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var slug strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				slug.WriteRune(r)
			}
		}
		out[slug.String()] = true
	}
	return out
}

// TestAnchors pins the anchors of headings the documents link to.
func TestAnchors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a.md")
	md := "# Choose your set points: calibrate → simulate → HPA\n## Who owns `v1beta1.external.metrics.k8s.io`\n" +
		"```yaml\n# not a heading\n```\n## The adapter's own metrics\n"
	if err := os.WriteFile(file, []byte(md), 0o600); err != nil {
		t.Fatal(err)
	}
	got := anchors(t, file)
	for _, want := range []string{"choose-your-set-points-calibrate--simulate--hpa", "who-owns-v1beta1externalmetricsk8sio", "the-adapters-own-metrics"} {
		if !got[want] {
			t.Errorf("anchors %v lack %s", got, want)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a comment in a fenced block became the anchor #not-a-heading")
	}
}

// TestSectionSkipsFencedBlocks: a comment line in a fenced block neither starts
// nor ends a section.
func TestSectionSkipsFencedBlocks(t *testing.T) {
	md := "# Top\n## Policies\nbefore\n```yaml\n# Chat that sees ahead\n- name: chat\n```\nafter\n~~~sh\n## not a heading either\n~~~\n" +
		"## Next\nnext\n```\n# Policies\n```\n"
	want := "before\n```yaml\n# Chat that sees ahead\n- name: chat\n```\nafter\n~~~sh\n## not a heading either\n~~~\n"
	if got := Section(t, md, "Policies"); got != want {
		t.Errorf("Section(Policies) = %q, want %q", got, want)
	}
	if got := Section(t, md, "Next"); got != "next\n```\n# Policies\n```\n\n" {
		t.Errorf("Section(Next) = %q", got)
	}
}
