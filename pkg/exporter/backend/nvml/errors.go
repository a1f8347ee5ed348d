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

// quietReturn reports whether ret says a field is not there to read (the
// GPU or driver lacks it, or the exporter may not read it) rather than
// that reading it failed.
func quietReturn(ret gonvml.Return) bool {
	switch ret {
	case gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_NO_PERMISSION, gonvml.ERROR_FUNCTION_NOT_FOUND:
		return true
	}
	return false
}

// deviceGone reports whether ret says the GPU itself, or the driver under
// every GPU, is gone: then no field of the GPU can be read and the device
// is reported unhealthy. Every other return fails only the call's fields.
func deviceGone(ret gonvml.Return) bool {
	switch ret {
	case gonvml.ERROR_GPU_IS_LOST, gonvml.ERROR_GPU_NOT_FOUND, gonvml.ERROR_UNINITIALIZED,
		gonvml.ERROR_DRIVER_NOT_LOADED, gonvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return true
	}
	return false
}

// Returns are the return codes nvml.h documents, SUCCESS aside: the values
// codeName names.
var Returns = []gonvml.Return{
	gonvml.ERROR_UNINITIALIZED, gonvml.ERROR_INVALID_ARGUMENT, gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_NO_PERMISSION,
	gonvml.ERROR_ALREADY_INITIALIZED, gonvml.ERROR_NOT_FOUND, gonvml.ERROR_INSUFFICIENT_SIZE, gonvml.ERROR_INSUFFICIENT_POWER,
	gonvml.ERROR_DRIVER_NOT_LOADED, gonvml.ERROR_TIMEOUT, gonvml.ERROR_IRQ_ISSUE, gonvml.ERROR_LIBRARY_NOT_FOUND,
	gonvml.ERROR_FUNCTION_NOT_FOUND, gonvml.ERROR_CORRUPTED_INFOROM, gonvml.ERROR_GPU_IS_LOST, gonvml.ERROR_RESET_REQUIRED,
	gonvml.ERROR_OPERATING_SYSTEM, gonvml.ERROR_LIB_RM_VERSION_MISMATCH, gonvml.ERROR_IN_USE, gonvml.ERROR_MEMORY,
	gonvml.ERROR_NO_DATA, gonvml.ERROR_VGPU_ECC_NOT_SUPPORTED, gonvml.ERROR_INSUFFICIENT_RESOURCES,
	gonvml.ERROR_FREQ_NOT_SUPPORTED, gonvml.ERROR_ARGUMENT_VERSION_MISMATCH, gonvml.ERROR_DEPRECATED,
	gonvml.ERROR_NOT_READY, gonvml.ERROR_GPU_NOT_FOUND, gonvml.ERROR_INVALID_STATE, gonvml.ERROR_RESET_TYPE_NOT_SUPPORTED,
	gonvml.ERROR_UNKNOWN,
}

// returnNames are the nvml.h names of Returns. go-nvml's Return.Error
// answers the loaded driver's wording, which changes between drivers; the
// code label must not.
var returnNames = [...]string{
	"ERROR_UNINITIALIZED", "ERROR_INVALID_ARGUMENT", "ERROR_NOT_SUPPORTED", "ERROR_NO_PERMISSION",
	"ERROR_ALREADY_INITIALIZED", "ERROR_NOT_FOUND", "ERROR_INSUFFICIENT_SIZE", "ERROR_INSUFFICIENT_POWER",
	"ERROR_DRIVER_NOT_LOADED", "ERROR_TIMEOUT", "ERROR_IRQ_ISSUE", "ERROR_LIBRARY_NOT_FOUND",
	"ERROR_FUNCTION_NOT_FOUND", "ERROR_CORRUPTED_INFOROM", "ERROR_GPU_IS_LOST", "ERROR_RESET_REQUIRED",
	"ERROR_OPERATING_SYSTEM", "ERROR_LIB_RM_VERSION_MISMATCH", "ERROR_IN_USE", "ERROR_MEMORY",
	"ERROR_NO_DATA", "ERROR_VGPU_ECC_NOT_SUPPORTED", "ERROR_INSUFFICIENT_RESOURCES",
	"ERROR_FREQ_NOT_SUPPORTED", "ERROR_ARGUMENT_VERSION_MISMATCH", "ERROR_DEPRECATED",
	"ERROR_NOT_READY", "ERROR_GPU_NOT_FOUND", "ERROR_INVALID_STATE", "ERROR_RESET_TYPE_NOT_SUPPORTED",
	"ERROR_UNKNOWN",
}

// codeName names a return code for the field-error count's code label: a
// closed set, whatever a driver returns.
func codeName(ret gonvml.Return) string {
	for i, r := range Returns {
		if r == ret {
			return returnNames[i]
		}
	}
	return "ERROR_OTHER"
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
