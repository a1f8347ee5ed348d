//go:build !(linux && cgo)

package app

import (
	"errors"
	"log/slog"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// newNVMLBackend fails: NVML's driver library exists on Linux only, and
// go-nvml binds it with cgo. --backend=sim runs anywhere.
func newNVMLBackend(*Options, *slog.Logger) (gpu.Backend, error) {
	return nil, errors.New("--backend=nvml needs an exporter built for Linux with cgo; --backend=sim runs anywhere")
}
