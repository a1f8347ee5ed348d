package store

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// seriesFrom builds a series of histograms of one layout from fuzz bytes:
// raw[0] is the number of buckets (past maxPackedBuckets too), raw[1]
// picks how counts are read, and whether every other histogram's count is
// one more than its +Inf bucket's (a malformed exposition). In bits mode every count is 8 bytes of any
// float64 (NaN, infinities, negatives: any input); in steps mode one byte
// per count steps it from the previous histogram's, as a server's counters
// grow, sometimes by more than 16 bits hold, sometimes by a fraction, and
// sometimes back to zero (a restart).
func seriesFrom(raw []byte) []*histogram.Histogram {
	if len(raw) < 2 {
		return nil
	}
	n, bits, apart := int(raw[0])%(maxPackedBuckets+4)+1, raw[1]&1 == 1, raw[1]&2 == 2
	raw = raw[2:]
	bounds := make([]float64, n)
	for i := range bounds[:n-1] {
		bounds[i] = float64(i+1) / 10
	}
	bounds[n-1] = math.Inf(+1)
	var out []*histogram.Histogram
	prev := make([]float64, n)
	for len(out) < 64 {
		h := &histogram.Histogram{Bounds: bounds, Counts: make([]float64, n)}
		if bits {
			if len(raw) < 8*n {
				break
			}
			for i := range h.Counts {
				h.Counts[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
			}
			raw = raw[8*n:]
		} else {
			if len(raw) < n {
				break
			}
			c := 0.0
			for i := range h.Counts {
				switch b := raw[i]; {
				case b == 255: // restart
					c = 0
				case b == 254: // past 16 bits
					c = max(c, prev[i]) + 1<<17
				case b >= 250: // a fraction
					c = max(c, prev[i]) + 0.5
				default:
					c = max(c, prev[i]) + float64(b%8)
				}
				h.Counts[i] = c
			}
			raw = raw[n:]
		}
		h.Count = h.Counts[n-1]
		if apart && len(out)%2 == 1 {
			h.Count++
		}
		copy(prev, h.Counts)
		out = append(out, h)
	}
	return out
}

// same reports whether two histograms hold the same numbers; NaN equals
// NaN.
func same(a, b *histogram.Histogram) bool {
	eq := func(x, y float64) bool { return x == y || x != x && y != y }
	if len(a.Bounds) != len(b.Bounds) || len(a.Counts) != len(b.Counts) || !eq(a.Sum, b.Sum) || !eq(a.Count, b.Count) {
		return false
	}
	for i := range a.Bounds {
		if !eq(a.Bounds[i], b.Bounds[i]) || !eq(a.Counts[i], b.Counts[i]) {
			return false
		}
	}
	return true
}

// FuzzPackUnpack: pack and unpack never panic and are exact, for any
// counts at all; and a store's windows, fed any valid series through
// PutPod, give back every histogram they keep exactly as it was put, and
// increases that are finite.
func FuzzPackUnpack(f *testing.F) {
	f.Add([]byte{3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{23, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 254})
	f.Add([]byte{2, 0, 5, 5, 255, 1, 250, 3, 7, 7})
	f.Add([]byte{3, 2, 1, 2, 3, 1, 1, 1, 2, 2, 2, 0, 0, 0})
	f.Add([]byte{27, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28})
	f.Add(append([]byte{1, 1}, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f, 0, 0, 0, 0, 0, 0, 0xf0, 0xff))
	f.Fuzz(func(t *testing.T, raw []byte) {
		series := seriesFrom(raw)
		var base *histogram.Histogram
		for i, h := range series {
			want := h.Clone()
			p := pack(h, base)
			if got := p.unpack(&histogram.Histogram{}); !same(got, want) {
				t.Fatalf("histogram %d: unpacked %+v, packed %+v", i, got, want)
			}
			base = p.base
		}

		s := New(len(series) + 1)
		k := Key{"ns", "p"}
		var kept []*histogram.Histogram
		for i, h := range series {
			if signal.CheckTTFT(h) != nil {
				continue
			}
			kept = append(kept, h.Clone())
			s.PutPod(k, signal.SourceInference, Sample{Time: t0.Add(time.Duration(i) * time.Second), TTFT: h})
		}
		if len(kept) == 0 {
			return
		}
		w := &s.entry(k).windows[signal.SourceInference]
		for i := range w.n {
			if got := w.at(i).hists[signal.HistTTFT].h.unpack(&histogram.Histogram{}); !same(got, kept[i]) {
				t.Fatalf("window sample %d: unpacked %+v, put %+v", i, got, kept[i])
			}
		}
		end := t0.Add(time.Duration(len(series)) * time.Second)
		// The newest sample's histogram, kept in the window only, comes
		// back whole through both readers.
		newest := kept[len(kept)-1]
		if got, ok := s.Latest(k, signal.SourceInference, end, time.Hour); !ok || got.TTFT == nil || !same(got.TTFT, newest) {
			t.Fatalf("Latest gives %+v, the newest put %+v", got.TTFT, newest)
		}
		var each *histogram.Histogram
		s.LatestHistEach(NewLookup("ns", []string{"p"}), signal.SourceInference, signal.HistTTFT, end, time.Hour,
			func(_ int, _ *Sample, h *histogram.Histogram) { each = h })
		if each == nil || !same(each, newest) {
			t.Fatalf("LatestHistEach gives %+v, the newest put %+v", each, newest)
		}
		if inc, ok := s.TTFTIncrease(k, end, time.Hour, time.Hour); ok {
			for i, c := range inc.Counts {
				if math.IsNaN(c) || math.IsInf(c, 0) || c < 0 {
					t.Fatalf("increase bucket %d = %g", i, c)
				}
			}
		}
	})
}
