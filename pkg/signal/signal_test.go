package signal

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// TestSignalsDeclared: every signal constant has its line in the signals
// table: a name and a served metric name of its own, a source, an
// aggregation, a unit and a finite range, which one device's reading lies
// within. Every latency histogram has its line in the hists table: a name
// and served quantiles whose names no other metric has.
func TestSignalsDeclared(t *testing.T) {
	names, served := map[string]string{}, map[string]string{}
	claim := func(seen map[string]string, name, who string) {
		if prev, dup := seen[name]; dup {
			t.Errorf("%s and %s are both named %q", prev, who, name)
		}
		seen[name] = who
	}
	for sig := Signal(0); sig < NumSignals; sig++ {
		d := signals[sig]
		if d.name == "" {
			t.Errorf("signal %d has no line in the signals table", sig)
			continue
		}
		claim(names, d.name, "signal "+d.name)
		if sig.Served() == "" {
			t.Errorf("%s: no served metric name", sig)
		}
		claim(served, sig.Served(), "signal "+d.name)
		if sig.Source() >= NumSources {
			t.Errorf("%s: source %d is none of the sources", sig, sig.Source())
		}
		if a := sig.Aggregation(); a != Mean && a != Sum {
			t.Errorf("%s: %s is neither mean nor sum", sig, a)
		}
		if u := sig.Unit(); u == 0 || u >= numUnits {
			t.Errorf("%s: %s is no unit", sig, u)
		}
		r := sig.Range()
		if !(r.Min <= r.Max) || math.IsInf(r.Max, 0) {
			t.Errorf("%s: range %+v", sig, r)
		}
		if dr := sig.DeviceRange(); !(dr.Min >= r.Min && dr.Max <= r.Max) {
			t.Errorf("%s: one device's range %+v is wider than the object's %+v", sig, dr, r)
		}
	}
	for h := Hist(0); h < NumHists; h++ {
		if hists[h].name == "" {
			t.Errorf("histogram %d has no line in the hists table", h)
			continue
		}
		claim(names, h.String(), "histogram "+h.String())
		qs := h.Quantiles()
		if len(qs) == 0 {
			t.Errorf("%s: no quantile served", h)
		}
		for _, q := range qs {
			if !(q.Q > 0 && q.Q < 1) {
				t.Errorf("%s: quantile %g of %s is not in (0, 1)", h, q.Q, q.Served)
			}
			claim(served, q.Served, "histogram "+h.String())
		}
	}
}

func TestSignalCheck(t *testing.T) {
	tests := []struct {
		name string
		sig  Signal
		v    float64
		want error // nil: accepted
	}{
		{"idle GPU", GPUUtilization, 0, nil},
		{"busy GPU", GPUUtilization, 100, nil},
		{"utilization 1e300", GPUUtilization, 1e300, ErrOutOfRange},
		{"utilization +Inf", GPUUtilization, math.Inf(+1), ErrNotFinite},
		{"utilization NaN", GPUUtilization, math.NaN(), ErrNotFinite},
		{"utilization just above 100", GPUUtilization, math.Nextafter(100, 200), ErrOutOfRange},
		{"negative utilization", GPUUtilization, -1, ErrOutOfRange},
		{"queue of 1e16", QueueDepth, 1e16, ErrOutOfRange},
		{"queue of a million", QueueDepth, 1e6, nil},
		{"negative queue", QueueDepth, -3, ErrOutOfRange},
		{"running -Inf", RequestsRunning, math.Inf(-1), ErrNotFinite},
		{"eight 288 GB GPUs", GPUMemoryUsedBytes, 8 * 288e9, nil},
		{"memory past any node", GPUMemoryUsedBytes, 1e18, ErrOutOfRange},
		{"eight 1.2 kW GPUs", GPUPowerWatts, 8 * 1200, nil},
		{"power 1e300", GPUPowerWatts, 1e300, ErrOutOfRange},
		{"KV cache full", KVCacheUtilization, 100, nil},
		{"KV cache 150%", KVCacheUtilization, 150, ErrOutOfRange},
		{"SMs all busy", GPUSMActive, 100, nil},
		{"tensor activity as a ratio past 100%", GPUTensorActive, 101, ErrOutOfRange},
		{"unknown signal", NumSignals, 1, ErrOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.sig.Check(tt.v)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Check(%g) = %v, want nil", tt.v, err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Check(%g) = %v, want %v", tt.v, err, tt.want)
			}
		})
	}
}

// The API serves values as resource.Quantity, milli-units in an int64:
// every signal's range must fit, so that a value in range is never a
// wrong quantity.
func TestRangesFitAQuantity(t *testing.T) {
	for sig := Signal(0); sig < NumSignals; sig++ {
		r := sig.Range()
		if !(r.Min >= 0 && r.Max > r.Min && r.Max*1000 < math.MaxInt64) {
			t.Errorf("%s: range %+v does not fit milli-units in an int64", sig, r)
		}
	}
	if MaxTTFTSeconds*1000 >= math.MaxInt64 {
		t.Errorf("MaxTTFTSeconds %d does not fit", MaxTTFTSeconds)
	}
}

func TestCheckTTFT(t *testing.T) {
	inf := math.Inf(+1)
	tests := []struct {
		name string
		h    *histogram.Histogram
		ok   bool
	}{
		{"vLLM-like", &histogram.Histogram{Bounds: []float64{0.1, 1, inf}, Counts: []float64{1, 5, 6}, Count: 6, Sum: 2}, true},
		{"zero first bound", &histogram.Histogram{Bounds: []float64{0, 1, inf}, Counts: []float64{0, 5, 6}, Count: 6}, true},
		{"negative le", &histogram.Histogram{Bounds: []float64{-5, 1, inf}, Counts: []float64{4, 5, 6}, Count: 6}, false},
		{"decreasing cumulative counts", &histogram.Histogram{Bounds: []float64{0.1, 1, inf}, Counts: []float64{5, 4, 6}, Count: 6}, false},
		{"bounds not ascending", &histogram.Histogram{Bounds: []float64{1, 0.1, inf}, Counts: []float64{1, 2, 3}, Count: 3}, false},
		{"NaN count", &histogram.Histogram{Bounds: []float64{0.1, inf}, Counts: []float64{math.NaN(), 1}, Count: 1}, false},
		{"infinite count", &histogram.Histogram{Bounds: []float64{0.1, inf}, Counts: []float64{1, inf}, Count: inf}, false},
		{"count past 2^53", &histogram.Histogram{Bounds: []float64{0.1, inf}, Counts: []float64{1, 1 << 60}, Count: 1 << 60}, false},
		{"NaN sum", &histogram.Histogram{Bounds: []float64{0.1, inf}, Counts: []float64{1, 2}, Count: 2, Sum: math.NaN()}, false},
		{"negative sum", &histogram.Histogram{Bounds: []float64{0.1, inf}, Counts: []float64{1, 2}, Count: 2, Sum: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckTTFT(tt.h)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckTTFT = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, histogram.ErrInvalid) {
				t.Fatalf("error %v does not wrap histogram.ErrInvalid", err)
			}
		})
	}
}

func TestDeviceRange(t *testing.T) {
	for sig := Signal(0); sig < NumSignals; sig++ {
		d, r := sig.DeviceRange(), sig.Range()
		if d.Min != r.Min || d.Max > r.Max {
			t.Errorf("%s: a device's range %+v is not within the signal's %+v", sig, d, r)
		}
	}
	for _, sig := range []Signal{GPUMemoryUsedBytes, GPUPowerWatts} {
		if got, want := sig.DeviceRange().Max*MaxDevices, sig.Range().Max; got != want {
			t.Errorf("%s: MaxDevices devices at their most add up to %g, the range ends at %g", sig, got, want)
		}
	}
}

// TestServedNames: the table gives the served names HPAs already use.
func TestServedNames(t *testing.T) {
	tests := []struct {
		sig  Signal
		want string
	}{
		{GPUUtilization, "gpu_utilization"},
		{QueueDepth, "inference_queue_depth"},
		{KVCacheUtilization, "inference_kv_cache_utilization"},
		{NumSignals, ""},
	}
	for _, tt := range tests {
		if got := tt.sig.Served(); got != tt.want {
			t.Errorf("%s served as %q, want %q", tt.sig, got, tt.want)
		}
	}
	var got []string
	for _, q := range HistITL.Quantiles() {
		got = append(got, fmt.Sprintf("%s=%g", q.Served, q.Q))
	}
	if want := "inference_itl_seconds_p50=0.5 inference_itl_seconds_p90=0.9 inference_itl_seconds_p99=0.99"; strings.Join(got, " ") != want {
		t.Errorf("ITL quantiles %q, want %q", got, want)
	}
	if qs := NumHists.Quantiles(); qs != nil {
		t.Errorf("quantiles of no histogram: %v", qs)
	}
}
