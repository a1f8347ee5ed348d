package sim

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// newFakeClock is the injected Options.Now's clock; tests step it by hand.
func newFakeClock() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
}

// newSim builds a backend on a fake clock, failing the test on error.
func newSim(t *testing.T, opts Options) (*Backend, *clocktesting.FakeClock) {
	t.Helper()
	clk := newFakeClock()
	opts.Now = clk.Now
	b, err := New(opts)
	if err != nil {
		t.Fatalf("New(%+v): %v", opts, err)
	}
	return b, clk
}

// collect reads every device, failing the test on error.
func collect(t *testing.T, b *Backend) []gpu.Reading {
	t.Helper()
	rs, err := b.Collect(context.Background())
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return rs
}

// value returns a field of a reading, failing the test when it is absent.
func value(t *testing.T, r gpu.Reading, f gpu.Field) float64 {
	t.Helper()
	v, ok := r.Get(f)
	if !ok {
		t.Fatalf("device %s: field %v absent", r.Device.ID(), f)
	}
	return v
}

// setLoad applies a load, failing the test on error.
func setLoad(t *testing.T, b *Backend, id string, l Load) {
	t.Helper()
	if err := b.SetLoad(id, l); err != nil {
		t.Fatalf("SetLoad(%q): %v", id, err)
	}
}

func ptr[T any](v T) *T { return &v }
