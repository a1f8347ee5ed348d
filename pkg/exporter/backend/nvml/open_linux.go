//go:build linux && cgo

package nvml

import (
	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// Open reads the GPUs through the driver's NVML library (go-nvml's cgo
// bindings, which load libnvidia-ml.so.1 at run time).
func Open(opts Options) (gpu.Backend, error) {
	b, err := New(gonvml.New(), opts)
	if err != nil {
		return nil, err
	}
	return b, nil
}
