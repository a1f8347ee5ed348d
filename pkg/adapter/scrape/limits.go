package scrape

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrLimit is wrapped by scrape errors whose exposition broke one of the
// Limits or could not get its parsed size from the in-flight budget.
var ErrLimit = errors.New("limit exceeded")

// Defaults for the zero fields of Limits. A real vLLM server exposes a few
// hundred series, a GPU exporter on an 8-GPU node with time-slicing a few
// thousand; label values are model names, paths and versions. Each default
// is several times what those need.
const (
	DefaultMaxSeries        = 10_000
	DefaultMaxLabels        = 64
	DefaultMaxLabelNameLen  = 256
	DefaultMaxLabelValueLen = 2048
	DefaultMaxLabelValues   = 4096
)

// Limits bound what one scrape may parse. They are checked line by line (or
// message by message) ahead of the parser, so an over-limit exposition stops
// being read where it crosses the limit instead of being parsed whole and
// judged afterwards. A breach fails the scrape with ReasonLimit.
type Limits struct {
	// MaxSeries bounds the samples parsed in one scrape (a histogram
	// bucket is one, as in the text format). Default DefaultMaxSeries.
	MaxSeries int
	// MaxLabels bounds the labels of one sample. Default DefaultMaxLabels.
	MaxLabels int
	// MaxLabelNameLen and MaxLabelValueLen bound one label's name and
	// value, in bytes as written. Defaults DefaultMaxLabelNameLen and
	// DefaultMaxLabelValueLen.
	MaxLabelNameLen  int
	MaxLabelValueLen int
	// MaxLabelValues bounds the distinct values of any one label name in
	// one scrape. Default DefaultMaxLabelValues.
	MaxLabelValues int
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxSeries, DefaultMaxSeries)
	def(&l.MaxLabels, DefaultMaxLabels)
	def(&l.MaxLabelNameLen, DefaultMaxLabelNameLen)
	def(&l.MaxLabelValueLen, DefaultMaxLabelValueLen)
	def(&l.MaxLabelValues, DefaultMaxLabelValues)
	return l
}

// What a parsed exposition costs in memory, estimated from its text as the
// limiter sees it. Measured with expfmt's text parser (v0.73): a sample is
// about 190 bytes of dto.Metric and friends, each label about 110 bytes of
// dto.LabelPair and string headers, plus the bytes of its name and value.
// The label cost also covers the limiter's own record of distinct values.
// Both round up, so that the estimate errs towards more.
const (
	costSeries  = 192
	costLabel   = 144
	costComment = 64 // a HELP or TYPE line: a family, or its help text
)

// limiter applies Limits to one scrape and charges the estimated size of
// what is parsed to the scrape's lease of the in-flight budget. It records
// the first breach, which then explains the parser's failure.
type limiter struct {
	lim   Limits
	lease *lease // nil: no budget
	// arena is where the scrape's text is parsed into; nil: fresh memory.
	arena  *arena
	series int
	sets   *labelSets // nil until a label is seen
	err    error
}

// labelSets holds a hash of every (label name, value) pair a scrape has
// seen, and the number of distinct values of each label name's hash. They
// are pooled: at thousands of scrapes a second, fresh maps would be most of
// the limiter's garbage.
type labelSets struct {
	values  map[uint64]struct{}
	perName map[uint64]int
}

// maxPooledPairs keeps the maps of a scrape with more distinct pairs than a
// real exposition has out of the pool, so that one hostile scrape's maps do
// not stay allocated.
const maxPooledPairs = 4096

var (
	hashSeed      = maphash.MakeSeed()
	labelSetsPool = sync.Pool{New: func() any {
		return &labelSets{values: make(map[uint64]struct{}), perName: make(map[uint64]int)}
	}}
)

func newLimiter(lim Limits, l *lease) *limiter {
	return &limiter{lim: lim, lease: l}
}

// done releases what the limiter holds; it must not be used afterwards.
func (l *limiter) done() {
	if l.sets == nil {
		return
	}
	if len(l.sets.values) <= maxPooledPairs {
		clear(l.sets.values)
		clear(l.sets.perName)
		labelSetsPool.Put(l.sets)
	}
	l.sets = nil
}

// fail records err as the limiter's verdict and returns it.
func (l *limiter) fail(format string, args ...any) error {
	if l.err == nil {
		l.err = fmt.Errorf("%w: "+format, append([]any{ErrLimit}, args...)...)
	}
	return l.err
}

// charge takes n bytes from the lease.
func (l *limiter) charge(n int) error {
	if l.err != nil {
		return l.err
	}
	if l.lease == nil {
		return nil
	}
	if err := l.lease.take(int64(n)); err != nil {
		if l.err == nil {
			l.err = err
		}
		return err
	}
	return nil
}

// line checks one complete line of the classic text format on its way to
// the parser and charges what parsing it will keep.
func (l *limiter) line(line []byte) error {
	if l.err != nil {
		return l.err
	}
	body := bytes.TrimLeft(line, " \t")
	switch {
	case len(bytes.TrimSpace(body)) == 0:
		return nil
	case body[0] == '#':
		kw, _, _ := cutToken(bytes.TrimLeft(body[1:], " \t"))
		if string(kw) != "HELP" && string(kw) != "TYPE" {
			return nil // ignored by the parser
		}
		return l.charge(costComment + len(line))
	}
	labels, err := l.sample(body)
	if err != nil {
		return err
	}
	return l.charge(costSeries + labels*costLabel + len(line))
}

// sample counts a sample line and checks its labels, returning how many it
// has. It reads as much of the line's syntax as the limits need and stops
// quietly at anything malformed, which the parser will report.
func (l *limiter) sample(b []byte) (int, error) {
	l.series++
	if l.series > l.lim.MaxSeries {
		return 0, l.fail("more than %d series", l.lim.MaxSeries)
	}
	i := labelsOrBlank.index(b)
	if i < 0 || b[i] != '{' {
		return 0, nil
	}
	labels := 0
	pos := i + 1
	for {
		pos = skipBlank(b, pos)
		if pos >= len(b) || b[pos] == '}' {
			return labels, nil
		}
		var name []byte
		if b[pos] == '"' {
			end := quotedEnd(b, pos)
			if end < 0 {
				return labels, nil
			}
			name, pos = b[pos+1:end], end+1
		} else {
			start := pos
			for pos < len(b) && !labelNameEnd[b[pos]] {
				pos++
			}
			name = b[start:pos]
		}
		pos = skipBlank(b, pos)
		if pos < len(b) && b[pos] == '=' {
			pos = skipBlank(b, pos+1)
			if pos >= len(b) || b[pos] != '"' {
				return labels, nil
			}
			end := quotedEnd(b, pos)
			if end < 0 {
				return labels, nil
			}
			labels++
			if err := l.label(name, b[pos+1:end], labels); err != nil {
				return labels, err
			}
			pos = skipBlank(b, end+1)
		}
		// else: a quoted metric name inside the braces (UTF-8 syntax)
		if pos < len(b) && b[pos] == ',' {
			pos++
			continue
		}
		return labels, nil
	}
}

// label checks the n-th label of a sample.
func (l *limiter) label(name, value []byte, n int) error {
	switch {
	case n > l.lim.MaxLabels:
		return l.fail("a series with more than %d labels", l.lim.MaxLabels)
	case len(name) > l.lim.MaxLabelNameLen:
		return l.fail("a label name longer than %d bytes", l.lim.MaxLabelNameLen)
	case len(value) > l.lim.MaxLabelValueLen:
		return l.fail("a label value longer than %d bytes", l.lim.MaxLabelValueLen)
	}
	if l.sets == nil {
		l.sets = labelSetsPool.Get().(*labelSets)
	}
	var h maphash.Hash
	h.SetSeed(hashSeed)
	_, _ = h.Write(name)
	nameHash := h.Sum64()
	_ = h.WriteByte(0xff) // not valid UTF-8, so no name runs into its value
	_, _ = h.Write(value)
	pair := h.Sum64()
	if _, ok := l.sets.values[pair]; ok {
		return nil
	}
	l.sets.values[pair] = struct{}{}
	l.sets.perName[nameHash]++
	if l.sets.perName[nameHash] > l.lim.MaxLabelValues {
		return l.fail("more than %d distinct values of one label", l.lim.MaxLabelValues)
	}
	return nil
}

func skipBlank(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	return i
}

// quotedEnd returns the index of the quote closing the string that opens
// at b[start], or -1.
func quotedEnd(b []byte, start int) int {
	for i := start + 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i
		case '\n':
			return -1
		}
	}
	return -1
}

// budget bounds the estimated bytes that all scrapes hold at once: what
// they have parsed and not yet handed over, and protobuf messages being
// read. Every Cycle worker has a guaranteed share that nobody else can
// take; a scrape needing more borrows from a shared pool, without waiting,
// and at most half of the pool, so no one hostile target can drain it. A
// scrape that cannot borrow fails at once with ReasonLimit, so a hostile
// target costs its own scrape, and the small healthy ones live within their
// shares whatever the others do.
//
// The scraper's memory for parsed data is thus bounded by the budget
// (Config.MaxInflightBytes): Workers shares of MaxInflightBytes/2/Workers
// plus a pool of MaxInflightBytes/2. See docs/performance.md for the rest.
type budget struct {
	share     int64        // each worker's guaranteed bytes
	pool      atomic.Int64 // bytes left to borrow
	maxBorrow int64        // most one scrape may borrow
}

func newBudget(total int64, workers int) *budget {
	b := &budget{share: total / 2 / int64(workers)}
	pool := total - b.share*int64(workers)
	b.pool.Store(pool)
	b.maxBorrow = pool / 2
	return b
}

// lease is one scrape's part of the budget; it is not safe for concurrent
// use. Scrapes in a Cycle get their worker's share; others start with none.
type lease struct {
	b                    *budget
	share                int64
	used, borrowed, peak int64
}

func (b *budget) lease(share int64) *lease { return &lease{b: b, share: share} }

// take accounts n more bytes, borrowing what exceeds the share.
func (l *lease) take(n int64) error {
	l.used += n
	l.peak = max(l.peak, l.used)
	need := l.used - l.share - l.borrowed
	if need <= 0 {
		return nil
	}
	if l.borrowed+need > l.b.maxBorrow {
		return fmt.Errorf("%w: parsed exposition over %d bytes", ErrLimit, l.share+l.b.maxBorrow)
	}
	for {
		left := l.b.pool.Load()
		if left < need {
			return fmt.Errorf("%w: in-flight scrape budget exhausted (%d bytes held by this scrape)", ErrLimit, l.used-n)
		}
		if l.b.pool.CompareAndSwap(left, left-need) {
			l.borrowed += need
			return nil
		}
	}
}

// release returns what was borrowed and resets the lease for reuse.
func (l *lease) release() {
	if l.borrowed > 0 {
		l.b.pool.Add(l.borrowed)
	}
	l.used, l.borrowed = 0, 0
}

// family checks one MetricFamily in protobuf wire format, without decoding
// it, and charges what unmarshalling it will keep: each Metric is a series;
// its size is counted four times over for the objects its buckets and
// quantiles become.
func (l *limiter) family(msg []byte) error {
	if err := l.charge(costComment); err != nil {
		return err
	}
	for b := msg; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil // malformed: Unmarshal reports it
		}
		b = b[n:]
		if num == 4 && typ == protowire.BytesType { // MetricFamily.metric
			m, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil
			}
			if err := l.metric(m); err != nil {
				return err
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil
		}
		b = b[n:]
	}
	return nil
}

// metric checks one Metric in wire format.
func (l *limiter) metric(m []byte) error {
	l.series++
	if l.series > l.lim.MaxSeries {
		return l.fail("more than %d series", l.lim.MaxSeries)
	}
	labels := 0
	for b := m; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			break
		}
		if num == 1 && typ == protowire.BytesType { // Metric.label
			pair, _ := protowire.ConsumeBytes(b)
			name, value := labelPair(pair)
			labels++
			if err := l.label(name, value, labels); err != nil {
				return err
			}
		}
		b = b[n:]
	}
	return l.charge(costSeries + labels*costLabel + 4*len(m))
}

// labelPair returns the name and value of a LabelPair in wire format.
func labelPair(b []byte) (name, value []byte) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return name, value
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return name, value
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return name, value
		}
		switch num {
		case 1:
			name = v
		case 2:
			value = v
		}
		b = b[n:]
	}
	return name, value
}
