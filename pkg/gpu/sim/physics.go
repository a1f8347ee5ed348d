package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// spec holds the datasheet figures the physics uses.
type spec struct {
	memMiB      float64 // framebuffer total
	reservedMiB float64 // driver-reserved framebuffer
	idleW       float64
	limitW      float64
	smIdleMHz   float64
	smBoostMHz  float64
	memMHz      float64
	migSlices   int
}

// specFor returns figures for the model; anything unknown is treated as an
// H100 SXM, the most common inference GPU.
func specFor(model string) spec {
	s := spec{memMiB: 81559, reservedMiB: 519, idleW: 70, limitW: 700,
		smIdleMHz: 345, smBoostMHz: 1980, memMHz: 2619, migSlices: 7}
	m := strings.ToUpper(model)
	switch {
	case strings.Contains(m, "H200"):
		s.memMiB, s.reservedMiB = 143771, 551
	case strings.Contains(m, "A100") && strings.Contains(m, "40GB"):
		s = spec{memMiB: 40960, reservedMiB: 485, idleW: 55, limitW: 400,
			smIdleMHz: 210, smBoostMHz: 1410, memMHz: 1215, migSlices: 7}
	case strings.Contains(m, "A100"):
		s = spec{memMiB: 81920, reservedMiB: 485, idleW: 60, limitW: 400,
			smIdleMHz: 210, smBoostMHz: 1410, memMHz: 1593, migSlices: 7}
	case strings.Contains(m, "L4"):
		s = spec{memMiB: 23034, reservedMiB: 315, idleW: 16, limitW: 72,
			smIdleMHz: 210, smBoostMHz: 2040, memMHz: 6251}
	}
	return s
}

// Thermal and electrical constants. Power follows utilization within a couple
// of seconds; the die heats more slowly. The figures give an H100 about 35C
// idle and about 75C at full load with 25C inlet air.
const (
	powerTau     = 2 * time.Second
	thermalTau   = 20 * time.Second
	ambientC     = 25.0
	thermalCPerW = 0.072 // steady-state degrees above ambient per watt
	throttleC    = 85.0  // SM clocks drop above this
	memTempOverC = 6.0   // HBM runs a few degrees above the die sensor
)

type migInstance struct {
	uuid    string
	giID    int
	profile string
	totalMB float64
	usedMiB float64
}

type device struct {
	index    int
	uuid     string
	busID    string
	model    string
	spec     spec
	migs     []*migInstance
	failing  bool
	xids     map[uint64]uint64
	lastXID  uint64
	lastTime time.Time

	targetUtil float64 // set by the user
	usedMiB    float64
	powerW     float64 // state, relaxes towards the target power
	tempC      float64 // state, relaxes towards the power's steady state
	energyMJ   float64
	// powerCappedNs, thermalNs and lowUtilNs count the time the clocks
	// were held back by the power limit, by heat, and at idle: the
	// violation counters NVML reports.
	powerCappedNs, thermalNs, lowUtilNs float64
	// vgpu: a vGPU guest, whose licence is licensed.
	vgpu, licensed bool
}

func newDevice(i int, identity, model string, s spec, now time.Time) *device {
	d := &device{
		index: i, model: model, spec: s, lastTime: now,
		uuid:   GPUUUID(identity, i),
		busID:  fmt.Sprintf("00000000:%02X:00.0", 0x18+0x10*i),
		xids:   map[uint64]uint64{},
		powerW: s.idleW,
	}
	d.tempC = ambientC + thermalCPerW*s.idleW
	return d
}

// targetPower is the steady-state draw at the current utilization.
func (d *device) targetPower() float64 {
	return d.spec.idleW + (0.95*d.spec.limitW-d.spec.idleW)*d.targetUtil/100
}

// advance integrates the first-order power and thermal models up to now.
func (d *device) advance(now time.Time) {
	dt := now.Sub(d.lastTime)
	if dt <= 0 {
		return
	}
	d.lastTime = now
	target, before := d.targetPower(), d.powerW
	d.powerW = relax(before, target, dt, powerTau)
	// The exact integral of the exponential approach, not a trapezoid: the
	// trapezoid is 5% low over a 1 s step and far worse over longer ones,
	// so energy would depend on how often the exporter collects.
	d.energyMJ += (target*dt.Seconds() + (before-d.powerW)*powerTau.Seconds()) * 1000
	d.tempC = relax(d.tempC, ambientC+thermalCPerW*d.powerW, dt, thermalTau)
	// Power-capped at the top of the load range, where the draw reaches
	// the limit's 95%; throttled for heat above throttleC; at idle clocks
	// when nothing runs.
	ns := float64(dt.Nanoseconds())
	if d.targetUtil >= powerCapUtil {
		d.powerCappedNs += ns
	}
	if d.tempC > throttleC {
		d.thermalNs += ns
	}
	if d.targetUtil == 0 {
		d.lowUtilNs += ns
	}
}

// relax moves x towards target as a first-order system with time constant tau.
func relax(x, target float64, dt, tau time.Duration) float64 {
	return target + (x-target)*math.Exp(-dt.Seconds()/tau.Seconds())
}

// apply changes the load; a rejected load changes nothing.
func (d *device) apply(mig *migInstance, l Load) error {
	if l.MemoryUsedMiB != nil {
		limit, where := d.spec.memMiB-d.spec.reservedMiB, ""
		if mig != nil {
			limit = mig.totalMB
		} else if len(d.migs) > 0 {
			// The instances own their memory: the GPU itself can only
			// hold what no instance was given, or used would exceed
			// the total once the instances fill up.
			for _, m := range d.migs {
				limit -= m.totalMB
			}
			where = " outside its MIG instances"
		}
		if *l.MemoryUsedMiB > limit {
			return fmt.Errorf("sim: memoryUsedMiB %v exceeds the %v MiB available%s", *l.MemoryUsedMiB, limit, where)
		}
	}
	if l.XID != nil && *l.XID != 0 {
		if _, seen := d.xids[*l.XID]; !seen && len(d.xids) >= gpu.MaxXIDCodes {
			return fmt.Errorf("sim: gpu %d already counts %d distinct XID codes, the most kept per GPU", d.index, gpu.MaxXIDCodes)
		}
	}
	if l.Utilization != nil {
		d.targetUtil = *l.Utilization
	}
	if l.MemoryUsedMiB != nil {
		if mig != nil {
			mig.usedMiB = *l.MemoryUsedMiB
		} else {
			d.usedMiB = *l.MemoryUsedMiB
		}
	}
	if l.XID != nil && *l.XID != 0 {
		d.xids[*l.XID]++
		d.lastXID = *l.XID
	}
	if l.Fail != nil {
		d.failing = *l.Fail
	}
	if l.VGPULicensed != nil {
		d.licensed = *l.VGPULicensed
	}
	return nil
}

func (d *device) identity() gpu.Device {
	return gpu.Device{Index: d.index, Minor: d.index, UUID: d.uuid, ModelName: d.model, PCIBusID: d.busID}
}

func (d *device) readings() []gpu.Reading {
	r := gpu.Reading{Device: d.identity()}
	if d.failing {
		r.Err = fmt.Errorf("sim: gpu %d: %w", d.index, errSimulatedFault)
		return []gpu.Reading{r}
	}
	util := d.targetUtil
	r.Set(gpu.FieldGPUUtil, math.Round(util))
	r.Set(gpu.FieldMemCopyUtil, math.Round(util*0.6))
	used := d.usedMiB
	for _, m := range d.migs {
		used += m.usedMiB
	}
	// Free is derived from the rounded used figure so that used, free and
	// reserved always add up to total, as NVML's do.
	used = math.Round(used)
	r.Set(gpu.FieldFBUsed, used)
	r.Set(gpu.FieldFBReserved, d.spec.reservedMiB)
	r.Set(gpu.FieldFBTotal, d.spec.memMiB)
	r.Set(gpu.FieldFBFree, d.spec.memMiB-d.spec.reservedMiB-used)
	r.Set(gpu.FieldGPUTemp, math.Round(d.tempC))
	r.Set(gpu.FieldMemoryTemp, math.Round(d.tempC+memTempOverC))
	r.Set(gpu.FieldPowerUsage, math.Round(d.powerW*1000)/1000)
	r.Set(gpu.FieldPowerLimit, d.spec.limitW)
	r.Set(gpu.FieldPowerMgmtLimit, d.spec.limitW)
	r.Set(gpu.FieldEnergy, math.Round(d.energyMJ))
	r.Set(gpu.FieldSMClock, d.smClock())
	r.Set(gpu.FieldMemClock, d.spec.memMHz)
	r.Set(gpu.FieldLastXID, float64(d.lastXID))
	setHealthAndProfiling(&r, util)
	if d.vgpu {
		r.Set(gpu.FieldVGPULicensed, map[bool]float64{false: 0, true: 1}[d.licensed])
	}
	r.Set(gpu.FieldNVLinkBandwidth, 2*util*simNVLinkBytesPerPct)
	r.Set(gpu.FieldPowerViolation, math.Round(d.powerCappedNs))
	r.Set(gpu.FieldThermalViolation, math.Round(d.thermalNs))
	r.Set(gpu.FieldLowUtilViolation, math.Round(d.lowUtilNs))
	r.XIDCounts = make(map[uint64]uint64, len(d.xids))
	for k, v := range d.xids {
		r.XIDCounts[k] = v
	}
	out := []gpu.Reading{r}
	for _, m := range d.migs {
		mr := gpu.Reading{Device: d.identity()}
		mr.Device.MIG = &gpu.MIG{UUID: m.uuid, GPUInstanceID: m.giID, ComputeInstanceID: 0, Profile: m.profile}
		// Like NVML, a MIG instance reports its memory but not its
		// utilization, temperature or power.
		mr.Set(gpu.FieldFBUsed, m.usedMiB)
		mr.Set(gpu.FieldFBTotal, m.totalMB)
		mr.Set(gpu.FieldFBFree, m.totalMB-m.usedMiB)
		out = append(out, mr)
	}
	return out
}

// Fractions of the graphics engine's busy time that an inference load
// keeps the SMs, their warp slots, the tensor pipes and the memory
// interface busy; typical of a transformer's decode on an H100.
const (
	simSMActiveOfBusy  = 0.9
	simOccupancyOfBusy = 0.45
	simTensorOfBusy    = 0.6
	simDRAMOfBusy      = 0.5
	simFP64OfBusy      = 0.01
	simFP32OfBusy      = 0.15
	simFP16OfBusy      = 0.05
	// fabricHealthy is NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY.
	fabricHealthy = 1
	// powerCapUtil is the load from which the draw sits at the limit.
	powerCapUtil = 95
	// simPCIeBytesPerPct and simNVLinkBytesPerPct scale traffic with load.
	simPCIeBytesPerPct   = 20e6
	simNVLinkBytesPerPct = 1e9
)

// setHealthAndProfiling sets the fields a healthy, unlicensed bare-metal
// GPU reports beside utilization and memory: no media engines in use, no
// PCIe replays, row remaps, ECC errors, retired pages or NVLink errors, a
// healthy fabric, and profiling activity in proportion to the load. A
// bare-metal GPU has no vGPU licence, so that field is set only for vGPU
// guests (readings).
func setHealthAndProfiling(r *gpu.Reading, util float64) {
	busy := util / 100
	for f, v := range map[gpu.Field]float64{
		gpu.FieldEncUtil: 0, gpu.FieldDecUtil: 0, gpu.FieldPCIeReplay: 0,
		gpu.FieldPCIeTxThroughput:        math.Round(util * simPCIeBytesPerPct / 2 / 1000),
		gpu.FieldPCIeRxThroughput:        math.Round(util * simPCIeBytesPerPct / 1000),
		gpu.FieldRemappedRowsCorrectable: 0, gpu.FieldRemappedRowsUncorrectable: 0,
		gpu.FieldRowRemapPending: 0, gpu.FieldRowRemapFailure: 0,
		gpu.FieldGREngineActive: busy,
		gpu.FieldSMActive:       busy * simSMActiveOfBusy,
		gpu.FieldSMOccupancy:    busy * simOccupancyOfBusy,
		gpu.FieldTensorActive:   busy * simTensorOfBusy,
		gpu.FieldDRAMActive:     busy * simDRAMOfBusy,
		gpu.FieldPCIeTxBytes:    math.Round(util * simPCIeBytesPerPct / 2),
		gpu.FieldPCIeRxBytes:    math.Round(util * simPCIeBytesPerPct),
		gpu.FieldNVLinkTxBytes:  math.Round(util * simNVLinkBytesPerPct),
		gpu.FieldNVLinkRxBytes:  math.Round(util * simNVLinkBytesPerPct),
		gpu.FieldFP64Active:     busy * simFP64OfBusy,
		gpu.FieldFP32Active:     busy * simFP32OfBusy,
		gpu.FieldFP16Active:     busy * simFP16OfBusy,

		gpu.FieldECCSBEVolatile: 0, gpu.FieldECCDBEVolatile: 0, gpu.FieldECCSBEAggregate: 0, gpu.FieldECCDBEAggregate: 0,
		gpu.FieldRetiredPagesSBE: 0, gpu.FieldRetiredPagesDBE: 0, gpu.FieldRetiredPending: 0,
		gpu.FieldSyncBoostViolation: 0, gpu.FieldBoardLimitViolation: 0, gpu.FieldReliabilityViolation: 0,
		gpu.FieldNVLinkCRCFlitErrors: 0, gpu.FieldNVLinkCRCDataErrors: 0, gpu.FieldNVLinkReplayErrors: 0,
		gpu.FieldNVLinkRecoveryErrors: 0,
		gpu.FieldFabricHealthSummary:  fabricHealthy, gpu.FieldFabricHealthMask: 0,
	} {
		r.Set(f, v)
	}
}

// smClock boosts under load and throttles when the die runs hot.
func (d *device) smClock() float64 {
	if d.targetUtil == 0 {
		return d.spec.smIdleMHz
	}
	clk := d.spec.smBoostMHz
	if d.tempC > throttleC {
		clk *= math.Max(0.5, 1-(d.tempC-throttleC)*0.03)
	}
	return math.Round(clk)
}

var errSimulatedFault = fmt.Errorf("simulated GPU fault (GPU is lost)")

type profile struct {
	name    string
	memMiB  float64
	firstGI int
}

// parseProfiles validates MIG profile names like "1g.10gb" against the GPU's
// slices.
func parseProfiles(names []string, s spec) ([]profile, error) {
	var out []profile
	slices, memMiB := 0, 0.0
	for _, n := range names {
		n = strings.TrimSpace(n)
		g, mem, ok := strings.Cut(strings.TrimSuffix(n, "gb"), "g.")
		gi, err1 := strconv.Atoi(g)
		gb, err2 := strconv.Atoi(mem)
		if !ok || !strings.HasSuffix(n, "gb") || err1 != nil || err2 != nil || gi < 1 {
			return nil, fmt.Errorf("sim: MIG profile %q: want the form <slices>g.<memory>gb, for example 1g.10gb", n)
		}
		p := profile{name: n, memMiB: math.Floor(float64(gb) * 1024 * 0.96), firstGI: 1}
		slices += gi
		memMiB += p.memMiB
		out = append(out, p)
	}
	if len(names) > 0 && (s.migSlices == 0 || slices > s.migSlices) {
		return nil, fmt.Errorf("sim: MIG layout %v needs %d slices; the GPU has %d", names, slices, s.migSlices)
	}
	if memMiB > s.memMiB-s.reservedMiB {
		return nil, fmt.Errorf("sim: MIG layout %v needs %v MiB of memory; the GPU has %v", names, memMiB, s.memMiB-s.reservedMiB)
	}
	return out, nil
}
