package shdoc

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCommands pins the splitting of blocks into commands.
func TestCommands(t *testing.T) {
	block := "make demo   # a comment\n" +
		"            # a comment line\n" +
		"kubectl apply -f x.yaml   # or: kubectl apply -k x\n" +
		"helm install a b \\\n  --set c=d\n" +
		"cat > k.yaml <<'EOF'\nresources: [x]  # kept\nEOF\n" +
		"kubectl get --raw \"/a#b\"\n"
	want := []string{"make demo", "kubectl apply -f x.yaml", "kubectl apply -k x", "helm install a b --set c=d",
		"cat > k.yaml <<'EOF'", `kubectl get --raw "/a#b"`}
	if diff := cmp.Diff(want, Commands(block)); diff != "" {
		t.Errorf("Commands (-want +got):\n%s", diff)
	}
}

// TestBlocks: each ```sh block with its section and fence line; other fences are not shell.
func TestBlocks(t *testing.T) {
	md := "# Top\n```sh\na\n```\n## Sub `x`\n```yaml\n# a comment, no heading\nk: v\n```\n```sh\nb\nc\n```\n"
	want := []Block{{Section: "Top", Line: 2, Text: "a\n"}, {Section: "Sub `x`", Line: 10, Text: "b\nc\n"}}
	if diff := cmp.Diff(want, Blocks(md)); diff != "" {
		t.Errorf("Blocks (-want +got):\n%s", diff)
	}
	// In a list item: the fence's indentation goes, so a here-document ends where
	// bash ends it and the command after it is seen.
	md = "## Roll back\n1. Recreate it:\n\n   ```sh\n   cat > f <<EOF\n   {}\n   EOF\n   kubectl wait x\n   ```\n"
	want = []Block{{Section: "Roll back", Line: 4, Text: "cat > f <<EOF\n{}\nEOF\nkubectl wait x\n"}}
	if diff := cmp.Diff(want, Blocks(md)); diff != "" {
		t.Errorf("Blocks of an indented block (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cat > f <<EOF", "kubectl wait x"}, Commands(want[0].Text)); diff != "" {
		t.Errorf("Commands of an indented block (-want +got):\n%s", diff)
	}
}

// TestWords: the argument vector a shell gives, and an error for what needs a shell.
func TestWords(t *testing.T) {
	for _, tt := range []struct {
		cmd  string
		want []string
		err  string
	}{
		{cmd: "adapter explain  pod-a.prom\tpod-b.prom", want: []string{"adapter", "explain", "pod-a.prom", "pod-b.prom"}},
		{cmd: `curl --data-urlencode 'query={__name__=~"vllm:.*"}[90s]'`, want: []string{"curl", "--data-urlencode", `query={__name__=~"vllm:.*"}[90s]`}},
		{cmd: `kubectl get --raw "/pods/*/x?a=\"b\"\\"`, want: []string{"kubectl", "get", "--raw", `/pods/*/x?a="b"\`}},
		{cmd: `a b\ c "d"'e'f ''`, want: []string{"a", "b c", "def", ""}},
		{cmd: "adapter explain -", want: []string{"adapter", "explain", "-"}},
		{cmd: "curl -s x > pod-a.prom", err: `'>' needs a shell`},
		{cmd: "kubectl port-forward pod/vllm-0 8000 &", err: `'&' needs a shell`},
		{cmd: "ls ~/x", err: `'~' needs a shell`},
		{cmd: `echo "$HOME"`, err: `'$' inside double quotes needs a shell`},
		{cmd: `echo 'x`, err: "unterminated single quote"},
		{cmd: `echo "x`, err: "unterminated double quote"},
	} {
		got, err := Words(tt.cmd)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Words(%q) = %q, %v; want an error containing %q", tt.cmd, got, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Words(%q): %v", tt.cmd, err)
		} else if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Words(%q) (-want +got):\n%s", tt.cmd, diff)
		}
	}
}
