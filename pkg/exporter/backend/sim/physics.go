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
	now := state{util: d.targetUtil, used: d.usedMiB}
	for _, m := range d.migs {
		now.used += m.usedMiB
	}
	// Free is derived from the rounded used figure so that used, free and
	// reserved always add up to total, as NVML's do.
	now.used = math.Round(now.used)
	for i := range gpu.Specs {
		f := gpu.Specs[i].Field
		if law := physics[f]; law != nil {
			if v, ok := law(d, &now); ok {
				r.Set(f, v)
			}
		}
	}
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

// state is what a whole GPU's fields are computed from at one reading.
type state struct {
	// util is the utilization in percent; used the framebuffer in use,
	// the MIG instances' included, in whole MiB.
	util, used float64
}

// busy is the graphics engine's busy ratio, 0 to 1.
func (s *state) busy() float64 { return s.util / 100 }

// A law gives one field's value on a whole GPU; false leaves it absent.
type law func(d *device, s *state) (float64, bool)

// always is a law whose value is always v: a healthy GPU's zero error
// counts, its fabric's health.
func always(v float64) law { return func(*device, *state) (float64, bool) { return v, true } }

// physics gives every field of gpu.Specs its simulated value on a whole
// GPU: a healthy, unlicensed bare-metal GPU's, with power, heat and clocks
// following the load (advance), no media engines in use, no PCIe replays,
// row remaps, ECC errors, retired pages or NVLink errors, a healthy
// fabric, and profiling activity and traffic in proportion to the load. A
// bare-metal GPU has no vGPU licence, so that field is set only for vGPU
// guests. A MIG instance's few fields are readings'. TestPhysicsForEveryField
// fails on a field of gpu.Specs without a law.
var physics = map[gpu.Field]law{
	gpu.FieldGPUUtil:     func(_ *device, s *state) (float64, bool) { return math.Round(s.util), true },
	gpu.FieldMemCopyUtil: func(_ *device, s *state) (float64, bool) { return math.Round(s.util * 0.6), true },
	gpu.FieldFBUsed:      func(_ *device, s *state) (float64, bool) { return s.used, true },
	gpu.FieldFBReserved:  func(d *device, _ *state) (float64, bool) { return d.spec.reservedMiB, true },
	gpu.FieldFBTotal:     func(d *device, _ *state) (float64, bool) { return d.spec.memMiB, true },
	gpu.FieldFBFree: func(d *device, s *state) (float64, bool) {
		return d.spec.memMiB - d.spec.reservedMiB - s.used, true
	},
	gpu.FieldGPUTemp:        func(d *device, _ *state) (float64, bool) { return math.Round(d.tempC), true },
	gpu.FieldMemoryTemp:     func(d *device, _ *state) (float64, bool) { return math.Round(d.tempC + memTempOverC), true },
	gpu.FieldPowerUsage:     func(d *device, _ *state) (float64, bool) { return math.Round(d.powerW*1000) / 1000, true },
	gpu.FieldPowerLimit:     func(d *device, _ *state) (float64, bool) { return d.spec.limitW, true },
	gpu.FieldPowerMgmtLimit: func(d *device, _ *state) (float64, bool) { return d.spec.limitW, true },
	gpu.FieldEnergy:         func(d *device, _ *state) (float64, bool) { return math.Round(d.energyMJ), true },
	gpu.FieldSMClock:        func(d *device, _ *state) (float64, bool) { return d.smClock(), true },
	gpu.FieldMemClock:       func(d *device, _ *state) (float64, bool) { return d.spec.memMHz, true },
	gpu.FieldLastXID:        func(d *device, _ *state) (float64, bool) { return float64(d.lastXID), true },
	gpu.FieldVGPULicensed: func(d *device, _ *state) (float64, bool) {
		return map[bool]float64{false: 0, true: 1}[d.licensed], d.vgpu
	},
	gpu.FieldNVLinkBandwidth:  func(_ *device, s *state) (float64, bool) { return 2 * s.util * simNVLinkBytesPerPct, true },
	gpu.FieldPowerViolation:   func(d *device, _ *state) (float64, bool) { return math.Round(d.powerCappedNs), true },
	gpu.FieldThermalViolation: func(d *device, _ *state) (float64, bool) { return math.Round(d.thermalNs), true },
	gpu.FieldLowUtilViolation: func(d *device, _ *state) (float64, bool) { return math.Round(d.lowUtilNs), true },
	gpu.FieldEncUtil:          always(0),
	gpu.FieldDecUtil:          always(0),
	gpu.FieldPCIeReplay:       always(0),
	gpu.FieldPCIeTxThroughput: func(_ *device, s *state) (float64, bool) {
		return math.Round(s.util * simPCIeBytesPerPct / 2 / 1000), true
	},
	gpu.FieldPCIeRxThroughput: func(_ *device, s *state) (float64, bool) {
		return math.Round(s.util * simPCIeBytesPerPct / 1000), true
	},
	gpu.FieldRemappedRowsCorrectable:   always(0),
	gpu.FieldRemappedRowsUncorrectable: always(0),
	gpu.FieldRowRemapPending:           always(0),
	gpu.FieldRowRemapFailure:           always(0),
	gpu.FieldGREngineActive:            func(_ *device, s *state) (float64, bool) { return s.busy(), true },
	gpu.FieldSMActive:                  func(_ *device, s *state) (float64, bool) { return s.busy() * simSMActiveOfBusy, true },
	gpu.FieldSMOccupancy:               func(_ *device, s *state) (float64, bool) { return s.busy() * simOccupancyOfBusy, true },
	gpu.FieldTensorActive:              func(_ *device, s *state) (float64, bool) { return s.busy() * simTensorOfBusy, true },
	gpu.FieldDRAMActive:                func(_ *device, s *state) (float64, bool) { return s.busy() * simDRAMOfBusy, true },
	gpu.FieldFP64Active:                func(_ *device, s *state) (float64, bool) { return s.busy() * simFP64OfBusy, true },
	gpu.FieldFP32Active:                func(_ *device, s *state) (float64, bool) { return s.busy() * simFP32OfBusy, true },
	gpu.FieldFP16Active:                func(_ *device, s *state) (float64, bool) { return s.busy() * simFP16OfBusy, true },
	gpu.FieldPCIeTxBytes:               func(_ *device, s *state) (float64, bool) { return math.Round(s.util * simPCIeBytesPerPct / 2), true },
	gpu.FieldPCIeRxBytes:               func(_ *device, s *state) (float64, bool) { return math.Round(s.util * simPCIeBytesPerPct), true },
	gpu.FieldNVLinkTxBytes:             func(_ *device, s *state) (float64, bool) { return math.Round(s.util * simNVLinkBytesPerPct), true },
	gpu.FieldNVLinkRxBytes:             func(_ *device, s *state) (float64, bool) { return math.Round(s.util * simNVLinkBytesPerPct), true },
	gpu.FieldECCSBEVolatile:            always(0),
	gpu.FieldECCDBEVolatile:            always(0),
	gpu.FieldECCSBEAggregate:           always(0),
	gpu.FieldECCDBEAggregate:           always(0),
	gpu.FieldRetiredPagesSBE:           always(0),
	gpu.FieldRetiredPagesDBE:           always(0),
	gpu.FieldRetiredPending:            always(0),
	gpu.FieldSyncBoostViolation:        always(0),
	gpu.FieldBoardLimitViolation:       always(0),
	gpu.FieldReliabilityViolation:      always(0),
	gpu.FieldNVLinkCRCFlitErrors:       always(0),
	gpu.FieldNVLinkCRCDataErrors:       always(0),
	gpu.FieldNVLinkReplayErrors:        always(0),
	gpu.FieldNVLinkRecoveryErrors:      always(0),
	gpu.FieldFabricHealthSummary:       always(fabricHealthy),
	gpu.FieldFabricHealthMask:          always(0),
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
