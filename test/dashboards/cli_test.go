package dashboards

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCLIEnvironmentDocumented: every environment variable the binaries'
// code reads (os.Getenv, os.LookupEnv with a literal name) is in
// docs/cli.md's table, and no binary parses flags with Go's flag package
// (one flag style: pflag).
func TestCLIEnvironmentDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs/cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, dir := range []string{"cmd", "pkg"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
				files = append(files, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	fset := token.NewFileSet()
	read := map[string]string{}
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			switch {
			case pkg.Name == "os" && (sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv") && len(call.Args) == 1:
				if lit, ok := call.Args[0].(*ast.BasicLit); ok {
					name, _ := strconv.Unquote(lit.Value)
					read[name] = fset.Position(call.Pos()).String()
				}
			case pkg.Name == "flag" && sel.Sel.Name == "NewFlagSet":
				t.Errorf("%s: flag.NewFlagSet; the binaries parse flags with pflag (docs/cli.md)", fset.Position(call.Pos()))
			}
			return true
		})
	}
	if len(read) == 0 {
		t.Fatal("found no environment reads at all; the scan is broken")
	}
	for name, where := range read {
		if !strings.Contains(string(doc), "| `"+name+"`") && !strings.Contains(string(doc), "`"+name+"`, ") {
			t.Errorf("%s reads $%s, which docs/cli.md's environment table does not list", where, name)
		}
	}
}
