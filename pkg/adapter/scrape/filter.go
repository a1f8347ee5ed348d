package scrape

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// Families selects the metric families a scrape parses. An inference server
// exposes dozens of histograms (latencies, token counts, the HTTP server's
// own) of which a reader needs one or two; skipping the others before they
// reach the parser cuts a vLLM scrape's parsing work and garbage several
// fold, which at thousands of targets every few seconds decides the CPU and
// memory a scraper needs. The zero value selects nothing; a nil *Families
// selects everything.
//
// Only the classic text format is filtered, line by line ahead of expfmt's
// parser. OpenMetrics and protobuf bodies, which servers send only when they
// ignore the Accept header, are parsed whole. Lines of skipped families are
// not parsed at all, so a malformed line in a family nobody reads no longer
// fails the scrape; lines the filter cannot attribute to a family (quoted
// UTF-8 names, text that is not a metric name) are always passed on, so
// garbage still fails as garbage. A selected family therefore always comes
// out whole; a family nobody selected may come out partial (its quoted
// lines without the others), which no reader looks at.
type Families struct {
	names    map[string]struct{}
	prefixes []string
}

// NewFamilies selects the families named, and the first family of the
// exposition that starts with each of prefixes, so that a reader can still
// tell whose exposition it was (an inference server's dialect) when none of
// the named families is there.
func NewFamilies(names, prefixes []string) *Families {
	f := &Families{names: make(map[string]struct{}, len(names)), prefixes: prefixes}
	for _, n := range names {
		f.names[n] = struct{}{}
	}
	return f
}

// histogramSuffixes are the sample names the text format puts under a
// histogram or summary family's own name.
var histogramSuffixes = [][]byte{[]byte("_bucket"), []byte("_sum"), []byte("_count")}

// familyFilter passes on the lines of the families sel selects (all of them
// when sel is nil), and every line it cannot attribute to a family, each
// checked by lim first. A line it passes must fit in src's buffer: the
// limits cannot judge a line they cannot see whole.
type familyFilter struct {
	src *bufio.Reader
	sel *Families
	lim *limiter
	// markers[i] is the family kept for sel.prefixes[i], once there is one.
	markers [][]byte
	// current is the family of the last HELP or TYPE line, or of the last
	// sample line outside it; keepCurrent is its decision.
	current     []byte
	keepCurrent bool
	// pending is the rest of a kept line not yet returned.
	pending []byte
	// inLine is set while a line longer than src's buffer is passed or
	// skipped; keepLine is that line's decision.
	inLine, keepLine bool
	err              error
}

func (f *familyFilter) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(f.pending) > 0 {
			c := copy(p[n:], f.pending)
			f.pending = f.pending[c:]
			n += c
			continue
		}
		if f.err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, f.err
		}
		line, err := f.src.ReadSlice('\n')
		if !f.inLine {
			f.keepLine = f.keep(line)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			f.inLine = true
		case err != nil:
			f.err = err
			f.inLine = false
		default:
			f.inLine = false
		}
		if !f.keepLine {
			continue
		}
		if f.lim != nil {
			var lerr error
			if f.inLine {
				lerr = f.lim.fail("a line longer than %d bytes", f.src.Size())
			} else {
				lerr = f.lim.line(line)
			}
			if lerr != nil {
				f.err, f.inLine = lerr, false
				continue
			}
		}
		f.pending = line
	}
	return n, nil
}

// collect appends the lines Read would pass on to dst, stopping at the
// first error other than the end of the input: the text a parser reads,
// gathered without a copy per read.
func (f *familyFilter) collect(dst []byte) ([]byte, error) {
	for {
		line, err := f.src.ReadSlice('\n')
		if !f.inLine {
			f.keepLine = f.keep(line)
		}
		f.inLine = errors.Is(err, bufio.ErrBufferFull)
		if f.keepLine && len(line) > 0 {
			if f.lim != nil {
				var lerr error
				if f.inLine {
					lerr = f.lim.fail("a line longer than %d bytes", f.src.Size())
				} else {
					lerr = f.lim.line(line)
				}
				if lerr != nil {
					return dst, lerr
				}
			}
			dst = append(dst, line...)
		}
		switch {
		case err == nil, f.inLine:
		case errors.Is(err, io.EOF):
			return dst, nil
		default:
			return dst, err
		}
	}
}

// keep decides a line from its start.
func (f *familyFilter) keep(line []byte) bool {
	if f.sel == nil {
		return true
	}
	if rest, ok := bytes.CutPrefix(line, []byte("#")); ok {
		rest = bytes.TrimLeft(rest, " \t")
		kw, rest, _ := cutToken(rest)
		if string(kw) != "HELP" && string(kw) != "TYPE" {
			return true // a comment the parser ignores
		}
		name, _, _ := cutToken(bytes.TrimLeft(rest, " \t"))
		if !isMetricName(name) {
			return true // a quoted name, or one the parser will reject
		}
		return f.family(name)
	}
	name, ok := leadingMetricName(line)
	if !ok {
		return true // blank, a quoted name, or garbage for the parser
	}
	if rest, ok := bytes.CutPrefix(name, f.current); ok && len(f.current) > 0 {
		if len(rest) == 0 {
			return f.keepCurrent
		}
		for _, s := range histogramSuffixes {
			if bytes.Equal(rest, s) {
				return f.keepCurrent
			}
		}
	}
	// The parser files a histogram's or summary's lines under the family
	// they name, wherever they are.
	for _, s := range histogramSuffixes {
		if base, ok := bytes.CutSuffix(name, s); ok && f.selected(base) {
			return true
		}
	}
	return f.family(name)
}

// family decides a family by name and makes it the current one.
func (f *familyFilter) family(name []byte) bool {
	if bytes.Equal(name, f.current) {
		return f.keepCurrent
	}
	f.current = append(f.current[:0], name...)
	f.keepCurrent = f.selected(name)
	return f.keepCurrent
}

// selected reports whether the family name is selected, by name or as the
// first of its prefix, which it becomes if there is none yet.
func (f *familyFilter) selected(name []byte) bool {
	if _, ok := f.sel.names[string(name)]; ok {
		return true
	}
	if f.markers == nil && len(f.sel.prefixes) > 0 {
		f.markers = make([][]byte, len(f.sel.prefixes))
	}
	for i, p := range f.sel.prefixes {
		if !bytes.HasPrefix(name, []byte(p)) {
			continue
		}
		if f.markers[i] == nil {
			f.markers[i] = bytes.Clone(name)
		}
		if bytes.Equal(f.markers[i], name) {
			return true
		}
	}
	return false
}

// cutToken splits b at its first space, tab or line end.
func cutToken(b []byte) (token, rest []byte, found bool) {
	if i := blankOrEOL.index(b); i >= 0 {
		return b[:i], b[i:], true
	}
	return b, nil, false
}

// isMetricName reports whether b is a metric name of the legacy character
// set, the only one the text format allows unquoted.
func isMetricName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for i, c := range b {
		switch {
		case c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

var _ io.Reader = (*familyFilter)(nil)
