//go:build linux && cgo

package nvml

import (
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// migGPU is an A100 in MIG mode with three instances in four slots, listed
// out of GPU instance order, one of them with a name lacking its profile.
func migGPU() *fakeGPU {
	g := healthyGPU(0)
	g.name = "NVIDIA A100-SXM4-40GB"
	g.migMode = gonvml.DEVICE_MIG_ENABLE
	// Real MIG-mode GPUs do not report utilization for the whole GPU.
	g.setRet("GetUtilizationRates", gonvml.ERROR_NOT_SUPPORTED)
	g.migs = []*fakeMIG{
		{
			uuid: "MIG-cccc", name: "NVIDIA A100-SXM4-40GB MIG 2g.10gb", gi: 5, ci: 0,
			memV2: gonvml.Memory_v2{Total: 9856 * mib, Used: 1000 * mib, Free: 8856 * mib},
		},
		nil, // empty slot
		{
			uuid: "MIG-aaaa", name: "NVIDIA A100-SXM4-40GB MIG 1g.5gb", gi: 7, ci: 0,
			memV2: gonvml.Memory_v2{Total: 4864 * mib, Used: 13 * mib, Free: 4851 * mib},
		},
		{
			// An older driver's name without the profile: derived from the
			// attributes instead.
			uuid: "MIG-bbbb", name: "NVIDIA A100-SXM4-40GB", gi: 3, ci: 0,
			attr:  gonvml.DeviceAttributes{GpuInstanceSliceCount: 3, MemorySizeMB: 19968},
			memV2: gonvml.Memory_v2{Total: 19968 * mib, Reserved: 8 * mib, Used: 2048 * mib, Free: 17912 * mib},
		},
	}
	return g
}

func TestCollectMIG(t *testing.T) {
	f := newFixture(migGPU(), healthyGPU(1))
	rs := collect(t, newBackend(t, f, Options{}))

	parent := gpu.Device{Index: 0, Minor: 4, UUID: f.gpus[0].uuid, ModelName: "NVIDIA A100-SXM4-40GB", PCIBusID: "00000000:18:00.0"}
	withMIG := func(m gpu.MIG) gpu.Device { d := parent; d.MIG = &m; return d }
	want := []struct {
		dev    gpu.Device
		fields map[gpu.Field]float64
	}{
		{parent, without(healthyFields(0), gpu.FieldGPUUtil, gpu.FieldMemCopyUtil)},
		{withMIG(gpu.MIG{UUID: "MIG-bbbb", GPUInstanceID: 3, Profile: "3g.20gb"}), map[gpu.Field]float64{
			gpu.FieldFBUsed: 2048, gpu.FieldFBFree: 17912, gpu.FieldFBReserved: 8, gpu.FieldFBTotal: 19968,
		}},
		{withMIG(gpu.MIG{UUID: "MIG-cccc", GPUInstanceID: 5, Profile: "2g.10gb"}), map[gpu.Field]float64{
			gpu.FieldFBUsed: 1000, gpu.FieldFBFree: 8856, gpu.FieldFBReserved: 0, gpu.FieldFBTotal: 9856,
		}},
		{withMIG(gpu.MIG{UUID: "MIG-aaaa", GPUInstanceID: 7, Profile: "1g.5gb"}), map[gpu.Field]float64{
			gpu.FieldFBUsed: 13, gpu.FieldFBFree: 4851, gpu.FieldFBReserved: 0, gpu.FieldFBTotal: 4864,
		}},
		{gpu.Device{Index: 1, Minor: 5, UUID: f.gpus[1].uuid, ModelName: "NVIDIA H100 80GB HBM3", PCIBusID: "00000000:19:00.0"},
			healthyFields(1)},
	}
	if len(rs) != len(want) {
		t.Fatalf("got %d readings, want %d: %+v", len(rs), len(want), rs)
	}
	for i, w := range want {
		r := rs[i]
		if r.Err != nil {
			t.Errorf("reading %d (%s): Err %v", i, r.Device.ID(), r.Err)
		}
		if !sameDevice(r.Device, w.dev) {
			t.Errorf("reading %d: Device = %s, want %s", i, describe(r.Device), describe(w.dev))
		}
		assertFields(t, r, w.fields)
	}
}

func TestCollectMIGLayoutChanges(t *testing.T) {
	f := newFixture(migGPU())
	b := newBackend(t, f, Options{})
	if n := len(collect(t, b)); n != 4 {
		t.Fatalf("MIG mode: %d readings, want 4", n)
	}
	f.gpus[0].migs[1] = &fakeMIG{uuid: "MIG-dddd", name: "NVIDIA A100-SXM4-40GB MIG 1g.5gb", gi: 13}
	if n := len(collect(t, b)); n != 5 {
		t.Fatalf("instance created: %d readings, want 5", n)
	}
	// A lost GPU reports its last-known instances unhealthy too.
	f.gpus[0].setRet("GetTemperature", gonvml.ERROR_GPU_IS_LOST)
	rs := collect(t, b)
	if len(rs) != 5 {
		t.Fatalf("GPU lost: %d readings, want 5", len(rs))
	}
	for _, r := range rs {
		if r.Err == nil {
			t.Errorf("GPU lost: %s healthy", r.Device.ID())
		}
	}
	f.gpus[0].setRet("GetTemperature", gonvml.SUCCESS)
	f.gpus[0].migMode = gonvml.DEVICE_MIG_DISABLE
	if rs := collect(t, b); len(rs) != 1 || rs[0].Device.MIG != nil || rs[0].Err != nil {
		t.Fatalf("MIG disabled: %+v, want the whole GPU only", rs)
	}
}

func TestProfileFromName(t *testing.T) {
	tests := []struct {
		name, want string
		ok         bool
	}{
		{"NVIDIA A100-SXM4-40GB MIG 1g.5gb", "1g.5gb", true},
		{"NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "1g.10gb+me", true},
		{"NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", "1c.3g.20gb", true},
		{"NVIDIA A100-SXM4-40GB", "", false},
		{"NVIDIA A100-SXM4-40GB MIG ", "", false},
	}
	for _, tt := range tests {
		got, ok := profileFromName(tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("profileFromName(%q) = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestProfileFromAttributes(t *testing.T) {
	tests := []struct {
		attr gonvml.DeviceAttributes
		want string
	}{
		{gonvml.DeviceAttributes{GpuInstanceSliceCount: 1, MemorySizeMB: 4864}, "1g.5gb"},
		{gonvml.DeviceAttributes{GpuInstanceSliceCount: 1, MemorySizeMB: 9856}, "1g.10gb"},
		{gonvml.DeviceAttributes{GpuInstanceSliceCount: 7, MemorySizeMB: 80 * 1024}, "7g.80gb"},
	}
	for _, tt := range tests {
		if got := profileFromAttributes(tt.attr); got != tt.want {
			t.Errorf("profileFromAttributes(%+v) = %q, want %q", tt.attr, got, tt.want)
		}
	}
}

func without(m map[gpu.Field]float64, fields ...gpu.Field) map[gpu.Field]float64 {
	for _, f := range fields {
		delete(m, f)
	}
	return m
}

// sameDevice compares devices by value, MIG included.
func sameDevice(a, b gpu.Device) bool {
	am, bm := a.MIG, b.MIG
	a.MIG, b.MIG = nil, nil
	if a != b || (am == nil) != (bm == nil) {
		return false
	}
	return am == nil || *am == *bm
}

func describe(d gpu.Device) string {
	s := d.UUID + "/" + d.ModelName + "/" + d.PCIBusID
	if d.MIG != nil {
		s += "/" + d.MIG.UUID + "/" + d.MIG.Profile
	}
	return s
}
