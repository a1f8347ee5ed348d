package scrape

import (
	"bytes"
	"slices"
	"strconv"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
)

// parseTextFast parses the classic text format into a's slabs, as expfmt's
// TextParser would, for text in the shape every Prometheus client library
// writes: `# HELP name text`, `# TYPE name type` and `name{l="v",...} value
// [timestamp]` lines, each ending in a newline, with unquoted names,
// label values without escapes, and counter, gauge, untyped or histogram
// families. It reports false as soon as the text strays from that shape
// (a summary, a quoted name, an escape, odd spacing, anything expfmt would
// refuse), and the caller parses it with expfmt, which then decides and
// words any error. Where it reports true, the families are what expfmt
// returns for the same text (FuzzTextFast checks that).
//
// expfmt reads its input a byte at a time and allocates every name, value
// and field of every sample; at thousands of scrapes a second that was
// most of the adapter's scraping CPU. Here lines are sliced in place, and
// every value lives in a's slabs and interned strings.
func parseTextFast(text []byte, a *arena) (map[string]*dto.MetricFamily, bool) {
	p := &a.parser
	p.a, p.fams = a, a.out
	for len(text) > 0 {
		nl := bytes.IndexByte(text, '\n')
		if nl < 0 {
			return nil, false // expfmt fails a last line without its newline
		}
		line := text[:nl]
		text = text[nl+1:]
		if !p.line(line) {
			return nil, false
		}
	}
	for name, mf := range p.fams {
		if len(mf.Metric) == 0 {
			delete(p.fams, name)
		}
	}
	for _, m := range a.hist {
		normalizeHistogram(m.Histogram)
	}
	return p.fams, true
}

// textParser is the fast path's state, kept in the arena so that its
// scratch slices are reused.
type textParser struct {
	a    *arena
	fams map[string]*dto.MetricFamily
	// pairs are the current line's labels, as slices of it; sorted is
	// a scratch copy sorted by name, and key a histogram's key.
	pairs, sorted []pair
	key           []byte
}

type pair struct{ name, value []byte }

func (p *textParser) line(line []byte) bool {
	switch {
	case len(line) == 0:
		return true
	case line[0] == '#':
		return p.comment(line)
	default:
		return p.sample(line)
	}
}

// comment handles `# HELP name text`, `# TYPE name type` and other
// comments, which expfmt ignores.
func (p *textParser) comment(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("# "))
	if !ok {
		return false
	}
	kw, rest, found := bytes.Cut(rest, []byte(" "))
	isHelp, isType := string(kw) == "HELP", string(kw) == "TYPE"
	if !isHelp && !isType {
		// A comment expfmt skips: its first word is not a keyword.
		return len(kw) > 0 && bytes.IndexByte(kw, '\t') < 0
	}
	if !found {
		return false
	}
	name, text, found := bytes.Cut(rest, []byte(" "))
	if !found || !isMetricName(name) || len(text) == 0 || text[0] == ' ' || text[0] == '\t' {
		return false
	}
	mf, created := p.family(name)
	if mf == nil {
		return false
	}
	if isHelp {
		if mf.Help != nil || bytes.IndexByte(text, '\\') >= 0 {
			return false
		}
		mf.Help = p.a.str(text)
		return true
	}
	if mf.Type != nil || (!created && len(mf.Metric) > 0) {
		return false
	}
	t, ok := metricTypes[string(text)]
	if !ok {
		return false
	}
	mt := p.a.types.alloc()
	*mt = t
	mf.Type = mt
	return true
}

// metricTypes are the types the fast path parses, as written.
var metricTypes = map[string]dto.MetricType{
	"counter": dto.MetricType_COUNTER, "gauge": dto.MetricType_GAUGE,
	"untyped": dto.MetricType_UNTYPED, "histogram": dto.MetricType_HISTOGRAM,
}

// family returns the family a HELP or TYPE line names, creating it;
// nil where the name is a histogram's _bucket, _sum or _count (expfmt
// files the line under the histogram, which the fast path leaves to it).
func (p *textParser) family(name []byte) (*dto.MetricFamily, bool) {
	if mf := p.fams[string(name)]; mf != nil {
		return mf, false
	}
	if base, _ := histogramBase(name); base != nil {
		if mf := p.fams[string(base)]; mf != nil && mf.GetType() == dto.MetricType_HISTOGRAM {
			return nil, false
		}
	}
	return p.newFamily(name), true
}

func (p *textParser) newFamily(name []byte) *dto.MetricFamily {
	mf := p.a.families.alloc()
	mf.Name = p.a.str(name)
	p.fams[*mf.Name] = mf
	return mf
}

// histogramBase returns name without its _bucket, _sum or _count suffix,
// nil without one.
func histogramBase(name []byte) (base []byte, suffix string) {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if len(name) > len(s) && string(name[len(name)-len(s):]) == s {
			return name[:len(name)-len(s)], s
		}
	}
	return nil, ""
}

// sample handles `name{labels} value [timestamp]`.
func (p *textParser) sample(line []byte) bool {
	end := 0
	for end < len(line) && line[end] != '{' && line[end] != ' ' {
		end++
	}
	name := line[:end]
	if end == len(line) || !isMetricName(name) {
		return false
	}
	rest := line[end:]
	p.pairs = p.pairs[:0]
	if rest[0] == '{' {
		var ok bool
		if rest, ok = p.labels(rest[1:]); !ok {
			return false
		}
	}
	rest, ok := bytes.CutPrefix(rest, []byte(" "))
	if !ok {
		return false
	}
	valueText, tsText, hasTS := bytes.Cut(rest, []byte(" "))
	value, err := parseFloat(valueText)
	if err != nil {
		return false
	}
	var ts int64
	if hasTS {
		if ts, err = strconv.ParseInt(string(tsText), 10, 64); err != nil {
			return false
		}
	}
	mf, hist, suffix := p.sampleFamily(name)
	if mf.Type == nil {
		mt := p.a.types.alloc()
		*mt = dto.MetricType_UNTYPED
		mf.Type = mt
	}
	var m *dto.Metric
	if hist {
		if m = p.histogramSample(mf, suffix, value); m == nil {
			return false
		}
	} else {
		m = p.a.metrics.alloc()
		m.Label = p.labelPairs(false)
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			c := p.a.counters.alloc()
			c.Value = p.a.float(value)
			m.Counter = c
		case dto.MetricType_GAUGE:
			g := p.a.gauges.alloc()
			g.Value = p.a.float(value)
			m.Gauge = g
		case dto.MetricType_UNTYPED:
			u := p.a.untyped.alloc()
			u.Value = p.a.float(value)
			m.Untyped = u
		default:
			return false
		}
		mf.Metric = grow(&p.a.metricPtrs, mf.Metric, m)
	}
	if hasTS {
		t := p.a.ints.alloc()
		*t = ts
		m.TimestampMs = t
	}
	return true
}

// sampleFamily returns the family of a sample line, as expfmt finds it:
// by its own name, else as a histogram's _bucket, _sum or _count, else a
// new family.
func (p *textParser) sampleFamily(name []byte) (mf *dto.MetricFamily, hist bool, suffix string) {
	if mf := p.fams[string(name)]; mf != nil {
		return mf, mf.GetType() == dto.MetricType_HISTOGRAM, ""
	}
	if base, s := histogramBase(name); base != nil {
		if mf := p.fams[string(base)]; mf != nil && mf.GetType() == dto.MetricType_HISTOGRAM {
			return mf, true, s
		}
	}
	return p.newFamily(name), false, ""
}

// labels reads `l="v",...}` from b, after the opening brace, into
// p.pairs, and returns what follows the closing brace.
func (p *textParser) labels(b []byte) ([]byte, bool) {
	for {
		if len(b) > 0 && b[0] == '}' {
			return b[1:], true
		}
		eq := bytes.IndexByte(b, '=')
		if eq <= 0 || !isLabelName(b[:eq]) || len(b) < eq+2 || b[eq+1] != '"' {
			return nil, false
		}
		name := b[:eq]
		b = b[eq+2:]
		q := bytes.IndexByte(b, '"')
		if q < 0 {
			return nil, false
		}
		value := b[:q]
		if bytes.IndexByte(value, '\\') >= 0 || !utf8.Valid(value) {
			return nil, false
		}
		if string(name) == "__name__" {
			return nil, false
		}
		for _, prev := range p.pairs {
			if bytes.Equal(prev.name, name) {
				return nil, false // expfmt's error
			}
		}
		p.pairs = append(p.pairs, pair{name, value})
		b = b[q+1:]
		switch {
		case len(b) > 0 && b[0] == ',':
			b = b[1:]
		case len(b) > 0 && b[0] == '}':
		default:
			return nil, false
		}
	}
}

// labelPairs returns the line's labels as the arena's label pairs, without
// le on a histogram's lines.
func (p *textParser) labelPairs(histogram bool) []*dto.LabelPair {
	n := len(p.pairs)
	if histogram && p.le() >= 0 {
		n--
	}
	if n == 0 {
		return nil
	}
	out := p.a.pairPtrs.allocN(n)[:0]
	for _, pr := range p.pairs {
		if histogram && string(pr.name) == "le" {
			continue
		}
		lp := p.a.pairs.alloc()
		lp.Name, lp.Value = p.a.str(pr.name), p.a.str(pr.value)
		out = append(out, lp)
	}
	return out
}

// le returns the index of the line's le label, -1 if none.
func (p *textParser) le() int {
	for i, pr := range p.pairs {
		if string(pr.name) == "le" {
			return i
		}
	}
	return -1
}

// histogramSample files a line of a histogram family under its metric
// (one per label set without le, as expfmt's signature groups them); nil
// for a line the fast path leaves to expfmt.
func (p *textParser) histogramSample(mf *dto.MetricFamily, suffix string, value float64) *dto.Metric {
	le := p.le()
	var bound float64
	if le >= 0 {
		// expfmt parses le on every line of a histogram.
		var err error
		if bound, err = parseFloat(p.pairs[le].value); err != nil {
			return nil
		}
	}
	switch suffix {
	case "_bucket":
		if le < 0 {
			return nil
		}
	case "_sum", "_count":
	default:
		return nil // the family's own name on a histogram
	}
	m := p.histogramMetric(mf, le)
	h := m.Histogram
	switch suffix {
	case "_count":
		if u := uint64(value); value == float64(u) {
			h.SampleCount = p.a.uint(u)
		} else {
			if value < 0 {
				return nil
			}
			h.SampleCountFloat = p.a.float(value)
		}
	case "_sum":
		h.SampleSum = p.a.float(value)
	case "_bucket":
		b := p.a.buckets.alloc()
		b.UpperBound = p.a.float(bound)
		if u := uint64(value); value == float64(u) {
			b.CumulativeCount = p.a.uint(u)
		} else {
			if value < 0 {
				return nil
			}
			b.CumulativeCountFloat = p.a.float(value)
		}
		h.Bucket = grow(&p.a.bucketPtrs, h.Bucket, b)
	}
	return m
}

// histogramMetric returns the metric of the line's label set (without
// le) in histogram family mf, creating it with the line's labels.
func (p *textParser) histogramMetric(mf *dto.MetricFamily, le int) *dto.Metric {
	sorted := p.pairs
	if !slices.IsSortedFunc(sorted, byPairName) {
		p.sorted = append(p.sorted[:0], p.pairs...)
		sorted = p.sorted
		slices.SortFunc(sorted, byPairName)
	}
	// 0xff occurs in no valid UTF-8 text: names and values cannot run
	// into each other.
	key := append(p.key[:0], mf.GetName()...)
	for _, pr := range sorted {
		if le >= 0 && string(pr.name) == "le" {
			continue
		}
		key = append(key, 0xff)
		key = append(key, pr.name...)
		key = append(key, 0xff)
		key = append(key, pr.value...)
	}
	p.key = key
	if m := p.a.hist[string(key)]; m != nil {
		return m
	}
	m := p.a.metrics.alloc()
	m.Label = p.labelPairs(true)
	m.Histogram = p.a.histograms.alloc()
	p.a.hist[p.a.intern(key)] = m
	mf.Metric = grow(&p.a.metricPtrs, mf.Metric, m)
	return m
}

func byPairName(a, b pair) int { return bytes.Compare(a.name, b.name) }

// isLabelName reports whether b is a label name of the legacy character
// set, the only one unquoted in the text format.
func isLabelName(b []byte) bool {
	return isMetricName(b) && bytes.IndexByte(b, ':') < 0
}

// parseFloat parses a sample value or le bound as expfmt does.
func parseFloat(b []byte) (float64, error) {
	if floatRejects.index(b) >= 0 {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseFloat(string(b), 64)
}

// normalizeHistogram makes a histogram's counts all integers or all
// floats, as expfmt does.
func normalizeHistogram(h *dto.Histogram) {
	if h == nil {
		return
	}
	anyFloats := h.GetSampleCountFloat() != 0
	for _, b := range h.GetBucket() {
		anyFloats = anyFloats || b.GetCumulativeCountFloat() != 0
	}
	if !anyFloats {
		return
	}
	if h.GetSampleCountFloat() == 0 {
		f := float64(h.GetSampleCount())
		h.SampleCountFloat, h.SampleCount = &f, nil
	}
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCountFloat() == 0 {
			f := float64(b.GetCumulativeCount())
			b.CumulativeCountFloat, b.CumulativeCount = &f, nil
		}
	}
}
