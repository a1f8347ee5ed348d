//go:build linux && cgo

package nvml

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// Backend reads GPUs through NVML. It implements gpu.Backend. Collect and
// Close must not be called concurrently with each other (the exporter's
// collection loop is the only caller); the XID goroutine is synchronised
// internally.
type Backend struct {
	lib           gonvml.Interface
	log           *slog.Logger
	driverVersion string
	// memV2 says whether the driver exports nvmlDeviceGetMemoryInfo_v2.
	memV2 bool
	// processes and profiling are Options'.
	processes, profiling bool
	gpus                 []*gpuDevice
	// xid is nil when XID events are off or NVML could not create an event set.
	xid *xidWatcher
	// quiet holds, by device ID, the fields already reported as not there
	// to read (fieldFailed).
	quiet map[string]uint64
	// fabricInfo reads a GPU's fabric health; nil when the driver lacks
	// the call.
	fabricInfo func(gonvml.Device) (gonvml.GpuFabricInfo_v3, gonvml.Return)
	now        func() time.Time

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ gpu.Backend = (*Backend)(nil)

// errClosed is returned by Collect after Close.
var errClosed = errors.New("nvml: backend is closed")

// New initialises NVML through lib (gonvml.New() in production, a mock in
// tests), enumerates the GPUs and, if opts.XIDEvents is set, starts watching
// XID events. It fails with an explanatory error when NVML cannot be
// initialised, typically because no driver is present.
func New(lib gonvml.Interface, opts Options) (*Backend, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	// go-nvml reports a missing libnvidia-ml.so.1 as ERROR_LIBRARY_NOT_FOUND
	// from Init rather than failing to load, so this is the one place where
	// "no driver" shows up.
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		return nil, initError(ret)
	}
	b := &Backend{lib: lib, log: log.With("backend", "nvml"), processes: opts.Processes, profiling: opts.Profiling, now: time.Now}
	if err := b.setup(opts); err != nil {
		if b.xid != nil {
			b.xid.close()
		}
		lib.Shutdown()
		return nil, err
	}
	return b, nil
}

// setup reads what does not change while the driver stays loaded: the
// driver version, the available symbols and the GPUs.
func (b *Backend) setup(opts Options) error {
	version, ret := b.lib.SystemGetDriverVersion()
	if ret == gonvml.SUCCESS {
		b.driverVersion = version
	} else {
		// Only a label value: not worth refusing to start over.
		b.log.Warn("cannot read the driver version", "err", ret.Error())
	}
	// Calling a symbol the driver lacks would abort the process (go-nvml
	// binds lazily), so probe before using the v2 memory call.
	b.memV2 = hasSymbol(b.lib, "nvmlDeviceGetMemoryInfo_v2")
	if hasSymbol(b.lib, "nvmlDeviceGetGpuFabricInfoV") {
		b.fabricInfo = fabricInfo
	}

	count, ret := b.lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return fmt.Errorf("nvml: %w", &Error{Op: "get device count", Return: ret})
	}
	if opts.XIDEvents {
		b.xid = newXIDWatcher(b.lib, b.log)
	}
	for i := range count {
		g := &gpuDevice{index: i, dev: gpu.Device{Index: i}}
		b.gpus = append(b.gpus, g)
		// A GPU that cannot be identified now (lost at boot, say) is kept
		// and retried by Collect, which reports it unhealthy meanwhile:
		// one bad GPU must not take the node's other GPUs off the metrics.
		if err := b.identify(g); err != nil {
			b.log.Warn("cannot identify GPU; will retry", "gpu", i, "err", err)
		}
	}
	if b.xid != nil {
		b.xid.start()
	}
	b.log.Info("NVML initialised", "driver_version", b.driverVersion, "gpus", count,
		"xid_events", b.xid != nil)
	return nil
}

// hasSymbol reports whether the loaded NVML library exports name.
func hasSymbol(lib gonvml.Interface, name string) bool {
	ext := lib.Extensions()
	if ext == nil {
		return true
	}
	return ext.LookupSymbol(name) == nil
}

// Kind returns gpu.KindNVML.
func (b *Backend) Kind() gpu.Kind { return gpu.KindNVML }

// DriverVersion returns the driver version read at New, "" if unreadable.
func (b *Backend) DriverVersion() string { return b.driverVersion }

// Collect reads every GPU and its MIG instances, in index order with each
// GPU's MIG instances (by GPU instance ID) right after it. A GPU that fails
// is reported in its Reading's Err and retried on the next Collect.
func (b *Backend) Collect(ctx context.Context) ([]gpu.Reading, error) {
	if b.closed.Load() {
		return nil, errClosed
	}
	readings := make([]gpu.Reading, 0, len(b.gpus))
	for _, g := range b.gpus {
		// NVML calls cannot be cancelled, but a slow or hung GPU should not
		// make the caller wait for all the others too.
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("nvml: collect: %w", err)
		}
		readings = append(readings, b.collectGPU(g)...)
	}
	return readings, nil
}

// Close stops the XID goroutine, frees its event set and shuts NVML down.
// It is safe to call more than once.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		if b.xid != nil {
			b.xid.close()
		}
		for _, g := range b.gpus {
			g.freeGPM()
		}
		if ret := b.lib.Shutdown(); ret != gonvml.SUCCESS {
			b.closeErr = fmt.Errorf("nvml: %w", &Error{Op: "shut down NVML", Return: ret})
		}
	})
	return b.closeErr
}
