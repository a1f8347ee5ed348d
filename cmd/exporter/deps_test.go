package main

import (
	"os/exec"
	"strings"
	"testing"
)

// goList runs go list with args and returns its output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, out)
	}
	return strings.Fields(string(out))
}

// TestNoMsgpack guards the nomsgpack build tag every exporter build uses
// (Makefile, hack/exporter-rss.sh, the image): without it gin links
// ugorji's msgpack codec, 6 MiB more resident memory per exporter. It
// fails if a dependency starts pulling the codec in by another route.
func TestNoMsgpack(t *testing.T) {
	for _, dep := range goList(t, "-deps", "-tags", "nomsgpack", ".") {
		if strings.HasPrefix(dep, "github.com/ugorji/go/codec") {
			t.Fatalf("the exporter built with -tags nomsgpack links %s", dep)
		}
	}
}

// TestImportsPointOneWay checks that no product package (pkg/...) imports
// a command or the simulator: the simulator is wired in by commands and
// test worlds only.
func TestImportsPointOneWay(t *testing.T) {
	const mod = "github.com/gpuscale/gpuscale/"
	for _, line := range goList(t, "-f", `{{.ImportPath}}:{{join .Imports ","}}`, mod+"pkg/...") {
		pkg, imports, _ := strings.Cut(line, ":")
		if strings.HasPrefix(pkg, mod+"pkg/exporter/backend/sim") {
			continue
		}
		for _, imp := range strings.Split(imports, ",") {
			if strings.HasPrefix(imp, mod+"cmd/") || strings.HasPrefix(imp, mod+"internal/") ||
				imp == mod+"pkg/exporter/backend/sim" || strings.HasPrefix(imp, mod+"pkg/exporter/backend/sim/") {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
}
