// Package deps checks the direction of the module's imports: product
// packages never depend on binaries, test harnesses or the simulator, so
// that what ships is what the tests exercise and nothing more.
package deps

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/gpuscale/gpuscale/"

// simulator are the packages that model GPUs and inference servers for
// tests, benchmarks and the demo: the simulated inference server and the
// exporter's simulated GPU backend. The backend is a product feature
// (--backend=sim), but only the exporter's composition root picks it:
// no other product package may depend on either.
var simulator = []string{"pkg/inferencesim", "pkg/exporter/backend/sim"}

// pipelines are the three pipelines' folders under pkg/. Everything else
// under pkg/ is the contract (pkg/provider) or the vocabulary the
// pipelines share (signals, GPU fields, DCGM names, pods), beneath them.
var pipelines = []string{"pkg/exporter", "pkg/adapter", "pkg/scaledown"}

// pipelineOf returns the pipeline folder p lies in, or "" for none.
func pipelineOf(p string) string {
	for _, pl := range pipelines {
		if under(p, pl) {
			return pl
		}
	}
	return ""
}

// knownExceptions are violations tolerated while a fix is under way; each
// is "importer -> imported". The check fails on any other violation, and
// on an exception that no longer occurs, so this list only ever shrinks.
var knownExceptions = []string{
	// The simulated world runs whole exporters in-process (one per
	// simulated node) through the exporter's wiring, cmd/exporter/app.Run.
	// The fix is a pkg/ package that composes the exporter from a config,
	// which both the binary and the simulated world call.
	"internal/harness/simworld -> cmd/exporter/app",
}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// rule is one constraint on the packages whose path starts with from.
type rule struct {
	name string
	// applies reports whether the rule constrains package p.
	applies func(p string) bool
	// forbidden reports whether p may not depend on dep.
	forbidden func(p, dep string) bool
	// direct rules look at imports only; the others at every dependency.
	direct bool
}

func under(p string, prefixes ...string) bool {
	for _, pre := range prefixes {
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

var rules = []rule{
	{
		name:    "a product package (pkg/) depends on a binary, a test harness or a script",
		applies: func(p string) bool { return under(p, "pkg") },
		forbidden: func(_, dep string) bool {
			return under(dep, "cmd", "internal", "test", "hack")
		},
	},
	{
		name:    "a product package depends on the simulator",
		applies: func(p string) bool { return under(p, "pkg") && !under(p, simulator...) },
		forbidden: func(_, dep string) bool {
			return under(dep, simulator...)
		},
	},
	{
		name:    "the adapter depends on the simulator or a test harness",
		applies: func(p string) bool { return under(p, "cmd/adapter") },
		forbidden: func(_, dep string) bool {
			return under(dep, simulator...) || under(dep, "internal", "test", "hack")
		},
	},
	{
		name:    "the exporter depends on the inference simulator or a test harness",
		applies: func(p string) bool { return under(p, "cmd/exporter") },
		forbidden: func(_, dep string) bool {
			return under(dep, "pkg/inferencesim") || under(dep, "internal", "test", "hack")
		},
	},
	{
		// The tree is the pipelines: the exporter, the adapter and
		// scale-down each stand on the contract and the shared
		// vocabulary, never on one another.
		name:    "one pipeline depends on another",
		applies: func(p string) bool { return under(p, pipelines...) },
		forbidden: func(p, dep string) bool {
			return under(dep, pipelines...) && !under(dep, pipelineOf(p))
		},
	},
	{
		// The contract (pkg/provider) and the vocabulary beneath it are
		// what the pipelines share; a pipeline inside them would pull
		// that pipeline into every binary.
		name:    "the contract or the shared vocabulary depends on a pipeline",
		applies: func(p string) bool { return under(p, "pkg") && pipelineOf(p) == "" },
		forbidden: func(_, dep string) bool {
			return under(dep, pipelines...)
		},
	},
	{
		// The seam that lets scale-down run with --source=prometheus.
		name:    "scale-down imports the store rather than reading provider.Values",
		applies: func(p string) bool { return under(p, "pkg/scaledown") },
		direct:  true,
		forbidden: func(_, dep string) bool {
			return under(dep, "pkg/adapter/store", "pkg/adapter/storesource", "pkg/adapter/promsource")
		},
	},
	{
		// The contract is signals, not storage: the metrics API and the
		// inference parser speak pkg/signal, which both sources share, so
		// neither ties the PromQL source to the store's samples.
		name:    "the metrics API or the inference parser depends on the store",
		applies: func(p string) bool { return under(p, "pkg/provider", "pkg/adapter/inference") },
		forbidden: func(_, dep string) bool {
			return under(dep, "pkg/adapter/store")
		},
	},
	{
		// A binary's packages are its own: one binary's flags or wiring
		// reused elsewhere would tie that code to it.
		name:    "a package outside cmd/<binary> imports that binary's packages",
		applies: func(string) bool { return true },
		direct:  true,
		forbidden: func(p, dep string) bool {
			if !under(dep, "cmd") {
				return false
			}
			bin := strings.Join(strings.SplitN(dep, "/", 3)[:2], "/")
			return !under(p, bin)
		},
	},
}

// listPackages runs go list over the module's packages (tests excluded:
// the rules are about what ships).
func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; the module has dozens", len(pkgs))
	}
	return pkgs
}

// violations applies the rules to the packages, with paths relative to the
// module, as "importer -> imported: rule".
func violations(pkgs []pkg) map[string]string {
	out := map[string]string{}
	for _, p := range pkgs {
		from, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok {
			continue
		}
		for _, r := range rules {
			if !r.applies(from) {
				continue
			}
			deps := p.Deps
			if r.direct {
				deps = p.Imports
			}
			for _, d := range deps {
				if dep, ok := strings.CutPrefix(d, module); ok && r.forbidden(from, dep) {
					out[fmt.Sprintf("%s -> %s", from, dep)] = r.name
				}
			}
		}
	}
	return out
}

func TestDependencyDirection(t *testing.T) {
	found := violations(listPackages(t))
	for _, v := range slices.Sorted(maps.Keys(found)) {
		if !slices.Contains(knownExceptions, v) {
			t.Errorf("%s: %s", v, found[v])
		}
	}
	for _, e := range knownExceptions {
		if _, ok := found[e]; !ok {
			t.Errorf("known exception %q no longer occurs: remove it from knownExceptions", e)
		}
	}
}

// TestRules shows each rule firing, so that a check that passes is not a
// check that cannot fail.
func TestRules(t *testing.T) {
	m := func(p string) string { return module + p }
	tests := []struct {
		name string
		pkg  pkg
		want []string
	}{
		{"product on product", pkg{ImportPath: m("pkg/adapter/storesource"), Imports: []string{m("pkg/adapter/store")}, Deps: []string{m("pkg/adapter/store"), "fmt"}}, nil},
		{"product on harness, transitively", pkg{ImportPath: m("pkg/provider"), Deps: []string{m("internal/harness/simworld")}},
			[]string{"pkg/provider -> internal/harness/simworld"}},
		{"product on a binary", pkg{ImportPath: m("pkg/adapter/gather"), Imports: []string{m("cmd/adapter/app")}, Deps: []string{m("cmd/adapter/app")}},
			[]string{"pkg/adapter/gather -> cmd/adapter/app"}},
		{"product on the simulator", pkg{ImportPath: m("pkg/exporter"), Deps: []string{m("pkg/inferencesim")}},
			[]string{"pkg/exporter -> pkg/inferencesim"}},
		{"simulator on its own parts", pkg{ImportPath: m("pkg/exporter/backend/sim"), Deps: []string{m("pkg/gpu")}}, nil},
		{"adapter on the simulator", pkg{ImportPath: m("cmd/adapter/app"), Deps: []string{m("pkg/exporter/backend/sim")}},
			[]string{"cmd/adapter/app -> pkg/exporter/backend/sim"}},
		{"exporter on its sim backend", pkg{ImportPath: m("cmd/exporter/app"), Imports: []string{m("pkg/exporter/backend/sim")}, Deps: []string{m("pkg/exporter/backend/sim")}}, nil},
		{"exporter on the inference simulator", pkg{ImportPath: m("cmd/exporter/app"), Deps: []string{m("pkg/inferencesim")}},
			[]string{"cmd/exporter/app -> pkg/inferencesim"}},
		{"exporter on a test harness", pkg{ImportPath: m("cmd/exporter/app"), Deps: []string{m("internal/harness/testenv")}},
			[]string{"cmd/exporter/app -> internal/harness/testenv"}},
		{"exporter binary on its own packages", pkg{ImportPath: m("cmd/exporter"), Imports: []string{m("cmd/exporter/app")}, Deps: []string{m("cmd/exporter/app")}}, nil},
		{"adapter binary on its own packages", pkg{ImportPath: m("cmd/adapter"), Imports: []string{m("cmd/adapter/app")}, Deps: []string{m("cmd/adapter/app")}}, nil},
		{"one binary on another's packages", pkg{ImportPath: m("cmd/adapter/app"), Imports: []string{m("cmd/exporter/app")}},
			[]string{"cmd/adapter/app -> cmd/exporter/app"}},
		{"harness on a binary's packages", pkg{ImportPath: m("internal/harness/devenv"), Imports: []string{m("cmd/adapter/app")}},
			[]string{"internal/harness/devenv -> cmd/adapter/app"}},
		{"harness on the exporter's packages", pkg{ImportPath: m("internal/harness/simworld"), Imports: []string{m("cmd/exporter/app")}},
			[]string{"internal/harness/simworld -> cmd/exporter/app"}},
		{"harness on a binary's packages, only transitively", pkg{ImportPath: m("internal/harness/devenv"), Deps: []string{m("cmd/adapter/app")}}, nil},
		{"scale-down importing the store", pkg{ImportPath: m("pkg/scaledown"), Imports: []string{m("pkg/adapter/store")}, Deps: []string{m("pkg/adapter/store")}},
			[]string{"pkg/scaledown -> pkg/adapter/store"}},
		{"scale-down on the vocabulary through provider", pkg{ImportPath: m("pkg/scaledown"), Imports: []string{m("pkg/provider")}, Deps: []string{m("pkg/provider"), m("pkg/signal")}}, nil},
		{"scale-down on the store through provider", pkg{ImportPath: m("pkg/scaledown"), Imports: []string{m("pkg/provider")}, Deps: []string{m("pkg/provider"), m("pkg/adapter/store")}},
			[]string{"pkg/scaledown -> pkg/adapter/store"}},
		{"a pipeline on its own stages", pkg{ImportPath: m("pkg/adapter/gather"), Imports: []string{m("pkg/adapter/store")}, Deps: []string{m("pkg/adapter/store"), m("pkg/signal")}}, nil},
		{"one pipeline on another", pkg{ImportPath: m("pkg/adapter/gather"), Imports: []string{m("pkg/exporter/processpods")}, Deps: []string{m("pkg/exporter/processpods")}},
			[]string{"pkg/adapter/gather -> pkg/exporter/processpods"}},
		{"the vocabulary on a pipeline", pkg{ImportPath: m("pkg/signal/capacity"), Deps: []string{m("pkg/adapter/store")}},
			[]string{"pkg/signal/capacity -> pkg/adapter/store"}},
		{"the contract on a pipeline, transitively", pkg{ImportPath: m("pkg/provider"), Deps: []string{m("pkg/signal"), m("pkg/exporter")}},
			[]string{"pkg/provider -> pkg/exporter"}},
		{"the metrics API on the store, transitively", pkg{ImportPath: m("pkg/provider"), Deps: []string{m("pkg/signal"), m("pkg/adapter/store")}},
			[]string{"pkg/provider -> pkg/adapter/store"}},
		{"the inference parser on the store", pkg{ImportPath: m("pkg/adapter/inference"), Imports: []string{m("pkg/adapter/store")}, Deps: []string{m("pkg/adapter/store")}},
			[]string{"pkg/adapter/inference -> pkg/adapter/store"}},
		{"the metrics API on the signals", pkg{ImportPath: m("pkg/provider"), Imports: []string{m("pkg/signal")}, Deps: []string{m("pkg/signal"), m("pkg/signal/histogram")}}, nil},
		{"other modules", pkg{ImportPath: "k8s.io/client-go/kubernetes", Deps: []string{m("cmd/adapter/app")}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := slices.Sorted(maps.Keys(violations([]pkg{tt.pkg})))
			if !slices.Equal(got, tt.want) {
				t.Errorf("violations = %q, want %q", got, tt.want)
			}
		})
	}
}
