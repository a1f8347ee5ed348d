// Command exporter is gpuscale's node agent: a DCGM-compatible GPU exporter
// with pod attribution, run as a DaemonSet on every GPU node.
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

	"github.com/gpuscale/gpuscale/internal/exporterapp"
	"github.com/gpuscale/gpuscale/pkg/buildinfo"
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
	o := exporterapp.NewOptions()
	fs := pflag.NewFlagSet("exporter", pflag.ContinueOnError)
	o.AddFlags(fs)
	showVersion := fs.Bool("version", false, "Print the version and exit.")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "exporter: %v\n", err)
		os.Exit(2)
	}
	if *showVersion {
		fmt.Println(buildinfo.Print("exporter"))
		return
	}
	o.Complete()
	if err := o.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "exporter: invalid flags:\n%v\n", err)
		os.Exit(2)
	}
	log, err := o.Log.Logger(os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "exporter: %v\n", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := exporterapp.Run(ctx, o, log, nil); err != nil {
		log.Error("exporter stopped", "err", err)
		os.Exit(1)
	}
}
