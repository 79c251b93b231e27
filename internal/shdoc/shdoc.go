// Package shdoc reads the shell commands a Markdown document shows: its ```sh
// blocks, the commands in them as a reader copies them, and a command's words as
// a shell splits them. The documentation's tests use it to run the commands of the
// README and docs/ as written.
package shdoc

import (
	"fmt"
	"regexp"
	"strings"
)

// Block is one ```sh block of a Markdown text.
type Block struct {
	// Section is the heading the block sits under, without its #s.
	Section string
	// Line is the 1-based line of the opening fence.
	Line int
	// Text is the block's content, ending in a newline.
	Text string
}

// Blocks returns the ```sh blocks of a Markdown text, in order. A line starting
// with # inside any fenced block (a YAML comment) is no heading. A block indented
// in a list item loses its fence's indentation, as Markdown renders it.
func Blocks(md string) []Block {
	var out []Block
	section, in, other, indent := "", false, false, ""
	var cur Block
	for i, line := range strings.Split(md, "\n") {
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		switch {
		case in && strings.TrimSpace(line) == "```":
			in = false
			out = append(out, cur)
		case in:
			cur.Text += strings.TrimPrefix(line, indent) + "\n"
		case other:
			other = !fence
		case strings.TrimSpace(line) == "```sh":
			in, cur = true, Block{Section: section, Line: i + 1}
			indent = line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		case fence:
			other = true
		case strings.HasPrefix(line, "#"):
			section = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
	}
	return out
}

// Commands splits a block into its commands as a reader copies them: lines joined
// at a trailing backslash, comment-only lines dropped, a trailing comment cut, a
// here-document's body skipped (it is data; the command is its first line). A comment
// `# or: <command>` offers an alternative, which is a command too.
func Commands(block string) []string {
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

// Words splits one simple command into its words as a POSIX shell does with no
// expansion: at unquoted blanks, with single quotes keeping everything, double
// quotes keeping all but \" \\ \$ \`, and a backslash outside quotes escaping the
// next character. A command Words cannot run as written, one with a redirection,
// pipe, list, background job, variable, command substitution or glob, is an error:
// its caller needs a shell, not an argument vector.
func Words(cmd string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(cmd); i++ {
		c := cmd[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
			continue
		case c == '\'':
			end := strings.IndexByte(cmd[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("%q: unterminated single quote", cmd)
			}
			cur.WriteString(cmd[i+1 : i+1+end])
			i += end + 1
		case c == '"':
			n, err := doubleQuoted(cmd[i+1:], &cur)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", cmd, err)
			}
			i += n
		case c == '\\' && i+1 < len(cmd):
			i++
			cur.WriteByte(cmd[i])
		case strings.IndexByte("|&;<>()$`*?[~", c) >= 0:
			return nil, fmt.Errorf("%q: %q needs a shell", cmd, c)
		default:
			cur.WriteByte(c)
		}
		inWord = true
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// doubleQuoted writes the text of a double-quoted string that s starts inside
// (after the opening quote) to w and returns the length up to and including the
// closing quote.
func doubleQuoted(s string, w *strings.Builder) (int, error) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i + 1, nil
		case c == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0:
			i++
			w.WriteByte(s[i])
		case c == '$' || c == '`':
			return 0, fmt.Errorf("%q inside double quotes needs a shell", c)
		default:
			w.WriteByte(c)
		}
	}
	return 0, fmt.Errorf("unterminated double quote")
}
