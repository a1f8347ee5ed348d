package sim

import (
	"math"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// H100 figures the physics tests rely on (specFor's default model).
const (
	h100IdleW   = 70.0
	h100LimitW  = 700.0
	h100TotalMB = 81559.0
	h100ResvMB  = 519.0
)

func TestUtilizationShowsImmediately(t *testing.T) {
	for _, util := range []float64{0, 1, 37.4, 75, 100} {
		b, _ := newSim(t, Options{GPUs: 2})
		setLoad(t, b, "1", Load{Utilization: ptr(util)})
		rs := collect(t, b) // the clock has not moved
		if got, want := value(t, rs[1], gpu.FieldGPUUtil), math.Round(util); got != want {
			t.Errorf("util %v: GPU_UTIL = %v, want %v", util, got, want)
		}
		if got, want := value(t, rs[1], gpu.FieldMemCopyUtil), math.Round(util*0.6); got != want {
			t.Errorf("util %v: MEM_COPY_UTIL = %v, want %v", util, got, want)
		}
		if got := value(t, rs[0], gpu.FieldGPUUtil); got != 0 {
			t.Errorf("util %v: the other GPU's GPU_UTIL = %v, want 0", util, got)
		}
	}
}

// At 50% load an H100 targets 70 + (0.95*700 - 70) * 0.5 = 367.5 W. With a
// time constant of 2 s, power after t seconds is 367.5 - 297.5*exp(-t/2) and
// the energy drawn is 367.5*t - 297.5*2*(1 - exp(-t/2)) J:
//
//	t = 1 s:  power 187.06 W, energy   133.39 J
//	t = 30 s: power 367.50 W, energy 10430.00 J
//
// Temperature starts at 25 + 0.072*70 = 30.04 C and heads for
// 25 + 0.072*367.5 = 51.46 C with a 20 s time constant.
func TestPowerTemperatureAndEnergyResponse(t *testing.T) {
	const (
		targetW = 367.5
		idleC   = 25 + 0.072*h100IdleW
		steadyC = 25 + 0.072*targetW
	)
	tests := []struct {
		name        string
		step        time.Duration
		steps       int
		wantPowerW  float64
		wantEnergyJ float64
		// minTempFrac and maxTempFrac bound how far temperature has gone
		// from idle towards its steady state.
		minTempFrac, maxTempFrac float64
	}{
		{"1s in one step", time.Second, 1, 187.06, 133.39, 0, 0.1},
		{"1s in 10 steps", 100 * time.Millisecond, 10, 187.06, 133.39, 0, 0.1},
		{"30s in one step", 30 * time.Second, 1, targetW, 10430, 0.7, 0.85},
		{"30s at the default interval", time.Second, 30, targetW, 10430, 0.7, 0.85},
		{"30s in 300 steps", 100 * time.Millisecond, 300, targetW, 10430, 0.7, 0.85},
		{"300s", 10 * time.Second, 30, targetW, 367.5*300 - 595, 0.97, 1.01},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, clk := newSim(t, Options{GPUs: 1})
			setLoad(t, b, "0", Load{Utilization: ptr(50.0)})
			var r gpu.Reading
			for range tc.steps {
				clk.Step(tc.step)
				r = collect(t, b)[0]
			}
			power := value(t, r, gpu.FieldPowerUsage)
			if math.Abs(power-tc.wantPowerW) > 0.01 {
				t.Errorf("power = %v W, want %v W", power, tc.wantPowerW)
			}
			if power <= h100IdleW || power > targetW {
				t.Errorf("power = %v W, want in (%v, %v]", power, h100IdleW, targetW)
			}
			energyJ := value(t, r, gpu.FieldEnergy) / 1000
			if rel := math.Abs(energyJ-tc.wantEnergyJ) / tc.wantEnergyJ; rel > 0.01 {
				t.Errorf("energy = %v J, want %v J (off by %.2f%%)", energyJ, tc.wantEnergyJ, rel*100)
			}
			powerFrac := (power - h100IdleW) / (targetW - h100IdleW)
			// Readings round temperature to whole degrees.
			temp := value(t, r, gpu.FieldGPUTemp)
			lo := math.Floor(idleC + tc.minTempFrac*(steadyC-idleC))
			hi := math.Ceil(idleC + tc.maxTempFrac*(steadyC-idleC))
			if temp < lo || temp > hi {
				t.Errorf("temperature = %v C, want in [%v, %v]", temp, lo, hi)
			}
			if tempFrac := (temp - math.Round(idleC)) / (steadyC - idleC); tempFrac >= powerFrac && powerFrac < 0.999 {
				t.Errorf("temperature is %.0f%% of the way, power %.0f%%: temperature must lag", tempFrac*100, powerFrac*100)
			}
			if got, want := value(t, r, gpu.FieldMemoryTemp), temp+memTempOverC; math.Abs(got-want) > 1 {
				t.Errorf("memory temperature = %v C, want about %v C", got, want)
			}
		})
	}
}

// TestEnergyIsIntegralOfPower checks the counter against a step-by-step
// integration of the reported power across load changes, and that it never
// decreases.
func TestEnergyIsIntegralOfPower(t *testing.T) {
	b, clk := newSim(t, Options{GPUs: 1})
	loads := []float64{100, 20, 0, 80, 50}
	const dt = 10 * time.Millisecond
	var integral, last float64
	prevPower := h100IdleW
	for _, l := range loads {
		setLoad(t, b, "0", Load{Utilization: ptr(l)})
		for range 2000 { // 20 s per load
			clk.Step(dt)
			r := collect(t, b)[0]
			p := value(t, r, gpu.FieldPowerUsage)
			integral += (prevPower + p) / 2 * dt.Seconds() * 1000
			prevPower = p
			e := value(t, r, gpu.FieldEnergy)
			if e < last {
				t.Fatalf("energy decreased from %v to %v mJ", last, e)
			}
			last = e
		}
	}
	if rel := math.Abs(last-integral) / integral; rel > 0.001 {
		t.Errorf("energy = %v mJ, integral of power = %v mJ (off by %.3f%%)", last, integral, rel*100)
	}
}

func TestClocks(t *testing.T) {
	tests := []struct {
		util   float64
		wantSM float64
	}{
		{0, 345},
		{1, 1980},
		{100, 1980},
	}
	for _, tc := range tests {
		b, clk := newSim(t, Options{GPUs: 1})
		setLoad(t, b, "0", Load{Utilization: ptr(tc.util)})
		clk.Step(time.Minute)
		r := collect(t, b)[0]
		if got := value(t, r, gpu.FieldSMClock); got != tc.wantSM {
			t.Errorf("util %v: SM clock = %v MHz, want %v", tc.util, got, tc.wantSM)
		}
		if got := value(t, r, gpu.FieldMemClock); got != 2619 {
			t.Errorf("util %v: memory clock = %v MHz, want 2619", tc.util, got)
		}
		if got := value(t, r, gpu.FieldPowerLimit); got != h100LimitW {
			t.Errorf("util %v: power limit = %v W, want %v", tc.util, got, h100LimitW)
		}
	}
}

// The H100 constants never reach the throttle point, so the die temperature
// is set directly.
func TestSMClockThrottlesWhenHot(t *testing.T) {
	d := newDevice(0, "x", "H100", specFor("H100"), time.Time{})
	d.targetUtil = 100
	for _, tc := range []struct{ tempC, want float64 }{
		{80, 1980}, {85, 1980}, {90, 1980 * 0.85}, {200, 1980 * 0.5},
	} {
		d.tempC = tc.tempC
		if got := d.smClock(); got != math.Round(tc.want) {
			t.Errorf("at %v C: SM clock = %v MHz, want %v", tc.tempC, got, math.Round(tc.want))
		}
	}
}

func TestClockGoingBackwardsChangesNothing(t *testing.T) {
	b, clk := newSim(t, Options{GPUs: 1})
	setLoad(t, b, "0", Load{Utilization: ptr(100.0)})
	clk.Step(5 * time.Second)
	before := collect(t, b)[0]
	clk.Step(-3 * time.Second)
	after := collect(t, b)[0]
	for _, f := range []gpu.Field{gpu.FieldPowerUsage, gpu.FieldEnergy, gpu.FieldGPUTemp} {
		if value(t, before, f) != value(t, after, f) {
			t.Errorf("%v changed from %v to %v when the clock went back", f, value(t, before, f), value(t, after, f))
		}
	}
}

func TestMemoryAddsUp(t *testing.T) {
	tests := []struct {
		name     string
		usedMiB  float64
		wantUsed float64
	}{
		{"idle", 0, 0},
		{"some", 40000, 40000},
		{"fractional", 100.5, 101},
		{"all", h100TotalMB - h100ResvMB, h100TotalMB - h100ResvMB},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := newSim(t, Options{GPUs: 1})
			setLoad(t, b, "0", Load{MemoryUsedMiB: ptr(tc.usedMiB)})
			r := collect(t, b)[0]
			used, free := value(t, r, gpu.FieldFBUsed), value(t, r, gpu.FieldFBFree)
			resv, total := value(t, r, gpu.FieldFBReserved), value(t, r, gpu.FieldFBTotal)
			if used != tc.wantUsed {
				t.Errorf("used = %v MiB, want %v", used, tc.wantUsed)
			}
			if total != h100TotalMB || resv != h100ResvMB {
				t.Errorf("total, reserved = %v, %v MiB, want %v, %v", total, resv, h100TotalMB, h100ResvMB)
			}
			if used+free+resv != total {
				t.Errorf("used %v + free %v + reserved %v = %v, want total %v", used, free, resv, used+free+resv, total)
			}
		})
	}
}

func TestMemoryOverLimitIsRejectedWhole(t *testing.T) {
	b, _ := newSim(t, Options{GPUs: 1})
	err := b.SetLoad("0", Load{Utilization: ptr(90.0), MemoryUsedMiB: ptr(h100TotalMB)})
	if err == nil {
		t.Fatal("SetLoad with more memory than the GPU has: want an error")
	}
	r := collect(t, b)[0]
	if got := value(t, r, gpu.FieldGPUUtil); got != 0 {
		t.Errorf("a rejected load changed utilization to %v", got)
	}
	if got := value(t, r, gpu.FieldFBUsed); got != 0 {
		t.Errorf("a rejected load changed memory used to %v", got)
	}
}

func TestSpecs(t *testing.T) {
	tests := []struct {
		model            string
		totalMiB, limitW float64
	}{
		{"NVIDIA H100 80GB HBM3", 81559, 700},
		{"NVIDIA H200", 143771, 700},
		{"NVIDIA A100-SXM4-40GB", 40960, 400},
		{"NVIDIA A100-SXM4-80GB", 81920, 400},
		{"NVIDIA L4", 23034, 72},
		{"Something Else", 81559, 700},
	}
	for _, tc := range tests {
		b, _ := newSim(t, Options{GPUs: 1, Model: tc.model})
		r := collect(t, b)[0]
		if r.Device.ModelName != tc.model {
			t.Errorf("%s: modelName = %q", tc.model, r.Device.ModelName)
		}
		if got := value(t, r, gpu.FieldFBTotal); got != tc.totalMiB {
			t.Errorf("%s: FB total = %v MiB, want %v", tc.model, got, tc.totalMiB)
		}
		if got := value(t, r, gpu.FieldPowerLimit); got != tc.limitW {
			t.Errorf("%s: power limit = %v W, want %v", tc.model, got, tc.limitW)
		}
	}
}

// TestVGPULicence: bare metal has no licence field at all; a vGPU guest
// serves 1 while licensed and 0 once the licence is lost.
func TestVGPULicence(t *testing.T) {
	bare, _ := newSim(t, Options{GPUs: 1})
	if _, ok := collect(t, bare)[0].Get(gpu.FieldVGPULicensed); ok {
		t.Error("bare metal serves a vGPU licence")
	}
	if err := bare.SetLoad("0", Load{VGPULicensed: ptr(true)}); err == nil {
		t.Error("a licence set on bare metal was accepted")
	}
	guest, _ := newSim(t, Options{GPUs: 2, VGPU: true})
	for _, tc := range []struct {
		set  *bool
		want [2]float64
	}{
		{nil, [2]float64{1, 1}},
		{ptr(false), [2]float64{1, 0}},
		{ptr(true), [2]float64{1, 1}},
	} {
		if tc.set != nil {
			setLoad(t, guest, "1", Load{VGPULicensed: tc.set})
		}
		rs := collect(t, guest)
		for i := range rs {
			if got := value(t, rs[i], gpu.FieldVGPULicensed); got != tc.want[i] {
				t.Errorf("after %v: GPU %d licence %v, want %v", tc.set, i, got, tc.want[i])
			}
		}
	}
}
