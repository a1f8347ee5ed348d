package store

import (
	"encoding/binary"
	"math"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// maxLayouts bounds the layouts a Store shares. The engines' own layouts
// (vLLM's, SGLang's, TGI's and Triton's TTFT, ITL and prefill buckets, a
// few versions of each) are a few dozen; series with made-up bounds past
// the bound keep their bounds as parsed, so no tenant can grow the table.
const maxLayouts = 128

// layouts shares histogram bucket bounds between series. Every server of
// one engine version exposes the same bounds, yet each scrape parses its
// own copy, and the store keeps one copy per window and one per pod's
// newest prefill histogram: about 600 bytes a pod for vLLM's three
// histograms. Kept once per layout instead, they cost nothing per pod.
// Shared bounds are never modified (PutPod's contract). Not safe for
// concurrent use: the Store's write lock guards it.
type layouts struct {
	byKey map[string][]float64
	key   []byte // scratch, so that a lookup allocates nothing
}

// share returns bounds equal to h's: prev's when they are equal (a series'
// next sample), else the table's copy, entering h's when the table has
// room.
func (l *layouts) share(h, prev *histogram.Histogram) []float64 {
	if prev != nil && histogram.SameBounds(prev, h) {
		return prev.Bounds
	}
	l.key = l.key[:0]
	for _, b := range h.Bounds {
		l.key = binary.LittleEndian.AppendUint64(l.key, math.Float64bits(b))
	}
	if b, ok := l.byKey[string(l.key)]; ok {
		return b
	}
	if len(l.byKey) < maxLayouts {
		if l.byKey == nil {
			l.byKey = map[string][]float64{}
		}
		l.byKey[string(l.key)] = h.Bounds
	}
	return h.Bounds
}
