//go:build linux && cgo

package nvml

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// collectMIG reads the MIG instances of a GPU in MIG mode, sorted by GPU
// instance then compute instance ID. The layout is enumerated on every call
// because an operator can repartition a GPU while the exporter runs.
func (b *Backend) collectMIG(g *gpuDevice) ([]gpu.Reading, error) {
	current, _, ret := g.handle.GetMigMode()
	if err := check("get MIG mode", ret); errors.Is(err, errSkip) {
		g.migs = nil // not MIG-capable
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	if current != gonvml.DEVICE_MIG_ENABLE {
		g.migs = nil
		return nil, nil
	}
	slots, ret := g.handle.GetMaxMigDeviceCount()
	if err := check("get max MIG device count", ret); errors.Is(err, errSkip) {
		g.migs = nil
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []gpu.Reading
	for i := range slots {
		h, ret := g.handle.GetMigDeviceHandleByIndex(i)
		if ret == gonvml.ERROR_NOT_FOUND {
			continue // empty slot
		}
		if err := check(fmt.Sprintf("get MIG device handle %d", i), ret); errors.Is(err, errSkip) {
			continue
		} else if err != nil {
			return nil, err
		}
		out = append(out, b.readMIG(g, h))
	}
	slices.SortStableFunc(out, func(x, y gpu.Reading) int {
		return cmp.Or(
			cmp.Compare(x.Device.MIG.GPUInstanceID, y.Device.MIG.GPUInstanceID),
			cmp.Compare(x.Device.MIG.ComputeInstanceID, y.Device.MIG.ComputeInstanceID),
		)
	})
	g.migs = g.migs[:0]
	for _, r := range out {
		g.migs = append(g.migs, r.Device)
	}
	return out, nil
}

// readMIG reads one MIG instance. Its Device carries the parent GPU's
// identity plus the instance's, so dashboards group it under its GPU.
func (b *Backend) readMIG(g *gpuDevice, h gonvml.Device) gpu.Reading {
	mig, err := migIdentity(h)
	dev := g.dev
	dev.MIG = mig
	r := gpu.Reading{Device: dev}
	if err != nil {
		r.Err = fmt.Errorf("%s: MIG device: %w", g, err)
		return r
	}
	if err := b.readFields(g, h, &r, migCalls, false); err != nil {
		r.Err = fmt.Errorf("%s: MIG device %s: %w", g, mig.UUID, err)
		return r
	}
	// NVML reports GPU instance IDs as unsigned ints; they are small.
	b.addXIDs(g, &r, uint32(mig.GPUInstanceID))
	return r
}

// migIdentity reads a MIG device's UUID, instance IDs and profile. The
// returned MIG is never nil, so that a failed instance can still be sorted
// and reported.
func migIdentity(h gonvml.Device) (*gpu.MIG, error) {
	mig := &gpu.MIG{}
	uuid, ret := h.GetUUID()
	if ret != gonvml.SUCCESS {
		return mig, &Error{Op: "get MIG UUID", Return: ret}
	}
	mig.UUID = uuid
	gi, ret := h.GetGpuInstanceId()
	if ret != gonvml.SUCCESS {
		return mig, &Error{Op: "get GPU instance ID", Return: ret}
	}
	mig.GPUInstanceID = gi
	ci, ret := h.GetComputeInstanceId()
	if ret != gonvml.SUCCESS {
		return mig, &Error{Op: "get compute instance ID", Return: ret}
	}
	mig.ComputeInstanceID = ci
	profile, err := migProfile(h)
	if err != nil {
		return mig, err
	}
	mig.Profile = profile
	return mig, nil
}

// migProfile names the instance's profile, for example "1g.5gb". The driver
// puts it in the MIG device's name ("NVIDIA A100-SXM4-40GB MIG 1g.5gb"); when
// it does not, derive it from the slice count and memory size, which is how
// the profile names are built. "" when neither is available.
func migProfile(h gonvml.Device) (string, error) {
	name, ret := h.GetName()
	if err := check("get MIG device name", ret); err != nil && !errors.Is(err, errSkip) {
		return "", err
	}
	if p, ok := profileFromName(name); ok {
		return p, nil
	}
	attr, ret := h.GetAttributes()
	if err := check("get MIG device attributes", ret); errors.Is(err, errSkip) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	return profileFromAttributes(attr), nil
}

// profileFromName returns what follows " MIG " in a MIG device's name.
func profileFromName(name string) (string, bool) {
	_, profile, ok := strings.Cut(name, " MIG ")
	profile = strings.TrimSpace(profile)
	return profile, ok && profile != ""
}

// profileFromAttributes builds "<slices>g.<GiB>gb". The memory of a profile
// is a little under its nominal size (4864 MB for 1g.5gb), hence rounding.
func profileFromAttributes(attr gonvml.DeviceAttributes) string {
	gb := math.Round(float64(attr.MemorySizeMB) / 1024)
	return fmt.Sprintf("%dg.%dgb", attr.GpuInstanceSliceCount, int(gb))
}
