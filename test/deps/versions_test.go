package deps

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// toolModules are the modules whose binaries CI builds beside the main
// module's tests (hack/tools-build.sh, hack/keda-build.sh), each naming
// what it builds in its tools.go.
var toolModules = []string{"hack/tools", "hack/tools/keda"}

// builtModules returns, for the module in dir (relative to the repository
// root), the version of every module that provides a package its build
// compiles: pkgs and their dependencies, tests included.
func builtModules(t *testing.T, dir string, pkgs ...string) map[string]string {
	t.Helper()
	args := append([]string{"list", "-deps", "-test", "-f",
		"{{with .Module}}{{.Path}} {{.Version}}{{with .Replace}} {{.Version}}{{end}}{{end}}"}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join("../..", dir)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list in %s: %v\n%s", dir, err, msg)
	}
	mods := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 {
			mods[f[0]] = f[len(f)-1] // a replacement's version wins
		}
	}
	return mods
}

// toolPackages returns the packages a tools module's tools.go imports.
func toolPackages(t *testing.T, dir string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("../..", dir, "tools.go"), nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatalf("%s/tools.go imports nothing", dir)
	}
	return pkgs
}

// TestSharedLibrariesAtOneVersion checks that a library compiled both for
// the main module's tests and for a tool CI builds is at one version in
// both: the Go build cache then compiles it once (hack/lib/goenv.sh), which
// is what keeps a cold CI run inside its budget. Raise the lower side with
// go get (the main module's version where it is the higher).
func TestSharedLibrariesAtOneVersion(t *testing.T) {
	builds := map[string]map[string]string{".": builtModules(t, ".", "./...")}
	for _, dir := range toolModules {
		builds[dir] = builtModules(t, dir, toolPackages(t, dir)...)
	}
	if len(builds["."]) < 50 || len(builds["hack/tools"]) < 100 || len(builds["hack/tools/keda"]) < 300 {
		t.Fatalf("too few modules listed: main %d, tools %d, keda %d", len(builds["."]), len(builds["hack/tools"]), len(builds["hack/tools/keda"]))
	}
	dirs := []string{".", "hack/tools", "hack/tools/keda"}
	var mismatches []string
	for i, a := range dirs {
		for _, b := range dirs[i+1:] {
			for mod, va := range builds[a] {
				if vb, ok := builds[b][mod]; ok && va != vb {
					mismatches = append(mismatches, fmt.Sprintf("%s: %s in %s, %s in %s", mod, va, a, vb, b))
				}
			}
		}
	}
	slices.Sort(mismatches)
	if len(mismatches) > 0 {
		t.Errorf("libraries both builds compile at different versions (each is then compiled twice):\n%s", strings.Join(mismatches, "\n"))
	}
}
