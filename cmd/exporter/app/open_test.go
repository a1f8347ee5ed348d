package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscale/gpuscale/pkg/exporter/backend/sim"
	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// waitForWaiter blocks until the opener sleeps on the fake clock.
func waitForWaiter(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the opener never waited")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestOpenerRetriesWithBackoff(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	errDriver := errors.New("nvml: initialise NVML: ERROR_DRIVER_NOT_LOADED")
	backend, err := sim.New(sim.Options{GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	open := func() (gpu.Backend, error) {
		attempts++
		if attempts <= 4 {
			return nil, errDriver
		}
		return backend, nil
	}
	reg := prometheus.NewPedanticRegistry()
	b := wait.Backoff{Duration: time.Second, Factor: 2, Steps: 100, Cap: 5 * time.Second}
	op := newOpener(open, clk, b, slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	done := make(chan gpu.Backend, 1)
	go func() {
		got, err := op.open(context.Background())
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	// 1 s, 2 s, 4 s, then capped at 5 s.
	for i, delay := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second} {
		waitForWaiter(t, clk)
		if attempts != i+1 {
			t.Fatalf("wait %d: %d attempts", i, attempts)
		}
		clk.Step(delay - time.Nanosecond)
		if !clk.HasWaiters() {
			t.Fatalf("wait %d: retried before %v", i, delay)
		}
		clk.Step(time.Nanosecond)
	}
	if got := <-done; got != backend {
		t.Fatalf("open = %v, want the backend", got)
	}
	if n := testutil.ToFloat64(op.failures); n != 4 {
		t.Errorf("failures counted = %v, want 4", n)
	}
}

func TestOpenerStopsWithContext(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	op := newOpener(func() (gpu.Backend, error) { return nil, errors.New("no driver") }, clk,
		defaultOpenBackoff(), slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := op.open(ctx); errc <- err }()
	waitForWaiter(t, clk)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("open after cancel = %v, want context.Canceled", err)
	}
}
