// Command exporter is gpuscale's node agent: a DCGM-compatible GPU exporter
// with pod attribution, run as a DaemonSet on every GPU node. Its wiring is
// cmd/exporter/app.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/gpuscale/gpuscale/cmd/exporter/app"
)

// gcPercent replaces Go's default GOGC of 100 unless GOGC is set. The
// exporter's live heap is a few MiB and each collection allocates about
// 1 MiB of garbage; at 100 the heap peaks at twice the live set, at 50 at
// 1.5 times, which keeps the node agent under its 30 MiB resident budget
// (docs/performance.md) for the cost of more, small, collections.
const gcPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := app.NewCommand().Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, pflag.ErrHelp):
	case errors.Is(err, app.ErrUsage):
		fmt.Fprintf(os.Stderr, "exporter: %v\n", err)
		stop()
		os.Exit(2)
	default:
		stop()
		os.Exit(1)
	}
}
