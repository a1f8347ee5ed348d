// Command keda-trim copies KEDA's module source with its scaler registry cut
// down to the trigger types named, for hack/keda-build.sh.
//
// KEDA compiles every scaler into one package (pkg/scalers), so its
// operator links the client of every system it can scale on: 3,712
// packages, about 1,700 of them (Elasticsearch's typed API alone 961) for
// scalers the end-to-end suite never configures. The copy keeps KEDA's
// source unchanged except for two things:
//
//   - buildScaler's switch (pkg/scaling/scalers_builder.go) keeps only the
//     cases of the named trigger types, and its default case, which
//     rejects any other type with KEDA's own "no scaler found" error;
//   - pkg/scalers keeps only the *_scaler.go files that declare a
//     constructor a kept case calls, and those that declare a name or a
//     method the kept files need (scalers share constants across files);
//     neither package keeps its tests.
//
// Everything else (the operator, the metrics API server, the scale
// handler, the external scalers' gRPC client) is KEDA's code as released.
//
//	go run ./hack/keda-trim -src="$(go list -m -f '{{.Dir}}' github.com/kedacore/keda/v2)" \
//	  -out=/tmp/keda -triggers=external,external-push,cpu,memory
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	src := flag.String("src", "", "KEDA's module folder (go list -m -f '{{.Dir}}' github.com/kedacore/keda/v2)")
	out := flag.String("out", "", "folder to write the trimmed copy to; must not exist")
	triggers := flag.String("triggers", "", "comma-separated trigger types to keep (KEDA's ScaledObject trigger type names)")
	flag.Parse()
	if *src == "" || *out == "" || *triggers == "" {
		fmt.Fprintln(os.Stderr, "keda-trim: -src, -out and -triggers are required")
		os.Exit(2)
	}
	kept, err := Trim(*src, *out, strings.Split(*triggers, ","))
	if err != nil {
		fmt.Fprintf(os.Stderr, "keda-trim: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("keda-trim: kept %d trigger types, %d scaler files\n", len(kept.Triggers), len(kept.Files))
}
