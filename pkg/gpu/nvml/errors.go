//go:build linux && cgo

package nvml

import (
	"errors"
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Error is an NVML call that failed. It keeps the nvml.Return so that callers
// can tell a lost GPU (ERROR_GPU_IS_LOST) from other failures with errors.As,
// either on *Error or directly on gonvml.Return, which it unwraps to.
type Error struct {
	// Op names the call in words, for example "get power usage".
	Op     string
	Return gonvml.Return
}

// Error implements error.
func (e *Error) Error() string { return e.Op + ": " + e.Return.Error() }

// Unwrap returns the nvml.Return, which implements error itself.
func (e *Error) Unwrap() error { return e.Return }

// errSkip marks a field the device does not report. It never leaves this
// package: the field is simply left absent.
var errSkip = errors.New("field not reported")

// check turns an NVML return code into the package's return-code policy:
// nil on success, errSkip when the device does not report the value (the
// field must then be absent, never 0), and an *Error otherwise.
func check(op string, ret gonvml.Return) error {
	switch ret {
	case gonvml.SUCCESS:
		return nil
	case gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_NO_PERMISSION:
		// NO_PERMISSION is per call (some counters are root-only on some
		// drivers): the rest of the device is still readable.
		return errSkip
	default:
		return &Error{Op: op, Return: ret}
	}
}

// initError explains an nvml.Init failure. Most of them mean the exporter runs
// somewhere without a usable driver, so say what to check.
func initError(ret gonvml.Return) error {
	err := &Error{Op: "initialise NVML", Return: ret}
	switch ret {
	case gonvml.ERROR_LIBRARY_NOT_FOUND, gonvml.ERROR_DRIVER_NOT_LOADED, gonvml.ERROR_NO_PERMISSION:
		return fmt.Errorf("nvml: %w: is the NVIDIA driver installed and the device visible to this container? "+
			"(use --backend=sim for a simulated GPU)", err)
	case gonvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return fmt.Errorf("nvml: %w: the NVML library does not match the loaded kernel driver "+
			"(was the driver upgraded without a reboot?)", err)
	default:
		return fmt.Errorf("nvml: %w", err)
	}
}
