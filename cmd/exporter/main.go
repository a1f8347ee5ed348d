// Command exporter is gpuscale's node agent: a DCGM-compatible GPU exporter
// with pod attribution, run as a DaemonSet on every GPU node.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpuscale/gpuscale/internal/exporterapp"
)

func main() {
	o := exporterapp.NewOptions()
	fs := flag.NewFlagSet("exporter", flag.ExitOnError)
	o.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])
	o.Complete()
	if err := o.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "exporter: invalid flags:\n%v\n", err)
		os.Exit(2)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.LogLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "exporter: --log.level: %v\n", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := exporterapp.Run(ctx, o, log, nil); err != nil {
		log.Error("exporter stopped", "err", err)
		os.Exit(1)
	}
}
