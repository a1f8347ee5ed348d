package store

import (
	"math"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// The store never holds what it could not serve, whoever calls it.
func TestPutDropsInvalidValues(t *testing.T) {
	s := New(4)
	k := Key{"ns", "p"}
	var smp Sample
	smp.Time = t0
	smp.Set(signal.QueueDepth, 1e16)
	smp.Set(signal.RequestsRunning, 7)
	smp.Set(signal.GPUUtilization, 1e300)
	smp.Set(signal.KVCacheUtilization, math.Inf(+1))
	smp.TTFT = &histogram.Histogram{Bounds: []float64{-1, math.Inf(+1)}, Counts: []float64{3, 4}, Count: 4}
	s.PutPod(k, signal.SourceInference, smp)
	s.PutNode("n", smp)
	for name, got := range map[string]Sample{
		"pod":  must(s.Latest(k, signal.SourceInference, t0, time.Minute)),
		"node": must(s.LatestNode("n", t0, time.Minute)),
	} {
		for _, sig := range []signal.Signal{signal.QueueDepth, signal.GPUUtilization, signal.KVCacheUtilization} {
			if v, ok := got.Get(sig); ok {
				t.Errorf("%s: %s = %g stored", name, sig, v)
			}
		}
		if v, ok := got.Get(signal.RequestsRunning); !ok || v != 7 {
			t.Errorf("%s: the valid value was lost: %g, %v", name, v, ok)
		}
		if got.TTFT != nil {
			t.Errorf("%s: a TTFT histogram with a negative bound was stored", name)
		}
	}
}

func must(s Sample, ok bool) Sample {
	if !ok {
		panic("no sample")
	}
	return s
}
