// Command adapter is gpuscale's metrics adapter: a Kubernetes custom and
// external metrics API server that serves GPU and LLM-inference signals to
// HorizontalPodAutoscalers. Its wiring is cmd/adapter/app.
package main

import (
	"errors"
	"log/slog"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/server"

	"github.com/gpuscale/gpuscale/cmd/adapter/app"
)

func main() {
	err := app.NewCommand().Execute(server.SetupSignalContext(), os.Args[1:], os.Stdout, os.Stderr)
	if err != nil && !errors.Is(err, pflag.ErrHelp) {
		slog.Error("adapter stopped", "err", err)
		if errors.Is(err, app.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
