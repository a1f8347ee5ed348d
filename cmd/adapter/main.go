// Command adapter is gpuscale's metrics adapter: a Kubernetes custom and
// external metrics API server that serves GPU and LLM-inference signals to
// HorizontalPodAutoscalers. Its wiring is cmd/adapter/app.
package main

import (
	"errors"
	"log/slog"
	"os"

	"k8s.io/apiserver/pkg/server"

	"github.com/gpuscale/gpuscale/cmd/adapter/app"
)

func main() {
	if err := app.NewCommand().Execute(server.SetupSignalContext(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		slog.Error("adapter stopped", "err", err)
		if errors.Is(err, app.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
