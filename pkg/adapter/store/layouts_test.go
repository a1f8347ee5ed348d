package store

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// TestWindowsOnlyForHistograms: a source whose samples never carry a
// histogram keeps no window, yet its samples are ordered, served and
// forgotten as before; a window starts with the first histogram and then
// takes every sample, so that a histogram read's staleness is the pod's.
func TestWindowsOnlyForHistograms(t *testing.T) {
	s := New(8)
	gpu := Key{"ns", "gpu-only"}
	for i := range 5 {
		var smp Sample
		smp.Time = t0.Add(time.Duration(i) * 5 * time.Second)
		smp.Set(signal.GPUUtilization, float64(10*i))
		s.PutPod(gpu, signal.SourceGPU, smp)
	}
	var older Sample
	older.Time = t0
	older.Set(signal.GPUUtilization, 99)
	s.PutPod(gpu, signal.SourceGPU, older) // not newer: dropped
	now := t0.Add(20 * time.Second)
	if got, ok := s.Latest(gpu, signal.SourceGPU, now, 10*time.Second); !ok {
		t.Fatal("the GPU-only pod's newest sample is not served")
	} else if v, _ := got.Get(signal.GPUUtilization); v != 40 {
		t.Fatalf("newest GPU utilization %v, want 40 (an older sample replaced it)", v)
	}
	if w := s.window(gpu, signal.SourceGPU); w.buf != nil {
		t.Fatalf("a source with no histogram keeps a window of %d samples", w.n)
	}

	inf := Key{"ns", "late-ttft"}
	put := func(i int, h *histogram.Histogram) {
		s.PutPod(inf, signal.SourceInference, sample(t0.Add(time.Duration(i)*5*time.Second), 1, h))
	}
	put(0, nil)
	put(1, nil)
	if w := s.window(inf, signal.SourceInference); w.buf != nil {
		t.Fatal("samples without a histogram started a window")
	}
	put(2, hist(1, 2, 3))
	put(3, hist(2, 4, 6))
	put(4, nil) // the server's histogram is missing from one scrape
	if w := s.window(inf, signal.SourceInference); w.n != 3 {
		t.Fatalf("window holds %d samples after its first histogram, want 3", w.n)
	}
	// Fresh by the newest sample (t=20s), with the histograms of 10s and 15s.
	got, ok := s.HistIncrease(inf, signal.HistTTFT, t0.Add(20*time.Second), 30*time.Second, 6*time.Second)
	if !ok {
		t.Fatal("no increase over the window's two histograms")
	}
	want, err := histogram.ExtrapolatedIncrease([]histogram.Sample{{T: t0.Add(10 * time.Second), H: hist(1, 2, 3)},
		{T: t0.Add(15 * time.Second), H: hist(2, 4, 6)}}, t0.Add(20*time.Second), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want.Counts {
		if math.Abs(got.Counts[i]-want.Counts[i]) > 1e-9 {
			t.Fatalf("bucket %d: %v, want PromQL's %v", i, got.Counts[i], want.Counts[i])
		}
	}

	if pods, _ := s.Forget(t0.Add(time.Hour), time.Minute); pods != 2 {
		t.Fatalf("forgot %d stale pods, want 2", pods)
	}
}

// TestLayoutsShared: histograms of one layout, each parsed into its own
// slices, end up sharing one copy of their bounds across pods, in the
// windows and in the newest prefill histogram; another layout gets its
// own; and made-up layouts past maxLayouts are kept as parsed, the table no
// larger, their values unchanged.
func TestLayoutsShared(t *testing.T) {
	vllm := []float64{0.1, 1, math.Inf(1)}
	other := []float64{0.5, 5, math.Inf(1)}
	parsed := func(bounds []float64, c ...float64) *histogram.Histogram {
		return &histogram.Histogram{Bounds: slices.Clone(bounds), Counts: c, Count: c[len(c)-1]}
	}
	s := New(8)
	for i, name := range []string{"a", "b", "c"} {
		smp := Sample{Time: t0, TTFT: parsed(vllm, 1, 2, 3), Prefill: parsed(vllm, 1, 1, 1)}
		if i == 2 {
			smp.TTFT = parsed(other, 1, 2, 3)
		}
		s.PutPod(Key{"ns", name}, signal.SourceInference, smp)
	}
	first := func(name string, k signal.Hist) *float64 {
		w := s.window(Key{"ns", name}, signal.SourceInference)
		return &w.newest().hists[k].h.base.Bounds[0]
	}
	if first("a", signal.HistTTFT) != first("b", signal.HistTTFT) {
		t.Error("two pods' windows of one layout keep two copies of its bounds")
	}
	if first("a", signal.HistTTFT) == first("c", signal.HistTTFT) {
		t.Error("pods of two layouts share bounds")
	}
	pa, _ := s.Latest(Key{"ns", "a"}, signal.SourceInference, t0, time.Minute)
	pb, _ := s.Latest(Key{"ns", "b"}, signal.SourceInference, t0, time.Minute)
	if &pa.Prefill.Bounds[0] != &pb.Prefill.Bounds[0] || &pa.Prefill.Bounds[0] != first("a", signal.HistTTFT) {
		t.Error("the newest prefill histograms of one layout keep their own bounds")
	}

	// A tenant's series, each with bounds of its own.
	for i := range 2 * maxLayouts {
		b := []float64{float64(i + 1), math.Inf(1)}
		s.PutPod(Key{"tenant", string(rune('A' + i))}, signal.SourceInference, Sample{Time: t0, TTFT: parsed(b, float64(i), float64(2*i))})
	}
	if n := len(s.layouts.byKey); n != maxLayouts {
		t.Fatalf("the table holds %d layouts, want its bound %d", n, maxLayouts)
	}
	for i := range 2 * maxLayouts {
		w := s.window(Key{"tenant", string(rune('A' + i))}, signal.SourceInference)
		h := w.newest().hists[signal.HistTTFT].h.unpack(&histogram.Histogram{})
		if h.Bounds[0] != float64(i+1) || h.Counts[1] != float64(2*i) {
			t.Fatalf("tenant series %d reads back as %v %v", i, h.Bounds, h.Counts)
		}
	}
}

// window is k's window of src, for the tests' inspection.
func (s *Store) window(k Key, src signal.Source) *window {
	ns := s.pods[k.Namespace]
	return &ns.entries[ns.lookup(k.Name)].windows[src]
}
