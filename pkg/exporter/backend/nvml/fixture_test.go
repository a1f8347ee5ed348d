//go:build linux && cgo

package nvml

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fakeGPU is what a mock GPU answers. Its mock functions read it on every
// call, so a test changes the GPU's behaviour between Collects with setRet.
type fakeGPU struct {
	uuid, name, busID string
	minor             int
	util              gonvml.Utilization
	memV2             gonvml.Memory_v2
	memV1             gonvml.Memory
	temp              uint32
	memTemp           float64
	memTempType       gonvml.ValueType
	power, limit      uint32 // mW
	energy            uint64 // mJ
	smClock, memClock uint32
	enc, dec          uint32
	replays           int
	pcieTx, pcieRx    uint32 // KB/s
	rowsCorr, rowsUnc int
	remapPending      bool
	remapFailed       bool
	// nvlinkTxKiB and nvlinkRxKiB are answered when nvlink is set.
	nvlink                   bool
	nvlinkTxKiB, nvlinkRxKiB uint64
	virtMode                 gonvml.GpuVirtualizationMode
	licensed                 bool
	mgmtLimit                uint32 // mW
	// violations are the nanoseconds of each perf policy.
	violations map[gonvml.PerfPolicyType]uint64
	// values answers field values by ID (ECC, retired pages, NVLink errors).
	values                    map[uint32]uint64
	fabricSummary, fabricMask uint32
	migMode                   int
	// migs are the MIG slots; a nil entry is an empty slot.
	migs []*fakeMIG

	mu sync.Mutex
	// rets overrides the Return of a call, by method name.
	rets map[string]gonvml.Return
}

// fakeMIG is what a mock MIG device answers.
type fakeMIG struct {
	uuid, name string
	gi, ci     int
	attr       gonvml.DeviceAttributes
	memV2      gonvml.Memory_v2
	memRet     gonvml.Return
}

// setRet makes the named call return ret (SUCCESS restores it).
func (g *fakeGPU) setRet(call string, ret gonvml.Return) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.rets == nil {
		g.rets = make(map[string]gonvml.Return)
	}
	g.rets[call] = ret
}

func (g *fakeGPU) ret(call string) gonvml.Return {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.rets[call]; ok {
		return r
	}
	return gonvml.SUCCESS
}

const gib = 1 << 30

// healthyGPU returns an H100-like GPU whose values depend on i, so that
// readings cannot be confused between GPUs.
func healthyGPU(i int) *fakeGPU {
	u := uint32(i)
	return &fakeGPU{
		uuid:  fmt.Sprintf("GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd", i),
		name:  "NVIDIA H100 80GB HBM3",
		busID: fmt.Sprintf("00000000:%02X:00.0", 0x18+i),
		minor: i + 4, // differs from the index, as on real nodes
		util:  gonvml.Utilization{Gpu: 40 + u, Memory: 20 + u},
		memV2: gonvml.Memory_v2{
			Total: 80 * gib, Reserved: 512 * mib,
			Used: 10*gib + uint64(i)*mib + 1234, Free: 80*gib - 10*gib - 512*mib - uint64(i)*mib - 1234,
		},
		memV1: gonvml.Memory{
			Total: 80 * gib, Used: 10*gib + 512*mib + uint64(i)*mib, Free: 70*gib - 512*mib - uint64(i)*mib,
		},
		temp: 50 + u, memTemp: 60 + float64(i), memTempType: gonvml.VALUE_TYPE_UNSIGNED_INT,
		power: 250_500 + u*1000, limit: 700_000, energy: 123_456_789 + uint64(i),
		smClock: 1980, memClock: 2619,
		enc: 3 + u, dec: 7 + u, replays: 2 + i, pcieTx: 1200 + u, pcieRx: 3400 + u,
		rowsCorr: 1 + i, rowsUnc: i, remapPending: i == 1,
		mgmtLimit: 650_000,
		violations: map[gonvml.PerfPolicyType]uint64{
			gonvml.PERF_POLICY_POWER: 1e9 + uint64(i), gonvml.PERF_POLICY_THERMAL: 2e6,
			gonvml.PERF_POLICY_SYNC_BOOST: 0, gonvml.PERF_POLICY_BOARD_LIMIT: 3,
			gonvml.PERF_POLICY_LOW_UTILIZATION: 7e10, gonvml.PERF_POLICY_RELIABILITY: 0,
		},
		values: map[uint32]uint64{
			gonvml.FI_DEV_ECC_SBE_VOL_TOTAL: 3 + uint64(i), gonvml.FI_DEV_ECC_DBE_VOL_TOTAL: 0,
			gonvml.FI_DEV_ECC_SBE_AGG_TOTAL: 40, gonvml.FI_DEV_ECC_DBE_AGG_TOTAL: 1,
			gonvml.FI_DEV_RETIRED_SBE: 2, gonvml.FI_DEV_RETIRED_DBE: 1, gonvml.FI_DEV_RETIRED_PENDING: 0,
			gonvml.FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: 5, gonvml.FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: 6,
			gonvml.FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: 7, gonvml.FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: 8,
		},
		fabricSummary: gonvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY,
	}
}

// fieldValueCall is the key setRet takes for one field value's own return.
func fieldValueCall(id uint32) string { return fmt.Sprintf("FI/%d", id) }

// mockGPU builds the mock.Device for g.
func mockGPU(g *fakeGPU) *mock.Device {
	d := &mock.Device{}
	d.GetUUIDFunc = func() (string, gonvml.Return) { return g.uuid, g.ret("GetUUID") }
	d.GetNameFunc = func() (string, gonvml.Return) { return g.name, g.ret("GetName") }
	d.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
		var pci gonvml.PciInfo
		copy(pci.BusId[:], cChars(g.busID))
		return pci, g.ret("GetPciInfo")
	}
	d.GetMinorNumberFunc = func() (int, gonvml.Return) { return g.minor, g.ret("GetMinorNumber") }
	d.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
		return g.util, g.ret("GetUtilizationRates")
	}
	d.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) { return g.memV2, g.ret("GetMemoryInfo_v2") }
	d.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) { return g.memV1, g.ret("GetMemoryInfo") }
	d.GetTemperatureFunc = func(s gonvml.TemperatureSensors) (uint32, gonvml.Return) {
		if s != gonvml.TEMPERATURE_GPU {
			return 0, gonvml.ERROR_INVALID_ARGUMENT
		}
		return g.temp, g.ret("GetTemperature")
	}
	d.GetFieldValuesFunc = func(values []gonvml.FieldValue) gonvml.Return {
		for i := range values {
			v := &values[i]
			switch {
			case v.FieldId == gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX || v.FieldId == gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
				if !g.nvlink || v.ScopeId != ^uint32(0) {
					v.NvmlReturn = uint32(gonvml.ERROR_NOT_SUPPORTED)
					continue
				}
				g.mu.Lock()
				n := g.nvlinkTxKiB
				if v.FieldId == gonvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX {
					n = g.nvlinkRxKiB
				}
				g.mu.Unlock()
				v.ValueType = uint32(gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
				v.Value = encodeValue(gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG, float64(n))
				v.NvmlReturn = uint32(g.ret("FI_DEV_NVLINK_THROUGHPUT"))
			case v.FieldId == gonvml.FI_DEV_MEMORY_TEMP:
				v.ValueType = uint32(g.memTempType)
				v.Value = encodeValue(g.memTempType, g.memTemp)
				v.NvmlReturn = uint32(g.ret("FI_DEV_MEMORY_TEMP"))
			default:
				n, ok := g.values[v.FieldId]
				if !ok {
					v.NvmlReturn = uint32(gonvml.ERROR_NOT_SUPPORTED)
					continue
				}
				v.ValueType = uint32(gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
				v.Value = encodeValue(gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG, float64(n))
				v.NvmlReturn = uint32(g.ret(fieldValueCall(v.FieldId)))
			}
		}
		return g.ret("GetFieldValues")
	}
	d.GetPowerUsageFunc = func() (uint32, gonvml.Return) { return g.power, g.ret("GetPowerUsage") }
	d.GetEnforcedPowerLimitFunc = func() (uint32, gonvml.Return) { return g.limit, g.ret("GetEnforcedPowerLimit") }
	d.GetPowerManagementLimitFunc = func() (uint32, gonvml.Return) { return g.mgmtLimit, g.ret("GetPowerManagementLimit") }
	d.GetViolationStatusFunc = func(p gonvml.PerfPolicyType) (gonvml.ViolationTime, gonvml.Return) {
		ns, ok := g.violations[p]
		if !ok {
			return gonvml.ViolationTime{}, gonvml.ERROR_NOT_SUPPORTED
		}
		return gonvml.ViolationTime{ReferenceTime: 1, ViolationTime: ns}, g.ret(fmt.Sprintf("GetViolationStatus/%d", p))
	}
	d.GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) {
		return g.energy, g.ret("GetTotalEnergyConsumption")
	}
	d.GetClockInfoFunc = func(c gonvml.ClockType) (uint32, gonvml.Return) {
		switch c {
		case gonvml.CLOCK_SM:
			return g.smClock, g.ret("GetClockInfo/SM")
		case gonvml.CLOCK_MEM:
			return g.memClock, g.ret("GetClockInfo/MEM")
		}
		return 0, gonvml.ERROR_INVALID_ARGUMENT
	}
	d.GetEncoderUtilizationFunc = func() (uint32, uint32, gonvml.Return) { return g.enc, 167000, g.ret("GetEncoderUtilization") }
	d.GetDecoderUtilizationFunc = func() (uint32, uint32, gonvml.Return) { return g.dec, 167000, g.ret("GetDecoderUtilization") }
	d.GetPcieReplayCounterFunc = func() (int, gonvml.Return) { return g.replays, g.ret("GetPcieReplayCounter") }
	d.GetPcieThroughputFunc = func(c gonvml.PcieUtilCounter) (uint32, gonvml.Return) {
		switch c {
		case gonvml.PCIE_UTIL_TX_BYTES:
			return g.pcieTx, g.ret("GetPcieThroughput/TX")
		case gonvml.PCIE_UTIL_RX_BYTES:
			return g.pcieRx, g.ret("GetPcieThroughput/RX")
		}
		return 0, gonvml.ERROR_INVALID_ARGUMENT
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, gonvml.Return) {
		return g.rowsCorr, g.rowsUnc, g.remapPending, g.remapFailed, g.ret("GetRemappedRows")
	}
	d.GetVirtualizationModeFunc = func() (gonvml.GpuVirtualizationMode, gonvml.Return) {
		return g.virtMode, g.ret("GetVirtualizationMode")
	}
	d.GetGridLicensableFeaturesFunc = func() (gonvml.GridLicensableFeatures, gonvml.Return) {
		f := gonvml.GridLicensableFeatures{IsGridLicenseSupported: 1, LicensableFeaturesCount: 1}
		f.GridLicensableFeatures[0].FeatureState = gonvml.GRID_LICENSE_STATE_UNLICENSED
		if g.licensed {
			f.GridLicensableFeatures[0].FeatureState = gonvml.GRID_LICENSE_STATE_LICENSED
		}
		return f, g.ret("GetGridLicensableFeatures")
	}
	addMIGFuncs(d, g)
	d.RegisterEventsFunc = func(uint64, gonvml.EventSet) gonvml.Return { return g.ret("RegisterEvents") }
	return d
}

// addMIGFuncs makes d answer g's MIG mode and slots.
func addMIGFuncs(d *mock.Device, g *fakeGPU) {
	d.GetMigModeFunc = func() (int, int, gonvml.Return) { return g.migMode, g.migMode, g.ret("GetMigMode") }
	d.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return len(g.migs), g.ret("GetMaxMigDeviceCount") }
	d.GetMigDeviceHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		if i < 0 || i >= len(g.migs) {
			return nil, gonvml.ERROR_INVALID_ARGUMENT
		}
		if g.migs[i] == nil {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		return mockMIG(g.migs[i], d), gonvml.SUCCESS
	}
}

// mockMIG builds a MIG device handle. Like a real MIG handle it does not
// report utilization.
func mockMIG(m *fakeMIG, parent *mock.Device) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:              func() (string, gonvml.Return) { return m.uuid, gonvml.SUCCESS },
		GetNameFunc:              func() (string, gonvml.Return) { return m.name, gonvml.SUCCESS },
		GetGpuInstanceIdFunc:     func() (int, gonvml.Return) { return m.gi, gonvml.SUCCESS },
		GetComputeInstanceIdFunc: func() (int, gonvml.Return) { return m.ci, gonvml.SUCCESS },
		GetAttributesFunc:        func() (gonvml.DeviceAttributes, gonvml.Return) { return m.attr, gonvml.SUCCESS },
		GetUtilizationRatesFunc: func() (gonvml.Utilization, gonvml.Return) {
			return gonvml.Utilization{}, gonvml.ERROR_NOT_SUPPORTED
		},
		GetMemoryInfo_v2Func: func() (gonvml.Memory_v2, gonvml.Return) { return m.memV2, m.memRet },
		GetDeviceHandleFromMigDeviceHandleFunc: func() (gonvml.Device, gonvml.Return) {
			return parent, gonvml.SUCCESS
		},
	}
}

// cChars converts s to a C char array's contents.
func cChars(s string) []int8 {
	out := make([]int8, len(s))
	for i := range len(s) {
		out[i] = int8(s[i])
	}
	return out
}

// encodeValue writes v into an nvmlValue_t union as NVML would for t.
func encodeValue(t gonvml.ValueType, v float64) [8]byte {
	var b [8]byte
	switch t {
	case gonvml.VALUE_TYPE_DOUBLE:
		binary.NativeEndian.PutUint64(b[:], math.Float64bits(v))
	case gonvml.VALUE_TYPE_UNSIGNED_INT:
		binary.NativeEndian.PutUint32(b[:], uint32(v))
	case gonvml.VALUE_TYPE_UNSIGNED_LONG, gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		binary.NativeEndian.PutUint64(b[:], uint64(v))
	case gonvml.VALUE_TYPE_SIGNED_LONG_LONG:
		binary.NativeEndian.PutUint64(b[:], uint64(int64(v)))
	case gonvml.VALUE_TYPE_SIGNED_INT:
		binary.NativeEndian.PutUint32(b[:], uint32(int32(v)))
	case gonvml.VALUE_TYPE_UNSIGNED_SHORT:
		binary.NativeEndian.PutUint16(b[:], uint16(v))
	}
	return b
}

// waitResult is one answer of the mock event set's Wait.
type waitResult struct {
	data gonvml.EventData
	ret  gonvml.Return
}

// fixture is a mock NVML with a few GPUs and a scripted event set.
type fixture struct {
	lib     *mock.Interface
	gpus    []*fakeGPU
	devices []*mock.Device
	set     *mock.EventSet

	mu sync.Mutex
	// events are answered by Wait in order; then Wait times out.
	events []waitResult
	// idleWait is how long a Wait with no event blocks, at most its timeout.
	idleWait time.Duration
	// drained is closed when Wait has handed out every scripted event.
	drained chan struct{}

	initRet   gonvml.Return
	memV2Sym  bool
	shutdowns atomic.Int32
	frees     atomic.Int32
	maxWaitMs atomic.Uint32
}

func newFixture(gpus ...*fakeGPU) *fixture {
	f := &fixture{gpus: gpus, idleWait: 5 * time.Millisecond, memV2Sym: true, drained: make(chan struct{})}
	for _, g := range gpus {
		f.devices = append(f.devices, mockGPU(g))
	}
	f.set = &mock.EventSet{
		WaitFunc: f.wait,
		FreeFunc: func() gonvml.Return { f.frees.Add(1); return gonvml.SUCCESS },
	}
	f.lib = &mock.Interface{
		InitFunc:     func() gonvml.Return { return f.initRet },
		ShutdownFunc: func() gonvml.Return { f.shutdowns.Add(1); return gonvml.SUCCESS },
		ExtensionsFunc: func() gonvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(name string) error {
				if name == "nvmlDeviceGetMemoryInfo_v2" && !f.memV2Sym {
					return fmt.Errorf("undefined symbol: %s", name)
				}
				return nil
			}}
		},
		SystemGetDriverVersionFunc: func() (string, gonvml.Return) { return "570.124.06", gonvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, gonvml.Return) { return len(f.devices), gonvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (gonvml.Device, gonvml.Return) {
			if i < 0 || i >= len(f.devices) {
				return nil, gonvml.ERROR_INVALID_ARGUMENT
			}
			return f.devices[i], f.gpus[i].ret("DeviceGetHandleByIndex")
		},
		EventSetCreateFunc: func() (gonvml.EventSet, gonvml.Return) { return f.set, gonvml.SUCCESS },
	}
	return f
}

// script queues Wait answers; call it before New.
func (f *fixture) script(events ...waitResult) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, events...)
}

func (f *fixture) wait(timeoutMs uint32) (gonvml.EventData, gonvml.Return) {
	if timeoutMs > f.maxWaitMs.Load() {
		f.maxWaitMs.Store(timeoutMs)
	}
	f.mu.Lock()
	if len(f.events) > 0 {
		ev := f.events[0]
		f.events = f.events[1:]
		if len(f.events) == 0 {
			close(f.drained)
		}
		f.mu.Unlock()
		return ev.data, ev.ret
	}
	idle := min(f.idleWait, time.Duration(timeoutMs)*time.Millisecond)
	f.mu.Unlock()
	time.Sleep(idle)
	return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
}

// xid is a scripted XID event on device d.
func xid(d gonvml.Device, code uint64, gpuInstance uint32) waitResult {
	return waitResult{ret: gonvml.SUCCESS, data: gonvml.EventData{
		Device: d, EventType: gonvml.EventTypeXidCriticalError, EventData: code,
		GpuInstanceId: gpuInstance, ComputeInstanceId: noInstance,
	}}
}

// newBackend starts a Backend on f and closes it when the test ends.
func newBackend(t *testing.T, f *fixture, opts Options) *Backend {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	b, err := New(f.lib, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	// go-nvml's mock cannot stand in for GpuFabricInfoHandler, which
	// calls the C library: answer from the fake GPUs instead.
	b.fabricInfo = f.fabricInfo
	// Each Collect is a second after the previous one.
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.now = func() time.Time { now = now.Add(time.Second); return now }
	return b
}

// fabricInfo answers the fabric health of the fake GPU behind d.
func (f *fixture) fabricInfo(d gonvml.Device) (gonvml.GpuFabricInfo_v3, gonvml.Return) {
	for i, dev := range f.devices {
		if dev == d {
			g := f.gpus[i]
			return gonvml.GpuFabricInfo_v3{HealthSummary: uint8(g.fabricSummary), HealthMask: g.fabricMask},
				g.ret("GetGpuFabricInfoV")
		}
	}
	return gonvml.GpuFabricInfo_v3{}, gonvml.ERROR_INVALID_ARGUMENT
}
