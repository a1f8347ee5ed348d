// Package sim is a simulated GPU backend for machines without a GPU: demos,
// tests and CI. Its GPUs follow a load that can be changed at run time, and
// their power, temperature, clocks and energy respond to that load the way
// a real data-centre GPU does (power rises with utilization, temperature lags
// power, clocks throttle when hot), so dashboards and autoscalers see
// plausible signals. Every reading it produces is simulated; the exporter
// labels it as such.
package sim

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// ErrUnknownGPU is returned by SetLoad for a GPU that does not exist.
var ErrUnknownGPU = errors.New("no such simulated GPU")

// Options configure the simulated node.
type Options struct {
	// GPUs is the number of simulated GPUs (at least 1).
	GPUs int
	// Model is the modelName label, for example "NVIDIA H100 80GB HBM3".
	Model string
	// MIGProfiles, when set, splits every GPU into these MIG instances,
	// for example {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}.
	MIGProfiles []string
	// Identity seeds the GPUs' UUIDs and PCI addresses, so simulated
	// exporters on different nodes report different devices. Usually the
	// node name.
	Identity string
	// DriverVersion is reported as the driver version label.
	DriverVersion string
	// VGPU makes every GPU a licensed vGPU guest, which serves
	// DCGM_FI_DEV_VGPU_LICENSE_STATUS (Load.VGPULicensed changes it);
	// bare metal, the default, has no licence and leaves it absent.
	VGPU bool
	// Now is the clock the physics runs on; time.Now by default.
	Now func() time.Time
}

// Load is the part of a GPU's state a user sets. Nil fields are unchanged.
type Load struct {
	// Utilization is the target GPU utilization in percent (0-100).
	Utilization *float64 `json:"utilization,omitempty"`
	// MemoryUsedMiB is the framebuffer in use.
	MemoryUsedMiB *float64 `json:"memoryUsedMiB,omitempty"`
	// XID, when non-zero, records one XID error with that code, which must
	// be a real XID code (gpu.MinXID to gpu.MaxXID).
	XID *uint64 `json:"xid,omitempty"`
	// Fail makes every read of the GPU fail until cleared, as a GPU that
	// fell off the bus does.
	Fail *bool `json:"fail,omitempty"`
	// VGPULicensed sets a vGPU guest's licence (Options.VGPU); refused
	// on bare metal, which has none.
	VGPULicensed *bool `json:"vgpuLicensed,omitempty"`
}

// Backend is the simulated gpu.Backend.
type Backend struct {
	opts Options
	now  func() time.Time

	mu   sync.Mutex
	gpus []*device
}

// New builds a simulated node.
func New(opts Options) (*Backend, error) {
	if opts.GPUs < 1 {
		return nil, fmt.Errorf("sim: need at least one GPU, got %d", opts.GPUs)
	}
	if opts.Model == "" {
		opts.Model = "NVIDIA H100 80GB HBM3"
	}
	if opts.DriverVersion == "" {
		opts.DriverVersion = "550.54.15-sim"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	spec := specFor(opts.Model)
	migs, err := parseProfiles(opts.MIGProfiles, spec)
	if err != nil {
		return nil, err
	}
	b := &Backend{opts: opts, now: opts.Now}
	start := opts.Now()
	for i := 0; i < opts.GPUs; i++ {
		d := newDevice(i, opts.Identity, opts.Model, spec, start)
		d.vgpu, d.licensed = opts.VGPU, opts.VGPU
		for j, p := range migs {
			d.migs = append(d.migs, &migInstance{
				uuid:    "MIG-" + stableUUID(opts.Identity, fmt.Sprintf("gpu%d/mig%d", i, j)),
				giID:    p.firstGI + j,
				profile: p.name,
				totalMB: p.memMiB,
			})
		}
		b.gpus = append(b.gpus, d)
	}
	return b, nil
}

// Name implements gpu.Backend.
func (b *Backend) Kind() gpu.Kind { return gpu.KindSim }

// DriverVersion implements gpu.Backend.
func (b *Backend) DriverVersion() string { return b.opts.DriverVersion }

// Close implements gpu.Backend.
func (b *Backend) Close() error { return nil }

// Collect implements gpu.Backend: it advances every GPU's physics to now and
// reads it.
func (b *Backend) Collect(ctx context.Context) ([]gpu.Reading, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]gpu.Reading, 0, len(b.gpus)*(1+len(b.opts.MIGProfiles)))
	for _, d := range b.gpus {
		d.advance(now)
		out = append(out, d.readings()...)
	}
	return out, nil
}

// SetLoad changes the load of the GPU named by its index ("0"), its UUID or
// the UUID of one of its MIG instances (memory then applies to that
// instance).
func (b *Backend) SetLoad(id string, l Load) error {
	// Written so that NaN fails too: it would poison the energy counter.
	if l.Utilization != nil && !(*l.Utilization >= 0 && *l.Utilization <= 100) {
		return fmt.Errorf("sim: utilization %v outside 0-100", *l.Utilization)
	}
	if l.MemoryUsedMiB != nil && !(*l.MemoryUsedMiB >= 0) {
		return fmt.Errorf("sim: memoryUsedMiB %v must be 0 or more", *l.MemoryUsedMiB)
	}
	if l.XID != nil && *l.XID != 0 && !gpu.ValidXID(*l.XID) {
		return fmt.Errorf("sim: xid %d outside %d-%d, the range of NVIDIA's XID codes", *l.XID, gpu.MinXID, gpu.MaxXID)
	}
	if l.VGPULicensed != nil && !b.opts.VGPU {
		return errors.New("sim: vgpuLicensed on bare-metal GPUs, which have no vGPU licence (start with --sim-vgpu)")
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	d, mig := b.lookup(id)
	if d == nil {
		return fmt.Errorf("sim: %w: %q", ErrUnknownGPU, id)
	}
	d.advance(now)
	return d.apply(mig, l)
}

func (b *Backend) lookup(id string) (*device, *migInstance) {
	for i, d := range b.gpus {
		if id == fmt.Sprint(i) || strings.EqualFold(id, d.uuid) {
			return d, nil
		}
		for _, m := range d.migs {
			if strings.EqualFold(id, m.uuid) {
				return d, m
			}
		}
	}
	return nil, nil
}

// GPUUUID returns the UUID that a backend whose Options.Identity is
// identity gives its GPU index, so that a test harness or simulated kubelet
// can hand out the same device IDs as a real device plugin would.
func GPUUUID(identity string, index int) string {
	return "GPU-" + stableUUID(identity, fmt.Sprintf("gpu%d", index))
}

// stableUUID derives a UUID-shaped string from a seed so that the same node
// always reports the same devices.
func stableUUID(identity, what string) string {
	h := sha256.Sum256([]byte("gpuscale-sim/" + identity + "/" + what))
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
