package app

import (
	"math"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// TestWindowFlagIgnored: --window still parses, for deployments that pass
// it, and changes nothing.
func TestWindowFlagIgnored(t *testing.T) {
	kept := func(args ...string) (int, time.Duration) {
		o := NewOptions()
		fs := pflag.NewFlagSet("adapter", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		o.Complete()
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		return o.samplesKept(), o.retainFor()
	}
	n0, r0 := kept()
	for _, w := range []string{"--window=10s", "--window=1h"} {
		if n, r := kept(w); n != n0 || r != r0 {
			t.Errorf("%s: %d samples kept for %v, want the default %d for %v", w, n, r, n0, r0)
		}
	}
	if n, _ := kept("--ttft-window=5m"); n <= n0 {
		t.Errorf("--ttft-window=5m keeps %d samples, no more than the default's %d", n, n0)
	}
}

// TestStoreHoldsTheTTFTWindow: the embedded store answers a TTFT increase
// over the whole --ttft-window, whatever its length: the ring is sized
// from it.
func TestStoreHoldsTheTTFTWindow(t *testing.T) {
	for _, win := range []time.Duration{20 * time.Second, time.Minute, 5 * time.Minute} {
		o := NewOptions()
		o.TTFTWindow = win
		o.Complete()
		st := o.newStore()
		k := store.Key{Namespace: "ml", Name: "a"}
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		// A read starts the pod's window (--latency-window-idle), and
		// is not answered yet.
		if _, ok := st.TTFTIncrease(k, t0, win, o.MaxStaleness); ok {
			t.Fatalf("--ttft-window=%v: the read that starts the window was answered", win)
		}
		var at time.Time
		// One request a second for twice the window; the counts are
		// cumulative, so the increase over the window is its length in
		// seconds.
		for s := 0; s <= 2*int(win/o.ScrapeInterval); s++ {
			at = t0.Add(time.Duration(s) * o.ScrapeInterval)
			c := at.Sub(t0).Seconds()
			smp := store.Sample{Time: at, TTFT: &histogram.Histogram{Bounds: []float64{1, math.Inf(1)}, Counts: []float64{c, c}, Count: c, Sum: c / 2}}
			st.PutPod(k, signal.SourceInference, smp)
		}
		inc, ok := st.TTFTIncrease(k, at, win, o.MaxStaleness)
		if !ok {
			t.Fatalf("--ttft-window=%v: no increase", win)
		}
		if math.Abs(inc.Count-win.Seconds()) > 1e-6 {
			t.Errorf("--ttft-window=%v: increase of %v requests, want %v: the store does not hold the whole window", win, inc.Count, win.Seconds())
		}
	}
}
