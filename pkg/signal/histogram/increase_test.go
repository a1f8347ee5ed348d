package histogram

import (
	"errors"
	"math"
	"testing"
	"time"
)

func hist(bounds []float64, counts ...float64) *Histogram {
	return &Histogram{Bounds: bounds, Counts: counts, Count: counts[len(counts)-1]}
}

func TestIncrease(t *testing.T) {
	b := []float64{0.1, 1, inf}
	tests := []struct {
		name         string
		older, newer *Histogram
		want         []float64
		wantErr      error
	}{
		{"plain growth", hist(b, 1, 4, 5), hist(b, 3, 9, 12), []float64{2, 5, 7}, nil},
		{"idle", hist(b, 1, 4, 5), hist(b, 1, 4, 5), []float64{0, 0, 0}, nil},
		{"restart resets every bucket", hist(b, 10, 40, 50), hist(b, 1, 2, 3), []float64{1, 2, 3}, nil},
		// Only the buckets that dropped count as reset, as in PromQL,
		// where every _bucket series is its own counter.
		{"some buckets dropped", hist(b, 0, 40, 50), hist(b, 2, 3, 60), []float64{2, 3, 10}, nil},
		{"layout changed", hist(b, 1, 2, 3), hist([]float64{0.5, inf}, 1, 3), nil, ErrBoundsMismatch},
		{"invalid older", hist([]float64{1, 0.5, inf}, 1, 2, 3), hist(b, 1, 2, 3), nil, ErrInvalid},
		{"NaN count", hist(b, 1, 2, 3), hist(b, 1, math.NaN(), 3), nil, ErrInvalid},
		{"nil newer", hist(b, 1, 2, 3), nil, nil, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Increase(tt.older, tt.newer)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if !equalHist(got, hist(b, tt.want...)) {
				t.Errorf("Increase = %+v, want counts %v", got, tt.want)
			}
		})
	}
}

func TestWindowIncrease(t *testing.T) {
	b := []float64{1, inf}
	// Bucket le=1 runs 5, 8, 2, 4: +3, reset (+2), +2. The +Inf bucket and
	// Count run 6, 9, 2, 7: +3, reset (+2), +5.
	samples := []*Histogram{hist(b, 5, 6), hist(b, 8, 9), hist(b, 2, 2), hist(b, 4, 7)}
	samples[0].Sum, samples[1].Sum, samples[2].Sum, samples[3].Sum = 3, 4.5, 0.5, 1.5
	got, err := WindowIncrease(samples)
	if err != nil {
		t.Fatal(err)
	}
	want := &Histogram{Bounds: b, Counts: []float64{7, 10}, Count: 10, Sum: 3}
	if !equalHist(got, want) {
		t.Errorf("WindowIncrease = %+v, want %+v", got, want)
	}
	if _, err := WindowIncrease(samples[:1]); !errors.Is(err, ErrTooFewSamples) {
		t.Errorf("one sample: err = %v, want ErrTooFewSamples", err)
	}
	samples[2] = hist([]float64{2, inf}, 2, 2)
	if _, err := WindowIncrease(samples); !errors.Is(err, ErrBoundsMismatch) {
		t.Errorf("layout change mid-window: err = %v, want ErrBoundsMismatch", err)
	}
}

func TestExtrapolatedIncrease(t *testing.T) {
	b := []float64{0.5, 1, inf}
	at := time.Unix(1000, 0)
	var samples []Sample
	// Scrapes every 5s at at-60s .. at: the one at at-60s is outside the
	// left-open range, leaving 12 samples over 55s. Bucket le=0.5 is warm
	// (starts at 100, +1 per scrape), le=1 starts at zero and grows by 2.
	for i := 0; i <= 12; i++ {
		c := float64(i)
		samples = append(samples, Sample{
			T: at.Add(time.Duration(i-12) * 5 * time.Second),
			H: &Histogram{Bounds: b, Counts: []float64{100 + c, 100 + 3*c, 100 + 3*c}, Count: 100 + 3*c},
		})
	}
	for i := range samples {
		samples[i].H.Counts[1] -= 100 // le=1 now starts at 0 at at-60s
	}
	got, err := ExtrapolatedIncrease(samples, at, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// In the range: le=0.5 rises 101 -> 112 (11), le=1 rises 3 -> 36 (33),
	// +Inf 103 -> 136 (33). The warm buckets extrapolate 5s to the left:
	// x 60/55. le=1 would reach zero 55*3/33 = 5s before its first sample,
	// no further than the range start, so it also gets x 60/55.
	want := []float64{11 * 60.0 / 55, 33 * 60.0 / 55, 33 * 60.0 / 55}
	for i := range want {
		if !sameFloat(got.Counts[i], want[i], 1e-12) {
			t.Errorf("bucket %g: increase %g, want %g", b[i], got.Counts[i], want[i])
		}
	}

	// A bucket that is zero at the first sample in range extrapolates to
	// the left not at all, unlike its warm neighbours: PromQL's zero-point
	// clamp, which WindowIncrease cannot reproduce.
	for i := range samples {
		samples[i].H.Counts[1] = 3 * float64(max(i-1, 0))
	}
	got, err = ExtrapolatedIncrease(samples, at, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if w := 33.0; !sameFloat(got.Counts[1], w, 1e-12) {
		t.Errorf("fresh bucket: increase %g, want %g (no extrapolation)", got.Counts[1], w)
	}
	if w := 33 * 60.0 / 55; !sameFloat(got.Counts[2], w, 1e-12) {
		t.Errorf("warm bucket: increase %g, want %g", got.Counts[2], w)
	}
}

func TestExtrapolatedIncreaseErrors(t *testing.T) {
	b := []float64{1, inf}
	at := time.Unix(1000, 0)
	one := []Sample{{T: at, H: hist(b, 1, 1)}}
	if _, err := ExtrapolatedIncrease(one, at, time.Minute); !errors.Is(err, ErrTooFewSamples) {
		t.Errorf("one sample: err = %v, want ErrTooFewSamples", err)
	}
	// The sample exactly at at-window is outside the left-open range.
	edge := []Sample{{T: at.Add(-time.Minute), H: hist(b, 1, 1)}, {T: at, H: hist(b, 2, 2)}}
	if _, err := ExtrapolatedIncrease(edge, at, time.Minute); !errors.Is(err, ErrTooFewSamples) {
		t.Errorf("sample on range start: err = %v, want ErrTooFewSamples", err)
	}
	unordered := []Sample{{T: at, H: hist(b, 1, 1)}, {T: at.Add(-time.Second), H: hist(b, 2, 2)}}
	if _, err := ExtrapolatedIncrease(unordered, at, time.Minute); !errors.Is(err, ErrInvalid) {
		t.Errorf("unordered samples: err = %v, want ErrInvalid", err)
	}
}

// TestZeroReach: where ZeroReach is not less than StartReach, ExtrapolateInto
// scales every bucket by one factor, so the quantile of the increase is that
// of its extrapolation at any evaluation time; where it is less, a bucket
// stops at its zero point and the factors differ.
func TestZeroReach(t *testing.T) {
	b := []float64{0.1, 1, inf}
	t0 := time.Unix(1_700_000_000, 0)
	firstT, lastT := t0, t0.Add(50*time.Second) // 11 samples, 5 s apart
	tests := []struct {
		name        string
		first, inc  *Histogram
		at          time.Duration // after lastT
		window      time.Duration
		wantUniform bool
		wantReach   float64
	}{
		// Long-running server: counts far above the window's increase.
		{"old counters", hist(b, 500, 900, 1000), hist(b, 10, 30, 40), 2 * time.Second, time.Minute, true, 50 * 1000 / 40},
		// A server started just before the window: the first bucket's
		// counter reaches zero 1.25 s before the first sample, inside the
		// 7.5 s (at 2 s after the last sample) the range reaches back.
		{"fresh server", hist(b, 1, 5, 6), hist(b, 40, 60, 70), 2 * time.Second, time.Minute, false, 50 * 1.0 / 40},
		// The same first sample, but the range starts well before it:
		// half an interval (2.5 s) is the start reach, still more than
		// 1.25 s.
		{"fresh server, range far before", hist(b, 1, 5, 6), hist(b, 40, 60, 70), 0, 5 * time.Minute, false, 50 * 1.0 / 40},
		{"nothing increased", hist(b, 0, 0, 0), hist(b, 0, 0, 0), time.Second, time.Minute, true, math.Inf(1)},
		// A bucket at zero that did not grow reaches nothing.
		{"idle empty bucket", hist(b, 0, 50, 60), hist(b, 0, 10, 20), time.Second, time.Minute, true, 50 * 60.0 / 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := lastT.Add(tt.at)
			reach := ZeroReach(tt.inc, tt.first, firstT, lastT)
			if math.Abs(reach-tt.wantReach) > 1e-9 && reach != tt.wantReach {
				t.Errorf("ZeroReach = %v, want %v", reach, tt.wantReach)
			}
			start := StartReach(firstT, lastT, 11, at, tt.window)
			if uniform := !(reach < start); uniform != tt.wantUniform {
				t.Fatalf("ZeroReach %v against StartReach %v: uniform %v, want %v", reach, start, uniform, tt.wantUniform)
			}
			ext := Extrapolate(tt.inc, tt.first, firstT, lastT, 11, at, tt.window)
			factors := map[float64]bool{}
			for i, c := range tt.inc.Counts {
				if c > 0 {
					factors[math.Round(ext.Counts[i]/c*1e9)/1e9] = true
				}
			}
			if got := len(factors) <= 1; got != tt.wantUniform {
				t.Errorf("extrapolation factors %v: one factor %v, want %v", factors, got, tt.wantUniform)
			}
			if tt.wantUniform {
				if q, qe := Quantile(0.9, tt.inc), Quantile(0.9, ext); !(q == qe || math.Abs(q-qe) <= 1e-12*math.Abs(q) || math.IsNaN(q) && math.IsNaN(qe)) {
					t.Errorf("quantile of the increase %v, of its extrapolation %v", q, qe)
				}
			}
		})
	}
}
