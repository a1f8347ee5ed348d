//go:build linux && cgo

package app

import (
	"log/slog"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/exporter/backend/nvml"
	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// newNVMLBackend reads the GPUs through NVML (go-nvml's cgo bindings).
func newNVMLBackend(o *Options, log *slog.Logger) (gpu.Backend, error) {
	b, err := nvml.New(gonvml.New(), nvml.Options{Logger: log.With("component", "nvml"), XIDEvents: true,
		Processes: o.ContainerRuntimeSocket != "", Profiling: o.Profiling})
	if err != nil {
		return nil, err
	}
	return b, nil
}
