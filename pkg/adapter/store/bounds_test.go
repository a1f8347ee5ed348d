package store

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// TestRouterModelsAreBounded: the counts routers hold are kept up to
// MaxHeldModelsPerNamespace per namespace and MaxHeldModels in all; a
// sample past them is refused with ErrHeldModels, a router kept goes on
// being replaced, other namespaces are served within their own bound, and
// forgotten routers free their room.
func TestRouterModelsAreBounded(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := New(4)
	models := func(n int, prefix string) map[string]float64 {
		m := make(map[string]float64, n)
		for i := range n {
			m[fmt.Sprintf("%s-%05d", prefix, i)] = 1
		}
		return m
	}
	put := func(ns, pod string, n int, at time.Time) error {
		return s.PutRouter(Key{Namespace: ns, Name: pod}, RouterSample{Time: at, Held: models(n, pod)})
	}
	per := MaxHeldModelsPerNamespace / 4
	for i := range 4 {
		if err := put("attacker", fmt.Sprint("r", i), per, t0); err != nil {
			t.Fatalf("router %d within the bound: %v", i, err)
		}
	}
	if err := put("attacker", "r4", 1, t0); !errors.Is(err, ErrHeldModels) {
		t.Fatalf("past the namespace's bound: %v", err)
	}
	if err := put("attacker", "r0", per, t0.Add(time.Second)); err != nil {
		t.Fatalf("a kept router's next sample: %v", err)
	}
	if _, ok := s.LatestRouter(Key{Namespace: "attacker", Name: "r4"}, t0, time.Minute); ok {
		t.Error("a refused router is served")
	}
	// Every namespace up to its bound, until all routers reach theirs.
	full := 1
	for ; full*MaxHeldModelsPerNamespace < MaxHeldModels; full++ {
		if err := put(fmt.Sprint("ns", full), "r", MaxHeldModelsPerNamespace, t0); err != nil {
			t.Fatalf("namespace %d: %v", full, err)
		}
	}
	if err := put("late", "r", 1, t0); !errors.Is(err, ErrHeldModels) {
		t.Fatalf("past the total: %v", err)
	}
	s.Forget(t0.Add(2*time.Minute), time.Minute)
	if err := put("late", "r", MaxHeldModelsPerNamespace, t0.Add(2*time.Minute)); err != nil {
		t.Fatalf("after the others were forgotten: %v", err)
	}
	if s.heldTotal != MaxHeldModelsPerNamespace || len(s.heldModels) != 1 {
		t.Errorf("counts after forgetting: %d in all, %v", s.heldTotal, s.heldModels)
	}
}

// TestHistogramBucketsAreBounded: a TTFT or prefill histogram of more
// than MaxHistogramBuckets buckets fails CheckTTFT with ErrTooManyBuckets,
// not as an invalid histogram, and is not stored.
func TestHistogramBucketsAreBounded(t *testing.T) {
	hist := func(n int) *histogram.Histogram {
		h := &histogram.Histogram{}
		for i := range n - 1 {
			h.Bounds = append(h.Bounds, float64(i+1)/10)
			h.Counts = append(h.Counts, float64(i))
		}
		h.Bounds, h.Counts = append(h.Bounds, math.Inf(1)), append(h.Counts, float64(n))
		h.Count = float64(n)
		return h
	}
	if err := signal.CheckTTFT(hist(signal.MaxHistogramBuckets)); err != nil {
		t.Errorf("%d buckets: %v", signal.MaxHistogramBuckets, err)
	}
	err := signal.CheckTTFT(hist(signal.MaxHistogramBuckets + 1))
	if !errors.Is(err, signal.ErrTooManyBuckets) || errors.Is(err, histogram.ErrInvalid) {
		t.Errorf("%d buckets: %v", signal.MaxHistogramBuckets+1, err)
	}
	s := New(4)
	k := Key{Namespace: "ns", Name: "p"}
	smp := Sample{Time: time.Unix(100, 0), TTFT: hist(4096), Prefill: hist(4096)}
	smp.Set(signal.QueueDepth, 3)
	s.PutPod(k, signal.SourceInference, smp)
	got, ok := s.Latest(k, signal.SourceInference, time.Unix(100, 0), time.Minute)
	if v, has := got.Get(signal.QueueDepth); !ok || !has || v != 3 || got.TTFT != nil || got.Prefill != nil {
		t.Errorf("stored queue %v, TTFT %v, prefill %v (%v)", got.values[signal.QueueDepth], got.TTFT != nil, got.Prefill != nil, ok)
	}
}
