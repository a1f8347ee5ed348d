package sim

import (
	"context"
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

var (
	gpuUUIDRe = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	migUUIDRe = regexp.MustCompile(`^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

func TestNewRejectsInvalidOptions(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"no GPUs", Options{GPUs: 0}, "at least one GPU"},
		{"negative GPUs", Options{GPUs: -1}, "at least one GPU"},
		{"profile without memory", Options{GPUs: 1, MIGProfiles: []string{"1g"}}, `MIG profile "1g"`},
		{"profile without gb", Options{GPUs: 1, MIGProfiles: []string{"1g.10"}}, `MIG profile "1g.10"`},
		{"non-numeric slices", Options{GPUs: 1, MIGProfiles: []string{"xg.10gb"}}, `MIG profile "xg.10gb"`},
		{"zero slices", Options{GPUs: 1, MIGProfiles: []string{"0g.10gb"}}, `MIG profile "0g.10gb"`},
		{"empty profile", Options{GPUs: 1, MIGProfiles: []string{""}}, `MIG profile ""`},
		{"too many slices", Options{GPUs: 1, MIGProfiles: []string{"4g.40gb", "4g.40gb"}}, "needs 8 slices; the GPU has 7"},
		{"eight 1g", Options{GPUs: 1, MIGProfiles: strings.Split("1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb", ",")}, "needs 8 slices"},
		{"too much memory", Options{GPUs: 1, MIGProfiles: []string{"1g.20gb", "1g.20gb", "1g.20gb", "1g.20gb", "1g.20gb"}}, "MiB of memory"},
		{"MIG on a GPU without MIG", Options{GPUs: 1, Model: "NVIDIA L4", MIGProfiles: []string{"1g.10gb"}}, "the GPU has 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(tc.opts)
			if err == nil {
				t.Fatalf("New(%+v) = %v, want an error", tc.opts, b)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not mention %q", err, tc.wantErr)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	b, err := New(Options{GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if b.Kind() != gpu.KindSim || b.DriverVersion() != "550.54.15-sim" {
		t.Errorf("Kind, DriverVersion = %v, %q", b.Kind(), b.DriverVersion())
	}
	r := collect(t, b)[0]
	if r.Device.ModelName != "NVIDIA H100 80GB HBM3" {
		t.Errorf("default model = %q", r.Device.ModelName)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	b, err = New(Options{GPUs: 1, DriverVersion: "999.1"})
	if err != nil || b.DriverVersion() != "999.1" {
		t.Errorf("DriverVersion = %q, %v; want 999.1", b.DriverVersion(), err)
	}
}

func TestCollectHonoursContext(t *testing.T) {
	b, _ := newSim(t, Options{GPUs: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Collect(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Collect on a cancelled context: err = %v, want context.Canceled", err)
	}
}

func TestWholeGPUIdentity(t *testing.T) {
	b, _ := newSim(t, Options{GPUs: 3, Identity: "node-a"})
	rs := collect(t, b)
	if len(rs) != 3 {
		t.Fatalf("got %d readings, want 3", len(rs))
	}
	seenBus := map[string]bool{}
	for i, r := range rs {
		d := r.Device
		if d.Index != i || d.Minor != i || d.MIG != nil || d.ID() != d.UUID {
			t.Errorf("reading %d: device %+v", i, d)
		}
		if !gpuUUIDRe.MatchString(d.UUID) {
			t.Errorf("reading %d: UUID %q is not GPU-<uuid>", i, d.UUID)
		}
		if seenBus[d.PCIBusID] || !strings.HasPrefix(d.PCIBusID, "00000000:") {
			t.Errorf("reading %d: PCI bus id %q duplicated or malformed", i, d.PCIBusID)
		}
		seenBus[d.PCIBusID] = true
		if !r.Healthy() {
			t.Errorf("reading %d unhealthy: %v", i, r.Err)
		}
	}
}

var (
	layout = []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}
	// layoutMiB is 96% of the profile's nominal GB, as MIG reports.
	layoutMiB = map[string]float64{"3g.40gb": 39321, "2g.20gb": 19660, "1g.10gb": 9830}
)

func TestMIGLayout(t *testing.T) {
	b, _ := newSim(t, Options{GPUs: 2, MIGProfiles: layout, Identity: "node-a"})
	rs := collect(t, b)
	if len(rs) != 2*(1+len(layout)) {
		t.Fatalf("got %d readings, want %d", len(rs), 2*(1+len(layout)))
	}
	uuids := map[string]bool{}
	for g := range 2 {
		parent := rs[g*(1+len(layout))]
		if parent.Device.MIG != nil || parent.Device.Index != g {
			t.Fatalf("reading %d: want GPU %d, got %+v", g*(1+len(layout)), g, parent.Device)
		}
		uuids[parent.Device.UUID] = true
		giIDs := map[int]bool{}
		for j, p := range layout {
			r := rs[g*(1+len(layout))+1+j]
			m := r.Device.MIG
			if m == nil {
				t.Fatalf("GPU %d instance %d: no MIG info", g, j)
			}
			if m.Profile != p {
				t.Errorf("GPU %d instance %d: profile %q, want %q", g, j, m.Profile, p)
			}
			if giIDs[m.GPUInstanceID] {
				t.Errorf("GPU %d: GPU instance id %d used twice", g, m.GPUInstanceID)
			}
			giIDs[m.GPUInstanceID] = true
			if !migUUIDRe.MatchString(m.UUID) || uuids[m.UUID] {
				t.Errorf("GPU %d instance %d: MIG UUID %q malformed or not unique", g, j, m.UUID)
			}
			uuids[m.UUID] = true
			if r.Device.ID() != m.UUID {
				t.Errorf("ID() = %q, want the MIG UUID", r.Device.ID())
			}
			// The GPU-level identity is the parent's, as in dcgm-exporter.
			dev := r.Device
			dev.MIG = nil
			if dev != parent.Device {
				t.Errorf("instance identity %+v, want the parent's %+v", dev, parent.Device)
			}
			if got, want := value(t, r, gpu.FieldFBTotal), layoutMiB[p]; got != want {
				t.Errorf("%s: FB total = %v MiB, want %v", p, got, want)
			}
			// Like NVML, an instance reports memory only.
			if _, ok := r.Get(gpu.FieldGPUUtil); ok {
				t.Errorf("%s: MIG instance reports GPU utilization", p)
			}
		}
	}
}

func migUUIDs(t *testing.T, identity string) []string {
	t.Helper()
	b, _ := newSim(t, Options{GPUs: 2, MIGProfiles: layout, Identity: identity})
	var out []string
	for _, r := range collect(t, b) {
		out = append(out, r.Device.ID())
	}
	return out
}

func TestUUIDsStableAndPerIdentity(t *testing.T) {
	a1, a2, other := migUUIDs(t, "node-a"), migUUIDs(t, "node-a"), migUUIDs(t, "node-b")
	for i := range a1 {
		if a1[i] != a2[i] {
			t.Errorf("device %d: UUID %q then %q with the same identity", i, a1[i], a2[i])
		}
	}
	seen := map[string]bool{}
	for _, id := range a1 {
		seen[id] = true
	}
	for i, id := range other {
		if seen[id] {
			t.Errorf("device %d: UUID %q shared by two identities", i, id)
		}
	}
}

func TestSetLoadTargets(t *testing.T) {
	b, _ := newSim(t, Options{GPUs: 2, MIGProfiles: layout})
	rs := collect(t, b)
	gpu1 := rs[1+len(layout)]
	mig := rs[1+len(layout)+2] // GPU 1's 1g.10gb instance
	tests := []struct {
		name, id string
		load     Load
		check    func(rs []gpu.Reading) (got, want float64)
	}{
		{"index", "1", Load{Utilization: ptr(10.0)}, func(rs []gpu.Reading) (float64, float64) {
			return value(t, rs[1+len(layout)], gpu.FieldGPUUtil), 10
		}},
		{"GPU UUID", gpu1.Device.UUID, Load{Utilization: ptr(20.0)}, func(rs []gpu.Reading) (float64, float64) {
			return value(t, rs[1+len(layout)], gpu.FieldGPUUtil), 20
		}},
		{"GPU UUID in upper case", strings.ToUpper(gpu1.Device.UUID), Load{Utilization: ptr(30.0)}, func(rs []gpu.Reading) (float64, float64) {
			return value(t, rs[1+len(layout)], gpu.FieldGPUUtil), 30
		}},
		{"MIG UUID sets the instance's memory", mig.Device.ID(), Load{MemoryUsedMiB: ptr(1234.0)}, func(rs []gpu.Reading) (float64, float64) {
			return value(t, rs[1+len(layout)+2], gpu.FieldFBUsed), 1234
		}},
		{"MIG memory counts on the parent", mig.Device.ID(), Load{MemoryUsedMiB: ptr(1000.0)}, func(rs []gpu.Reading) (float64, float64) {
			return value(t, rs[1+len(layout)], gpu.FieldFBUsed), 1000
		}},
		{"MIG UUID sets the parent's utilization", mig.Device.ID(), Load{Utilization: ptr(40.0)}, func(rs []gpu.Reading) (float64, float64) {
			return value(t, rs[1+len(layout)], gpu.FieldGPUUtil), 40
		}},
	}
	for _, tc := range tests {
		setLoad(t, b, tc.id, tc.load)
		if got, want := tc.check(collect(t, b)); got != want {
			t.Errorf("%s: got %v, want %v", tc.name, got, want)
		}
	}
	if got := value(t, collect(t, b)[0], gpu.FieldGPUUtil); got != 0 {
		t.Errorf("GPU 0 utilization changed to %v", got)
	}
}

func TestSetLoadErrors(t *testing.T) {
	b, _ := newSim(t, Options{GPUs: 2, MIGProfiles: []string{"1g.10gb"}})
	mig := collect(t, b)[1].Device.ID()
	tests := []struct {
		name, id    string
		load        Load
		wantUnknown bool
		wantErr     string
	}{
		{"index out of range", "2", Load{}, true, "no such simulated GPU"},
		{"negative index", "-1", Load{}, true, "no such"},
		{"unknown UUID", "GPU-00000000-0000-0000-0000-000000000000", Load{}, true, "no such"},
		{"empty id", "", Load{}, true, "no such"},
		{"utilization below 0", "0", Load{Utilization: ptr(-0.1)}, false, "outside 0-100"},
		{"utilization above 100", "0", Load{Utilization: ptr(100.5)}, false, "outside 0-100"},
		{"utilization NaN", "0", Load{Utilization: ptr(math.NaN())}, false, "outside 0-100"},
		{"negative memory", "0", Load{MemoryUsedMiB: ptr(-1.0)}, false, "0 or more"},
		{"NaN memory", "0", Load{MemoryUsedMiB: ptr(math.NaN())}, false, "0 or more"},
		{"memory over the GPU", "0", Load{MemoryUsedMiB: ptr(81041.0)}, false, "exceeds"},
		{"memory over the instance", mig, Load{MemoryUsedMiB: ptr(9831.0)}, false, "exceeds the 9830 MiB"},
	}
	for _, tc := range tests {
		err := b.SetLoad(tc.id, tc.load)
		if err == nil {
			t.Errorf("%s: SetLoad(%q) succeeded, want an error", tc.name, tc.id)
			continue
		}
		if errors.Is(err, ErrUnknownGPU) != tc.wantUnknown {
			t.Errorf("%s: errors.Is(%v, ErrUnknownGPU) = %v, want %v", tc.name, err, !tc.wantUnknown, tc.wantUnknown)
		}
		if !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %q does not mention %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestFailAndRecover(t *testing.T) {
	b, _ := newSim(t, Options{GPUs: 2, MIGProfiles: []string{"3g.40gb"}})
	setLoad(t, b, "1", Load{Utilization: ptr(60.0), Fail: ptr(true)})
	rs := collect(t, b)
	// GPU 0 and its instance, then the lost GPU 1 alone: its instances
	// went with it.
	if len(rs) != 3 {
		t.Fatalf("got %d readings while GPU 1 fails, want 3", len(rs))
	}
	lost := rs[2]
	if lost.Healthy() || lost.Device.Index != 1 || lost.Device.MIG != nil {
		t.Fatalf("failing GPU reading: healthy=%v device=%+v", lost.Healthy(), lost.Device)
	}
	if !strings.Contains(lost.Err.Error(), "gpu 1") {
		t.Errorf("error %q does not name the GPU", lost.Err)
	}
	for f := gpu.Field(0); f < gpu.NumFields; f++ {
		if _, ok := lost.Get(f); ok {
			t.Errorf("failing GPU reports field %v", f)
		}
	}
	if !rs[0].Healthy() || !rs[1].Healthy() {
		t.Errorf("GPU 0 unhealthy while GPU 1 fails")
	}

	setLoad(t, b, "1", Load{Fail: ptr(false)})
	rs = collect(t, b)
	if len(rs) != 4 {
		t.Fatalf("got %d readings after recovery, want 4", len(rs))
	}
	for _, r := range rs {
		if !r.Healthy() {
			t.Errorf("device %s still unhealthy: %v", r.Device.ID(), r.Err)
		}
	}
	if got := value(t, rs[2], gpu.FieldGPUUtil); got != 60 {
		t.Errorf("utilization after recovery = %v, want the 60 set while failing", got)
	}
}

func TestXIDCounts(t *testing.T) {
	b, _ := newSim(t, Options{GPUs: 2})
	if got := value(t, collect(t, b)[0], gpu.FieldLastXID); got != 0 {
		t.Errorf("last XID before any = %v, want 0", got)
	}
	for _, x := range []uint64{79, 48, 79, 0} { // 0 records nothing
		setLoad(t, b, "0", Load{XID: ptr(x)})
	}
	rs := collect(t, b)
	if got := value(t, rs[0], gpu.FieldLastXID); got != 79 {
		t.Errorf("last XID = %v, want 79", got)
	}
	want := map[uint64]uint64{79: 2, 48: 1}
	if len(rs[0].XIDCounts) != len(want) {
		t.Errorf("XID counts = %v, want %v", rs[0].XIDCounts, want)
	}
	for code, n := range want {
		if rs[0].XIDCounts[code] != n {
			t.Errorf("XID %d count = %d, want %d", code, rs[0].XIDCounts[code], n)
		}
	}
	if len(rs[1].XIDCounts) != 0 {
		t.Errorf("GPU 1 XID counts = %v, want none", rs[1].XIDCounts)
	}
	// A reading owns its map: changing it must not reach the backend.
	rs[0].XIDCounts[79] = 1000
	if got := collect(t, b)[0].XIDCounts[79]; got != 2 {
		t.Errorf("XID 79 count = %d after a reader changed its copy, want 2", got)
	}
}

// TestXIDCodesBounded floods a GPU with every code a uint16 holds: only
// real XID codes are taken, and no more distinct ones than gpu.MaxXIDCodes,
// so the per-code series stay a bounded set.
func TestXIDCodesBounded(t *testing.T) {
	b, _ := newSim(t, Options{GPUs: 1})
	accepted := 0
	for code := uint64(1); code <= 1<<16; code++ {
		err := b.SetLoad("0", Load{XID: ptr(code)})
		switch {
		case !gpu.ValidXID(code):
			if err == nil || !strings.Contains(err.Error(), "outside 1-255") {
				t.Fatalf("xid %d: err = %v, want a range error", code, err)
			}
		case accepted < gpu.MaxXIDCodes:
			if err != nil {
				t.Fatalf("xid %d: %v", code, err)
			}
			accepted++
		default:
			if err == nil || !strings.Contains(err.Error(), "distinct XID codes") {
				t.Fatalf("xid %d: err = %v, want the distinct-code cap", code, err)
			}
		}
	}
	// A code already counted keeps counting past the cap.
	setLoad(t, b, "0", Load{XID: ptr(uint64(1))})
	r := collect(t, b)[0]
	if len(r.XIDCounts) != gpu.MaxXIDCodes {
		t.Errorf("%d distinct XID codes kept, want %d", len(r.XIDCounts), gpu.MaxXIDCodes)
	}
	for code := range r.XIDCounts {
		if !gpu.ValidXID(code) {
			t.Errorf("kept XID %d", code)
		}
	}
	if r.XIDCounts[1] != 2 {
		t.Errorf("XID 1 count = %d, want 2", r.XIDCounts[1])
	}
	if got := value(t, r, gpu.FieldLastXID); got != 1 {
		t.Errorf("last XID = %v, want 1", got)
	}
}

// TestMIGMemoryWithinParent fills a MIG GPU every way the load API allows:
// the GPU's used memory never exceeds what it has, its free memory never
// goes negative, and used, free and reserved add up to the total.
func TestMIGMemoryWithinParent(t *testing.T) {
	b, _ := newSim(t, Options{GPUs: 1, MIGProfiles: layout})
	rs := collect(t, b)
	parentTotal := value(t, rs[0], gpu.FieldFBTotal)
	reserved := value(t, rs[0], gpu.FieldFBReserved)
	instances := 0.0
	for _, r := range rs[1:] {
		instances += value(t, r, gpu.FieldFBTotal)
	}
	if instances > parentTotal-reserved {
		t.Fatalf("instances hold %v MiB, the GPU %v", instances, parentTotal-reserved)
	}
	outside := parentTotal - reserved - instances

	if err := b.SetLoad("0", Load{MemoryUsedMiB: ptr(outside + 1)}); err == nil ||
		!strings.Contains(err.Error(), "outside its MIG instances") {
		t.Errorf("GPU memory beyond what its instances leave: err = %v, want a refusal", err)
	}
	setLoad(t, b, "0", Load{MemoryUsedMiB: ptr(outside)})
	for _, r := range rs[1:] {
		setLoad(t, b, r.Device.ID(), Load{MemoryUsedMiB: ptr(value(t, r, gpu.FieldFBTotal))})
	}
	rs = collect(t, b)
	used, free := value(t, rs[0], gpu.FieldFBUsed), value(t, rs[0], gpu.FieldFBFree)
	if used > parentTotal-reserved || free < 0 || used+free+reserved != parentTotal {
		t.Errorf("full MIG GPU: used %v, free %v, reserved %v, total %v", used, free, reserved, parentTotal)
	}
	if used != math.Round(outside+instances) {
		t.Errorf("used %v, want the GPU's own %v plus its instances' %v", used, outside, instances)
	}
}

func TestProfilingFollowsLoad(t *testing.T) {
	b, err := New(Options{GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	get := func(r gpu.Reading, f gpu.Field) float64 {
		t.Helper()
		v, ok := r.Get(f)
		if !ok {
			t.Fatalf("%s absent", f)
		}
		return v
	}
	var prevTensor float64
	for i, util := range []float64{0, 40, 90} {
		if err := b.SetLoad("0", Load{Utilization: &util}); err != nil {
			t.Fatal(err)
		}
		r := collect(t, b)[0]
		gr, sm, occ, tensor, dram := get(r, gpu.FieldGREngineActive), get(r, gpu.FieldSMActive),
			get(r, gpu.FieldSMOccupancy), get(r, gpu.FieldTensorActive), get(r, gpu.FieldDRAMActive)
		if gr != get(r, gpu.FieldGPUUtil)/100 || sm > gr || occ > sm || tensor > gr || dram > gr || gr > 1 {
			t.Errorf("util %v: gr %v sm %v occupancy %v tensor %v dram %v out of order", util, gr, sm, occ, tensor, dram)
		}
		if i > 0 && tensor <= prevTensor {
			t.Errorf("util %v: tensor activity %v did not rise from %v", util, tensor, prevTensor)
		}
		prevTensor = tensor
		for _, f := range []gpu.Field{gpu.FieldEncUtil, gpu.FieldDecUtil, gpu.FieldPCIeReplay,
			gpu.FieldRemappedRowsCorrectable, gpu.FieldRemappedRowsUncorrectable, gpu.FieldRowRemapPending, gpu.FieldRowRemapFailure} {
			if v := get(r, f); v != 0 {
				t.Errorf("%s = %v on a healthy simulated GPU", f, v)
			}
		}
		if _, ok := r.Get(gpu.FieldVGPULicensed); ok {
			t.Error("a bare-metal simulated GPU reports a vGPU licence")
		}
	}
}

func TestNVLinkThroughputFollowsLoad(t *testing.T) {
	b, err := New(Options{GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	util := 50.0
	if err := b.SetLoad("0", Load{Utilization: &util}); err != nil {
		t.Fatal(err)
	}
	got, ok := collect(t, b)[0].Get(gpu.FieldNVLinkBandwidth)
	// 50% load moves 2 * 50 * 1e9 bytes a second, TX plus RX.
	if !ok || got != 2*50*simNVLinkBytesPerPct {
		t.Errorf("NVLink throughput at 50%% = %v B/s, want %v", got, 2*50*simNVLinkBytesPerPct)
	}
}

// TestViolationCounters: the power, thermal and low-utilization violation
// counters accrue the time the simulated GPU spends capped, hot or idle.
func TestViolationCounters(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := New(Options{GPUs: 1, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Second) // idle
	r := collect(t, b)[0]
	if v, _ := r.Get(gpu.FieldLowUtilViolation); v != 10e9 {
		t.Errorf("low-utilization violation after 10 s idle = %v ns, want 1e10", v)
	}
	full := 100.0
	if err := b.SetLoad("0", Load{Utilization: &full}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(5 * time.Second)
	r = collect(t, b)[0]
	if v, _ := r.Get(gpu.FieldPowerViolation); v != 5e9 {
		t.Errorf("power violation after 5 s at full load = %v ns, want 5e9", v)
	}
	if v, _ := r.Get(gpu.FieldLowUtilViolation); v != 10e9 {
		t.Errorf("low-utilization violation grew under load: %v", v)
	}
	// An H100 at full load settles near 73 C, under the throttle point.
	now = now.Add(10 * time.Minute)
	r = collect(t, b)[0]
	if v, ok := r.Get(gpu.FieldThermalViolation); !ok || v != 0 {
		t.Errorf("thermal violation below the throttle temperature = %v (%v), want 0", v, ok)
	}
}
