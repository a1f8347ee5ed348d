package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The two places of KEDA's source the trim edits.
const (
	builderFile = "pkg/scaling/scalers_builder.go"
	builderFunc = "buildScaler"
	scalersDir  = "pkg/scalers"
	// scalersPkg is the name the builder calls the scalers package by.
	scalersPkg = "scalers"
)

// Kept is what a trimmed copy keeps.
type Kept struct {
	Triggers []string // trigger types, in the builder's order
	Files    []string // pkg/scalers/*_scaler.go files kept, sorted
}

// Trim copies the KEDA module at src to out and trims its scaler registry
// to triggers (see the package comment).
func Trim(src, out string, triggers []string) (Kept, error) {
	want := map[string]bool{}
	for _, t := range triggers {
		t = strings.TrimSpace(t)
		if t == "" {
			return Kept{}, errors.New("an empty trigger type in the list")
		}
		want[t] = true
	}
	if _, err := os.Stat(filepath.Join(src, builderFile)); err != nil {
		return Kept{}, fmt.Errorf("%s is not KEDA's module: %w", src, err)
	}
	if _, err := os.Stat(out); err == nil {
		return Kept{}, fmt.Errorf("%s exists; the copy needs a new folder", out)
	}
	if err := copyTree(src, out); err != nil {
		return Kept{}, fmt.Errorf("copying %s: %w", src, err)
	}
	var kept Kept
	constructors, err := trimBuilder(filepath.Join(out, builderFile), want, &kept)
	if err != nil {
		return Kept{}, fmt.Errorf("%s: %w", builderFile, err)
	}
	// The tests of both packages test the scalers removed.
	for _, dir := range []string{scalersDir, filepath.Dir(builderFile)} {
		if err := removeTests(filepath.Join(out, dir)); err != nil {
			return Kept{}, err
		}
	}
	if err := trimScalers(filepath.Join(out, scalersDir), constructors, &kept); err != nil {
		return Kept{}, fmt.Errorf("%s: %w", scalersDir, err)
	}
	return kept, nil
}

// trimBuilder keeps, in builderFunc's switch, the cases of the wanted
// trigger types and the default case, and returns the scalers package's
// functions the kept cases call.
func trimBuilder(path string, want map[string]bool, kept *Kept) (map[string]bool, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	if err != nil {
		return nil, fmt.Errorf("parsing: %w", err)
	}
	sw, err := triggerSwitch(file)
	if err != nil {
		return nil, err
	}
	comments := ast.NewCommentMap(fset, file, file.Comments)
	calls := map[string]bool{}
	found := map[string]bool{}
	var body []ast.Stmt
	for _, stmt := range sw.Body.List {
		clause, ok := stmt.(*ast.CaseClause)
		if !ok {
			return nil, fmt.Errorf("%s's switch holds a %T, not a case", builderFunc, stmt)
		}
		if clause.List == nil { // default: rejects every type not kept
			body = append(body, clause)
			continue
		}
		var list []ast.Expr
		for _, expr := range clause.List {
			lit, ok := expr.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return nil, fmt.Errorf("a case of %s's switch is not a string literal", builderFunc)
			}
			name, err := strconv.Unquote(lit.Value)
			if err != nil {
				return nil, fmt.Errorf("a case of %s's switch: %w", builderFunc, err)
			}
			if want[name] {
				list = append(list, expr)
				found[name] = true
				kept.Triggers = append(kept.Triggers, name)
			}
		}
		if list == nil {
			continue
		}
		clause.List = list
		ast.Inspect(clause, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == scalersPkg {
					calls[sel.Sel.Name] = true
				}
			}
			return true
		})
		body = append(body, clause)
	}
	var missing []string
	for name := range want {
		if !found[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("no case for trigger types %s in %s", strings.Join(missing, ", "), builderFunc)
	}
	sw.Body.List = body
	file.Comments = comments.Filter(file).Comments()
	var buf strings.Builder
	if err := format.Node(&buf, fset, file); err != nil {
		return nil, fmt.Errorf("printing: %w", err)
	}
	return calls, os.WriteFile(path, []byte(buf.String()), 0o644)
}

// triggerSwitch finds the switch on the trigger type in builderFunc.
func triggerSwitch(file *ast.File) (*ast.SwitchStmt, error) {
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Name.Name != builderFunc || fn.Body == nil {
			continue
		}
		for _, stmt := range fn.Body.List {
			if sw, ok := stmt.(*ast.SwitchStmt); ok {
				return sw, nil
			}
		}
		return nil, fmt.Errorf("%s has no switch statement", builderFunc)
	}
	return nil, fmt.Errorf("no function %s", builderFunc)
}

// trimScalers keeps, of the scaler files, those that declare a function
// the kept cases call, and then every file that declares something a kept
// file uses, or a method on a type a kept file declares: scalers share
// constants and helpers across files. It removes the other scaler files
// and checks that each called function is declared.
func trimScalers(dir string, calls map[string]bool, kept *Kept) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	var start []string
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		if e.IsDir() || !strings.HasSuffix(name, ".go") {
			continue
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", path, err)
		}
		files = append(files, file)
		if !strings.HasSuffix(name, "_scaler.go") || slices.ContainsFunc(funcs(file), func(fn string) bool { return calls[fn] }) {
			start = append(start, path)
		}
	}
	need := closure(start, needs(fset, files))
	declared := map[string]bool{}
	for _, file := range files {
		path := fset.File(file.Pos()).Name()
		if !need[path] {
			if err := os.Remove(path); err != nil {
				return err
			}
			continue
		}
		for _, fn := range funcs(file) {
			declared[fn] = true
		}
		if name := filepath.Base(path); strings.HasSuffix(name, "_scaler.go") {
			kept.Files = append(kept.Files, name)
		}
	}
	for fn := range calls {
		if !declared[fn] {
			return fmt.Errorf("the kept cases call %s.%s, which no file declares", scalersPkg, fn)
		}
	}
	return nil
}

// funcs names the functions, not methods, a file declares.
func funcs(file *ast.File) []string {
	var names []string
	for _, decl := range file.Decls {
		if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil {
			names = append(names, fn.Name.Name)
		}
	}
	return names
}

// needs maps each file of one package to the files it needs: those that
// declare a package-level name or a method it uses, and those that declare
// methods on a type it declares. Names resolve by type-checking the
// package with every import an empty package: the type errors that makes
// are ignored, and the package's own names still resolve, scopes and all.
func needs(fset *token.FileSet, files []*ast.File) map[string]map[string]bool {
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: emptyImporter{}, Error: func(error) {}}
	pkg, _ := conf.Check(scalersPkg, fset, files, info) // errors expected; see above
	fileOf := func(pos token.Pos) string { return fset.File(pos).Name() }
	edges := map[string]map[string]bool{}
	edge := func(from, to string) {
		if from == to {
			return
		}
		if edges[from] == nil {
			edges[from] = map[string]bool{}
		}
		edges[from][to] = true
	}
	for id, obj := range info.Uses {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			continue
		}
		_, isFunc := obj.(*types.Func)
		if pkg.Scope().Lookup(obj.Name()) == obj || isFunc { // package-level, or a method
			edge(fileOf(id.Pos()), fileOf(obj.Pos()))
		}
	}
	for id, obj := range info.Defs {
		fn, ok := obj.(*types.Func)
		if !ok {
			continue
		}
		recv := fn.Signature().Recv()
		if recv == nil {
			continue
		}
		t := recv.Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if named, ok := t.(*types.Named); ok && named.Obj().Pkg() == pkg {
			edge(fileOf(named.Obj().Pos()), fileOf(id.Pos()))
		}
	}
	return edges
}

// emptyImporter imports every path as an empty, complete package named
// after the path's last element.
type emptyImporter struct{}

func (emptyImporter) Import(path string) (*types.Package, error) {
	name := filepath.Base(path)
	if strings.HasPrefix(name, "v") && strings.Trim(name[1:], "0123456789") == "" {
		name = filepath.Base(filepath.Dir(path))
	}
	p := types.NewPackage(path, strings.NewReplacer("-", "_", ".", "_").Replace(name))
	p.MarkComplete()
	return p, nil
}

// closure returns the files start needs, directly or not, and start.
func closure(start []string, edges map[string]map[string]bool) map[string]bool {
	need := map[string]bool{}
	queue := slices.Clone(start)
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		if need[f] {
			continue
		}
		need[f] = true
		for g := range edges[f] {
			queue = append(queue, g)
		}
	}
	return need
}

// removeTests removes the _test.go files of one folder.
func removeTests(dir string) error {
	tests, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return err
	}
	for _, t := range tests {
		if err := os.Remove(t); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies the regular files and folders under src to dst, writable
// (the module cache's are read-only).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}
