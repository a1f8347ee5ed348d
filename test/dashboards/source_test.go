package dashboards

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the main module's root, two levels up.
const repoRoot = "../.."

// stringLiterals returns every string literal in the non-test Go files of
// the packages under dirs (relative to the repository root): the names a
// package defines, whatever the construct that registers them.
func stringLiterals(t *testing.T, dirs ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no Go files in %s: was the package moved? update the metric catalog here", dir)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			if err := addLiterals(fset, f, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

func addLiterals(fset *token.FileSet, path string, into map[string]bool) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	file, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	ast.Inspect(file, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				into[s] = true
			}
		}
		return true
	})
	return nil
}
