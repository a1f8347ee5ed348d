package histogram

import (
	"math/rand/v2"
	"testing"
	"time"
)

// window returns 24 scrapes 5s apart (two minutes) of a 15-bucket TTFT
// histogram under steady load.
func window() []Sample {
	bounds := []float64{0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, inf}
	rng := rand.New(rand.NewPCG(1, 2))
	per := make([]float64, len(bounds))
	start := time.Unix(1_700_000_000, 0)
	var out []Sample
	for s := range 24 {
		h := &Histogram{Bounds: bounds, Counts: make([]float64, len(bounds))}
		cum := 0.0
		for i := range per {
			per[i] += float64(rng.IntN(20))
			cum += per[i]
			h.Counts[i] = cum
		}
		h.Count = cum
		out = append(out, Sample{T: start.Add(time.Duration(s) * 5 * time.Second), H: h})
	}
	return out
}

func BenchmarkQuantileWindow(b *testing.B) {
	samples := window()
	hs := make([]*Histogram, len(samples))
	for i, s := range samples {
		hs[i] = s.H
	}
	b.ReportAllocs()
	for b.Loop() {
		inc, err := WindowIncrease(hs)
		if err != nil {
			b.Fatal(err)
		}
		Quantile(0.9, inc)
	}
}

func BenchmarkQuantileExtrapolated(b *testing.B) {
	samples := window()
	at := samples[len(samples)-1].T
	b.ReportAllocs()
	for b.Loop() {
		inc, err := ExtrapolatedIncrease(samples, at, 2*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		Quantile(0.9, inc)
	}
}

func BenchmarkQuantile(b *testing.B) {
	h := window()[23].H
	b.ReportAllocs()
	for b.Loop() {
		Quantile(0.99, h)
	}
}
