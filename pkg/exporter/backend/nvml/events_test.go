//go:build linux && cgo

package nvml

import (
	"maps"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// xidWant is the XID state a reading must show.
type xidWant struct {
	counts map[uint64]uint64
	last   float64
}

func hasXIDs(r gpu.Reading, w xidWant) bool {
	last, ok := r.Get(gpu.FieldLastXID)
	return ok && last == w.last && r.XIDCounts != nil && maps.Equal(r.XIDCounts, w.counts)
}

// awaitXIDs waits until the watcher has consumed the script and Collect
// shows want, one entry per reading.
func awaitXIDs(t *testing.T, f *fixture, b *Backend, want []xidWant) []gpu.Reading {
	t.Helper()
	select {
	case <-f.drained:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher did not consume the scripted events")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rs := collect(t, b)
		if len(rs) != len(want) {
			t.Fatalf("got %d readings, want %d", len(rs), len(want))
		}
		ok := true
		for i := range rs {
			ok = ok && hasXIDs(rs[i], want[i])
		}
		if ok {
			return rs
		}
		if time.Now().After(deadline) {
			for i, r := range rs {
				last, _ := r.Get(gpu.FieldLastXID)
				t.Errorf("%s: XIDCounts %v, LastXID %v; want %v, %v", r.Device.ID(), r.XIDCounts, last, want[i].counts, want[i].last)
			}
			t.FailNow()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestXIDEvents(t *testing.T) {
	f := newFixture(healthyGPU(0), healthyGPU(1))
	// Block like a real Wait, so that Close's promptness is measured.
	f.idleWait = time.Hour
	f.script(
		waitResult{ret: gonvml.ERROR_TIMEOUT},
		xid(f.devices[1], 79, noInstance),
		waitResult{ret: gonvml.ERROR_UNKNOWN}, // logged, retried after a pause
		xid(f.devices[1], 79, noInstance),
		xid(f.devices[0], 48, noInstance),
	)
	b := newBackend(t, f, Options{XIDEvents: true})

	rs := awaitXIDs(t, f, b, []xidWant{
		{map[uint64]uint64{48: 1}, 48},
		{map[uint64]uint64{79: 2}, 79},
	})
	// Readings get copies: changing one must not change the backend's count.
	rs[1].XIDCounts[79] = 1000
	if again := collect(t, b); again[1].XIDCounts[79] != 2 {
		t.Errorf("XIDCounts shares the watcher's map: %v", again[1].XIDCounts)
	}
	for i, r := range rs {
		assertFields(t, r, with(healthyFields(i), gpu.FieldLastXID, []float64{48, 79}[i]))
	}

	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("Close took %v, want about a wait timeout (1s) at most", d)
	}
	if ms := f.maxWaitMs.Load(); ms == 0 || ms > 1000 {
		t.Errorf("Wait timeout %d ms, want 1..1000", ms)
	}
	if f.frees.Load() != 1 || f.shutdowns.Load() != 1 {
		t.Errorf("frees, shutdowns = %d, %d; want 1, 1", f.frees.Load(), f.shutdowns.Load())
	}
}

func TestXIDEventsInMIGInstances(t *testing.T) {
	f := newFixture(migGPU())
	migHandle := mockMIG(f.gpus[0].migs[2], f.devices[0]) // MIG-aaaa, GPU instance 7
	f.script(
		xid(f.devices[0], 31, 5), // raised in GPU instance 5, reported on the GPU
		xid(migHandle, 43, 7),    // reported on the MIG handle itself
		xid(f.devices[0], 94, noInstance),
	)
	b := newBackend(t, f, Options{XIDEvents: true})

	// Order: GPU, then instances 3, 5, 7.
	awaitXIDs(t, f, b, []xidWant{
		{map[uint64]uint64{31: 1, 43: 1, 94: 1}, 94},
		{map[uint64]uint64{}, 0},
		{map[uint64]uint64{31: 1}, 31},
		{map[uint64]uint64{43: 1}, 43},
	})
}

func TestXIDEventsUnsupportedOnOneGPU(t *testing.T) {
	f := newFixture(healthyGPU(0), healthyGPU(1))
	f.gpus[1].setRet("RegisterEvents", gonvml.ERROR_NOT_SUPPORTED)
	stranger := mockGPU(healthyGPU(7)) // a GPU this backend does not know
	f.script(xid(stranger, 13, noInstance), xid(f.devices[0], 13, noInstance))
	b := newBackend(t, f, Options{XIDEvents: true})

	select {
	case <-f.drained:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher did not consume the scripted events")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rs := collect(t, b)
		if hasXIDs(rs[0], xidWant{map[uint64]uint64{13: 1}, 13}) {
			// A GPU without XID events says nothing about XIDs, not "none".
			if _, ok := rs[1].Get(gpu.FieldLastXID); ok || rs[1].XIDCounts != nil || rs[1].Err != nil {
				t.Errorf("gpu 1: LastXID present=%v, XIDCounts %v, Err %v", ok, rs[1].XIDCounts, rs[1].Err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gpu 0: XIDCounts %v, want {13:1}", rs[0].XIDCounts)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func with(m map[gpu.Field]float64, f gpu.Field, v float64) map[gpu.Field]float64 {
	m[f] = v
	return m
}

// TestXIDEventsBounded feeds the watcher what a faulty driver could send:
// codes outside the XID range, more distinct codes than are kept, and GPU
// instance IDs no MIG layout has. The tallies stay bounded and every event
// not counted is counted as dropped.
func TestXIDEventsBounded(t *testing.T) {
	f := newFixture(healthyGPU(0))
	var events []waitResult
	for _, code := range []uint64{0, gpu.MaxXID + 1, 1 << 40} {
		events = append(events, xid(f.devices[0], code, noInstance))
	}
	for code := uint64(1); code <= gpu.MaxXIDCodes+8; code++ {
		events = append(events, xid(f.devices[0], code, noInstance))
	}
	for gi := uint32(100); gi < 200; gi++ {
		events = append(events, xid(f.devices[0], 1, gi))
	}
	f.script(events...)
	b := newBackend(t, f, Options{XIDEvents: true})

	want := map[uint64]uint64{}
	for code := uint64(1); code <= gpu.MaxXIDCodes; code++ {
		want[code] = 1
	}
	want[1] += 100
	rs := awaitXIDs(t, f, b, []xidWant{{want, 1}})
	if len(rs[0].XIDCounts) != gpu.MaxXIDCodes {
		t.Errorf("%d codes kept, want %d", len(rs[0].XIDCounts), gpu.MaxXIDCodes)
	}
	if got := b.DroppedXIDEvents(); got != 3+8 {
		t.Errorf("DroppedXIDEvents() = %d, want 11", got)
	}
	b.xid.mu.Lock()
	tallies := len(b.xid.tallies[f.gpus[0].uuid])
	b.xid.mu.Unlock()
	if tallies != 1 {
		t.Errorf("%d tallies for one GPU without MIG instances, want 1", tallies)
	}
}
