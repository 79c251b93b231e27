package logstyle

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// structured are the klog calls whose first string argument is the message.
var structured = map[string]bool{"InfoS": true, "ErrorS": true, "InfoSDepth": true, "ErrorSDepth": true}

func TestLogMessages(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".cache", "testdata", "_output", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !structured[sel.Sel.Name] {
				return true
			}
			msgArg := 0
			if strings.HasPrefix(sel.Sel.Name, "Error") {
				msgArg = 1 // ErrorS(err, msg, ...)
			}
			if len(call.Args) <= msgArg {
				return true
			}
			lit, ok := call.Args[msgArg].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: the message of %s is not a constant string", fset.Position(call.Pos()), sel.Sel.Name)
				return true
			}
			msg, _ := strconv.Unquote(lit.Value)
			checked++
			if msg == "" || !unicode.IsUpper([]rune(msg)[0]) || strings.HasSuffix(msg, ".") {
				t.Errorf("%s: message %q must start with a capital letter and end without a period", fset.Position(call.Pos()), msg)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Errorf("checked %d messages; the walk missed the sources", checked)
	}
}
