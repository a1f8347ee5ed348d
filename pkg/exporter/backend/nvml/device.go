//go:build linux && cgo

package nvml

import (
	"errors"
	"fmt"
	"strings"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// gpuDevice is one whole GPU, enumerated at New. Only New and Collect touch
// it, never concurrently.
type gpuDevice struct {
	index  int
	handle gonvml.Device
	// dev is the GPU's identity; only Index is known until identified.
	dev        gpu.Device
	identified bool
	// xidWatched says the GPU is registered for XID events.
	xidWatched bool
	// migs is the MIG layout seen by the last successful enumeration, used
	// to report the instances unhealthy when their GPU cannot be read.
	migs []gpu.Device
	// lastProcSample is the newest process utilization sample seen.
	lastProcSample uint64
	// gpmSupported says the GPU answers GPM (Hopper and later); gpm and
	// migGPM (by GPU instance ID) hold its samples.
	gpmSupported bool
	gpm          gpmPair
	migGPM       map[int]*gpmPair
	// nvlinkKiB is the NVLink data counter (TX plus RX, KiB) read at
	// nvlinkAt, zero until read: the throughput is their difference.
	nvlinkKiB float64
	nvlinkAt  time.Time
}

func (g *gpuDevice) String() string {
	if g.dev.UUID == "" {
		return fmt.Sprintf("gpu %d", g.index)
	}
	return fmt.Sprintf("gpu %d (%s)", g.index, g.dev.UUID)
}

// identify gets the GPU's handle and identity and registers it for XID
// events. It is retried by Collect until it succeeds.
func (b *Backend) identify(g *gpuDevice) error {
	h, ret := b.lib.DeviceGetHandleByIndex(g.index)
	if ret != gonvml.SUCCESS {
		return fmt.Errorf("%s: %w", g, &Error{Op: "get device handle", Return: ret})
	}
	uuid, ret := h.GetUUID()
	if ret != gonvml.SUCCESS {
		return fmt.Errorf("%s: %w", g, &Error{Op: "get UUID", Return: ret})
	}
	dev := gpu.Device{Index: g.index, UUID: uuid, Minor: g.index}
	name, ret := h.GetName()
	if err := check("get name", ret); err == nil {
		dev.ModelName = name
	} else if !errors.Is(err, errSkip) {
		return fmt.Errorf("%s: %w", g, err)
	}
	pci, ret := h.GetPciInfo()
	if err := check("get PCI info", ret); err == nil {
		dev.PCIBusID = pciBusID(pci)
	} else if !errors.Is(err, errSkip) {
		return fmt.Errorf("%s: %w", g, err)
	}
	// Minor numbers do not exist on every platform (WSL); the index is the
	// best stand-in for the "device" label there.
	minor, ret := h.GetMinorNumber()
	if err := check("get minor number", ret); err == nil {
		dev.Minor = minor
	} else if !errors.Is(err, errSkip) {
		return fmt.Errorf("%s: %w", g, err)
	}
	g.handle, g.dev, g.identified = h, dev, true
	if b.profiling {
		sup, ret := h.GpmQueryDeviceSupport()
		g.gpmSupported = ret == gonvml.SUCCESS && sup.IsSupportedDevice != 0
	}
	if b.xid != nil {
		g.xidWatched = b.xid.register(h, uuid)
	}
	return nil
}

// pciBusID formats the bus ID the way dcgm-exporter labels it,
// "00000000:3B:00.0": the 32-character BusId when the driver fills it, else
// the legacy 16-character one with its domain widened to 8 digits.
func pciBusID(pci gonvml.PciInfo) string {
	if id := cString(pci.BusId[:]); id != "" {
		return strings.ToUpper(id)
	}
	id := cString(pci.BusIdLegacy[:])
	if domain, rest, ok := strings.Cut(id, ":"); ok && len(domain) < 8 {
		id = strings.Repeat("0", 8-len(domain)) + domain + ":" + rest
	}
	return strings.ToUpper(id)
}

// cString converts a NUL-terminated C char array.
func cString(chars []int8) string {
	var sb strings.Builder
	for _, c := range chars {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// collectGPU reads one GPU and its MIG instances. It never panics: a panic in
// NVML or in a mock becomes the GPU's Err, so the other GPUs are still read.
func (b *Backend) collectGPU(g *gpuDevice) (out []gpu.Reading) {
	defer func() {
		if p := recover(); p != nil {
			out = b.failGPU(g, fmt.Errorf("%s: panic while reading: %v", g, p))
		}
	}()
	if !g.identified {
		if err := b.identify(g); err != nil {
			return b.failGPU(g, err)
		}
		b.log.Info("GPU identified", "gpu", g.index, "uuid", g.dev.UUID)
	}
	r := gpu.Reading{Device: g.dev}
	if err := b.readFields(g, g.handle, &r, gpuCalls, true); err != nil {
		return b.failGPU(g, fmt.Errorf("%s: %w", g, err))
	}
	b.addXIDs(g, &r, noInstance)
	migs, err := b.collectMIG(g)
	if err != nil {
		return b.failGPU(g, fmt.Errorf("%s: %w", g, err))
	}
	if g.gpmSupported {
		b.readGPM(&g.gpm, g.handle.GpmSampleGet, &r)
		for i := range migs {
			b.readMIGGPM(g, &migs[i])
		}
	}
	// A MIG instance's processes are its own pods'; shares are for GPUs
	// that pods share by time-slicing or MPS.
	if b.processes && len(migs) == 0 {
		r.Processes = b.readProcesses(g)
	}
	return append([]gpu.Reading{r}, migs...)
}

// readMIGGPM reads the profiling fields of one MIG instance through its
// parent's GPM, by GPU instance.
func (b *Backend) readMIGGPM(g *gpuDevice, r *gpu.Reading) {
	if r.Err != nil || r.Device.MIG == nil {
		return
	}
	gi := r.Device.MIG.GPUInstanceID
	if g.migGPM == nil {
		g.migGPM = map[int]*gpmPair{}
	}
	p := g.migGPM[gi]
	if p == nil {
		p = &gpmPair{}
		g.migGPM[gi] = p
	}
	b.readGPM(p, func(s gonvml.GpmSample) gonvml.Return { return g.handle.GpmMigSampleGet(gi, s) }, r)
}

// freeGPM releases the GPU's GPM samples.
func (g *gpuDevice) freeGPM() {
	freeGPM(&g.gpm)
	for _, p := range g.migGPM {
		freeGPM(p)
	}
}

// failGPU reports a GPU, and the MIG instances it last had, unhealthy with
// err: a lost GPU takes its instances with it, and they should show as
// unhealthy rather than vanish.
func (b *Backend) failGPU(g *gpuDevice, err error) []gpu.Reading {
	b.log.Debug("GPU read failed", "gpu", g.index, "err", err)
	out := make([]gpu.Reading, 0, 1+len(g.migs))
	out = append(out, gpu.Reading{Device: g.dev, Err: err})
	for _, dev := range g.migs {
		out = append(out, gpu.Reading{Device: dev, Err: err})
	}
	return out
}
