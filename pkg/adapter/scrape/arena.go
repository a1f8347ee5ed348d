package scrape

import (
	dto "github.com/prometheus/client_model/go"
)

// slabChunk is the elements of one slab chunk, and maxSlabChunks the
// chunks a slab keeps between scrapes: a vLLM exposition's selected
// families are a dozen metrics and about sixty buckets, so a worker's
// slabs hold a few hundred values, and a larger scrape (an exporter's
// thousands of series) gives back what it took past that.
const (
	slabChunk     = 64
	maxSlabChunks = 4
)

// slab hands out values of T from chunks that are reused after reset, so
// that parsing a scrape allocates nothing once a worker's slabs have
// grown to its scrapes' size. A value handed out stays where it is until
// reset: chunks are never reallocated.
type slab[T any] struct {
	chunks [][]T
	n      int // values handed out since reset, counted in whole chunks' slots
}

// alloc returns a zeroed value.
func (s *slab[T]) alloc() *T {
	return &s.allocN(1)[0]
}

// allocN returns n consecutive zeroed values; a request larger than a
// chunk is a fresh slice of its own.
func (s *slab[T]) allocN(n int) []T {
	if n > slabChunk {
		return make([]T, n)
	}
	ci, i := s.n/slabChunk, s.n%slabChunk
	if i+n > slabChunk { // not enough left in this chunk: start the next
		ci, i = ci+1, 0
		s.n = ci * slabChunk
	}
	if ci == len(s.chunks) {
		s.chunks = append(s.chunks, make([]T, slabChunk))
	}
	s.n += n
	return s.chunks[ci][i : i+n : i+n]
}

// reset makes every value handed out free for reuse, zeroing them, and
// drops the chunks past maxSlabChunks.
func (s *slab[T]) reset() {
	used := (s.n + slabChunk - 1) / slabChunk
	for _, c := range s.chunks[:min(used, len(s.chunks))] {
		clear(c)
	}
	if len(s.chunks) > maxSlabChunks {
		clear(s.chunks[maxSlabChunks:])
		s.chunks = s.chunks[:maxSlabChunks]
	}
	s.n = 0
}

// A worker interns the strings that repeat from scrape to scrape (label
// names and values, family names, help texts), at most maxInterned of
// them and maxInternedBytes in all: past either bound they are forgotten
// and interned afresh. Strings longer than maxInternLen are not interned:
// they rarely repeat, and a hostile target's long label values (1,800
// model names of 2,000 bytes, within every per-scrape limit) would
// otherwise stay in every worker's table for the rest of the cycle, up to
// 64 workers x 4,096 x the label value cap.
const (
	maxInterned      = 4096
	maxInternedBytes = 128 << 10
	maxInternLen     = 128
)

// arena holds everything one worker's text scrape parses into: the
// families, their metrics, labels and values. It is reset once the
// scrape's result has been handed over (Cycle: sink must not keep the
// families), so a worker's scrapes reuse the same memory.
type arena struct {
	families   slab[dto.MetricFamily]
	metrics    slab[dto.Metric]
	pairs      slab[dto.LabelPair]
	gauges     slab[dto.Gauge]
	counters   slab[dto.Counter]
	untyped    slab[dto.Untyped]
	histograms slab[dto.Histogram]
	buckets    slab[dto.Bucket]
	floats     slab[float64]
	uints      slab[uint64]
	ints       slab[int64]
	strs       slab[string]
	types      slab[dto.MetricType]
	metricPtrs slab[*dto.Metric]
	pairPtrs   slab[*dto.LabelPair]
	bucketPtrs slab[*dto.Bucket]

	interned map[string]string
	// internedBytes is the length of the interned strings.
	internedBytes int
	out           map[string]*dto.MetricFamily
	// hist finds a histogram's metric by its family and labels.
	hist map[string]*dto.Metric
	// text is the selected lines of the scrape, which the parser reads.
	text   []byte
	parser textParser
}

func newArena() *arena {
	return &arena{interned: map[string]string{}, out: map[string]*dto.MetricFamily{}, hist: map[string]*dto.Metric{}}
}

// maxKeptText is the most text an arena keeps for the next scrape.
const maxKeptText = 256 << 10

// reset frees everything the last scrape parsed for the next.
func (a *arena) reset() {
	a.resetParse()
	if cap(a.text) > maxKeptText {
		a.text = nil
	}
	a.text = a.text[:0]
}

// resetParse frees what a parse put in the arena, keeping its text.
func (a *arena) resetParse() {
	a.families.reset()
	a.metrics.reset()
	a.pairs.reset()
	a.gauges.reset()
	a.counters.reset()
	a.untyped.reset()
	a.histograms.reset()
	a.buckets.reset()
	a.floats.reset()
	a.uints.reset()
	a.ints.reset()
	a.strs.reset()
	a.types.reset()
	a.metricPtrs.reset()
	a.pairPtrs.reset()
	a.bucketPtrs.reset()
	clear(a.out)
	clear(a.hist)
}

// intern returns b as a string, the same string for the same bytes while
// it is remembered.
func (a *arena) intern(b []byte) string {
	if len(b) > maxInternLen {
		return string(b)
	}
	if s, ok := a.interned[string(b)]; ok {
		return s
	}
	if len(a.interned) >= maxInterned || a.internedBytes+len(b) > maxInternedBytes {
		clear(a.interned)
		a.internedBytes = 0
	}
	s := string(b)
	a.interned[s] = s
	a.internedBytes += len(s)
	return s
}

func (a *arena) str(b []byte) *string {
	p := a.strs.alloc()
	*p = a.intern(b)
	return p
}

func (a *arena) float(v float64) *float64 {
	p := a.floats.alloc()
	*p = v
	return p
}

func (a *arena) uint(v uint64) *uint64 {
	p := a.uints.alloc()
	*p = v
	return p
}

// grow appends to a slice the arena handed out, in place while its
// reserved capacity lasts, else into a region of twice the size.
func grow[T any](s *slab[T], have []T, v T) []T {
	if len(have) < cap(have) {
		return append(have, v)
	}
	next := s.allocN(max(4, 2*cap(have)))[:len(have)]
	copy(next, have)
	return append(next, v)
}
