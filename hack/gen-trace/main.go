// Command gen-trace writes a synthetic workload (internal/bench/workload) in the
// Azure trace's CSV format: the project's two synthetic traces, or a shape
// of the robustness family. The output is fixed by the seed, so the
// committed files can be regenerated and checked:
//
//	go run ./hack/gen-trace -workload=code -out=test/traces/synthetic-code-completion.csv
//	go run ./hack/gen-trace -workload=burst -out=test/traces/synthetic-burst.csv
//	go run ./hack/gen-trace -workload=lulls -out=_output/lulls.csv
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"

	"github.com/gpuscale/gpuscale/internal/bench/workload"
)

// DefaultSeed is the seed the committed traces use.
const DefaultSeed = 2026

func shapes() map[string]workload.Shape {
	m := map[string]workload.Shape{"code": workload.CodeCompletion(), "burst": workload.Burst()}
	for _, s := range workload.Family() {
		m[s.Name] = s
	}
	return m
}

func main() {
	name := flag.String("workload", "code", "Workload: code, burst, or a family shape (-list).")
	out := flag.String("out", "", "Output CSV (default: stdout).")
	seed := flag.Uint64("seed", DefaultSeed, "Random seed; the committed traces use the default.")
	list := flag.Bool("list", false, "List the workloads and exit.")
	flag.Parse()
	all := shapes()
	if *list {
		names := make([]string, 0, len(all))
		for n := range all {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Printf("%-16s %s\n", n, all[n].About)
		}
		return
	}
	s, ok := all[*name]
	if !ok {
		fmt.Fprintf(os.Stderr, "gen-trace: unknown workload %q (-list names them)\n", *name)
		os.Exit(2)
	}
	if err := write(*out, s, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "gen-trace:", err)
		os.Exit(1)
	}
}

func write(path string, s workload.Shape, seed uint64) error {
	reqs := s.Generate(seed)
	if path == "" {
		return workload.WriteCSV(os.Stdout, reqs)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := workload.WriteCSV(f, reqs); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
