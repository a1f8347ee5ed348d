package histogram

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

// layoutFrom builds a valid histogram from fuzz bytes, two per bucket: a
// step to the next bound (bounds start below zero to reach PromQL's
// non-positive first-bucket case) and a step of the cumulative count.
func layoutFrom(raw []byte) *Histogram {
	h := &Histogram{}
	bound, count := -1.0, 0.0
	for i := 0; i+1 < len(raw) && len(h.Bounds) < 40; i += 2 {
		bound += float64(raw[i]%64+1) / 8
		count += float64(raw[i+1] % 16)
		h.Bounds = append(h.Bounds, bound)
		h.Counts = append(h.Counts, count)
	}
	if len(raw)%2 == 1 {
		count += float64(raw[len(raw)-1] % 16)
	}
	h.Bounds = append(h.Bounds, inf)
	h.Counts = append(h.Counts, count)
	h.Count = count
	return h
}

// floatsFrom reads raw as little-endian float64s: any bit pattern at all.
func floatsFrom(raw []byte) []float64 {
	var out []float64
	for ; len(raw) >= 8; raw = raw[8:] {
		out = append(out, math.Float64frombits(binary.LittleEndian.Uint64(raw)))
	}
	return out
}

func FuzzQuantile(f *testing.F) {
	f.Add(0.9, []byte{8, 1, 8, 3, 16, 5, 40, 2, 3})
	f.Add(0.0, []byte{8, 0, 8, 3, 4})
	f.Add(1.0, []byte{2, 2, 2, 2})
	f.Add(0.5, []byte{})
	f.Add(-0.5, []byte{1, 2, 3})
	f.Add(math.NaN(), []byte{1, 2})
	f.Fuzz(func(t *testing.T, q float64, raw []byte) {
		// Garbage of any shape must not panic.
		fl := floatsFrom(raw)
		Quantile(q, &Histogram{Bounds: fl, Counts: fl[len(fl)/2:]})
		Quantile(q, &Histogram{Bounds: fl, Counts: fl})

		h := layoutFrom(raw)
		got := Quantile(q, h)
		switch {
		case math.IsNaN(q):
			if !math.IsNaN(got) {
				t.Fatalf("q=NaN gave %g", got)
			}
			return
		case q < 0 || q > 1:
			if !math.IsInf(got, 0) {
				t.Fatalf("q=%g gave %g, want ±Inf", q, got)
			}
			return
		}
		checkQuantileRange(t, q, h, got)
		if q2 := (q + 1) / 2; !math.IsNaN(got) {
			if got2 := Quantile(q2, h); got2 < got {
				t.Fatalf("not monotonic in q: Quantile(%g)=%g > Quantile(%g)=%g", q, got, q2, got2)
			}
		}
	})
}

// checkQuantileRange asserts PromQL's result range for a valid histogram:
// NaN only without observations or for q=0 on an empty first bucket with a
// positive bound (0/0),
// else between the natural lower bound and the highest finite bound.
func checkQuantileRange(t *testing.T, q float64, h *Histogram, got float64) {
	t.Helper()
	n := len(h.Bounds)
	total := h.Counts[n-1]
	if n < 2 || total == 0 || (q == 0 && h.Counts[0] == 0 && h.Bounds[0] > 0) {
		if !math.IsNaN(got) {
			t.Fatalf("Quantile(%g, %+v) = %g, want NaN", q, h, got)
		}
		return
	}
	lo, hi := math.Min(0, h.Bounds[0]), h.Bounds[n-2]
	if math.IsNaN(got) || got < lo-1e-9 || got > hi+1e-9 {
		t.Fatalf("Quantile(%g, %+v) = %g, outside [%g, %g]", q, h, got, lo, hi)
	}
}

func FuzzIncrease(f *testing.F) {
	f.Add([]byte{8, 1, 8, 3, 4}, []byte{2, 5, 7, 1, 0}, []byte{0, 0, 9, 9, 9})
	f.Add([]byte{1}, []byte{0}, []byte{0})
	f.Add([]byte{}, []byte{3, 3}, []byte{})
	f.Fuzz(func(t *testing.T, layout, a, b []byte) {
		older, newer, newest := layoutFrom(layout), layoutFrom(layout), layoutFrom(layout)
		fill(newer, a)
		fill(newest, b)
		inc, err := Increase(older, newer)
		if err != nil {
			t.Fatalf("Increase on one layout: %v", err)
		}
		for i, c := range inc.Counts {
			want := newer.Counts[i] - older.Counts[i]
			if newer.Counts[i] < older.Counts[i] {
				want = newer.Counts[i] // reset
			}
			if c != want || c < 0 {
				t.Fatalf("bucket %d: increase %g from %g to %g, want %g", i, c, older.Counts[i], newer.Counts[i], want)
			}
		}
		// The increase over a window is the sum of its steps' increases.
		win, err := WindowIncrease([]*Histogram{older, newer, newest})
		if err != nil {
			t.Fatal(err)
		}
		step2, _ := Increase(newer, newest)
		for i := range win.Counts {
			if win.Counts[i] != inc.Counts[i]+step2.Counts[i] {
				t.Fatalf("bucket %d: window %g != %g + %g", i, win.Counts[i], inc.Counts[i], step2.Counts[i])
			}
		}
		// The running reset totals give the same window increase from
		// its two ends.
		r1 := NextResets(nil, older, newer)
		r2 := NextResets(r1, newer, newest)
		var ends Histogram
		IncreaseBetween(&ends, older, newest, nil, r2)
		for i := range win.Counts {
			if ends.Counts[i] != win.Counts[i] {
				t.Fatalf("bucket %d: from the ends %g, window %g", i, ends.Counts[i], win.Counts[i])
			}
		}
		if ends.Count != win.Count {
			t.Fatalf("count: from the ends %g, window %g", ends.Count, win.Count)
		}
		// A layout with one more bucket in front. (Prepending bytes to
		// layout is not enough: layoutFrom caps the buckets, and equal
		// increments can rebuild the very same bounds.)
		other := layoutFrom(layout)
		other.Bounds = append([]float64{math.Min(other.Bounds[0], 0) - 1}, other.Bounds...)
		other.Counts = append([]float64{0}, other.Counts...)
		if _, err := Increase(older, other); !errors.Is(err, ErrBoundsMismatch) {
			t.Fatalf("different layouts: err = %v, want ErrBoundsMismatch", err)
		}
	})
}

// fill overwrites h's cumulative counts from raw, keeping them cumulative.
func fill(h *Histogram, raw []byte) {
	c := 0.0
	for i := range h.Counts {
		if i < len(raw) {
			c += float64(raw[i] % 32)
		}
		h.Counts[i] = c
	}
	h.Count = c
}
