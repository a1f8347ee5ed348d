//go:build !(linux && cgo)

package nvml

import (
	"errors"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// Open fails: NVML's driver library exists on Linux only, and go-nvml binds
// it with cgo. --backend=sim runs anywhere.
func Open(Options) (gpu.Backend, error) {
	return nil, errors.New("--backend=nvml needs an exporter built for Linux with cgo; --backend=sim runs anywhere")
}
