package scrape

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// OpenMetrics is decoded by translating it, line by line, into the classic
// text format and running expfmt's text parser over the result. expfmt's own
// OpenMetrics decoder (v0.73) matches every line against an ABNF grammar; it
// costs ~100ms and ~100MB of garbage per 5 KB vLLM exposition and grows
// roughly cubically with line length (minutes for one 4 KB label value),
// unbounded by any deadline. Targets control their output, so that decoder
// is not fit for this package.
//
// The translation is linear and keeps what consumers of the text format see:
//   - "# TYPE x counter" becomes "# TYPE x_total counter", matching the
//     x_total samples (as the text format names counter families);
//   - "info" families become gauges named x_info, "stateset" gauges,
//     "unknown" untyped;
//   - exemplars are dropped, timestamps converted from seconds to ms;
//   - HELP and UNIT are set on the parsed families afterwards (HELP may
//     precede TYPE, so renames are not known when it is read);
//   - _created samples stay separate untyped families, as the text format
//     exposes them as separate gauges.
//
// The exposition must end with "# EOF", which is how OpenMetrics tells a
// complete exposition from a cut-off one; anything after it is ignored.

var (
	errNoEOF       = errors.New(`exposition does not end with "# EOF"`)
	omUnescapeHelp = strings.NewReplacer(`\\`, `\`, `\n`, "\n", `\"`, `"`)
)

// decodeOpenMetrics parses OpenMetrics 1.0 (or 0.0.1) text from br, whose
// buffer size bounds the accepted line length, within the limits of lim.
func decodeOpenMetrics(br *bufio.Reader, lim *limiter) (map[string]*dto.MetricFamily, error) {
	om := &omReader{br: br, lim: lim}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(om)
	if err == nil && !om.sawEOF {
		err = errNoEOF
	}
	if err != nil {
		return nil, &parseError{format: "openmetrics", err: err}
	}
	om.meta.apply(fams)
	return fams, nil
}

// omReader is an io.Reader of classic text translated from OpenMetrics.
type omReader struct {
	br      *bufio.Reader
	lim     *limiter
	pending []byte // translated output not yet returned
	out     []byte // scratch for rewritten lines
	meta    omMeta
	sawEOF  bool
	err     error // returned once pending is drained
}

func (o *omReader) Read(p []byte) (int, error) {
	for len(o.pending) == 0 {
		if o.err != nil {
			return 0, o.err
		}
		o.next()
	}
	n := copy(p, o.pending)
	o.pending = o.pending[n:]
	return n, nil
}

// next translates the next input line into pending.
func (o *omReader) next() {
	line, err := o.br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		o.err = fmt.Errorf("line longer than %d bytes", o.br.Size())
		return
	case err != nil:
		o.err = err
		if len(line) == 0 {
			return
		}
		// A last line without its newline: translate it all the same.
		line = append(append(make([]byte, 0, len(line)+1), line...), '\n')
	}
	o.pending = o.translate(line)
	if o.lim == nil {
		return
	}
	// Checked as translated, as the parser will see it; HELP and UNIT
	// lines, kept aside, are charged as comments.
	var lerr error
	if len(o.pending) > 0 {
		lerr = o.lim.line(o.pending)
	} else if !o.sawEOF && len(line) > 1 && line[0] == '#' {
		lerr = o.lim.charge(costComment + len(line))
	}
	if lerr != nil {
		o.pending, o.err = nil, lerr
	}
}

// translate returns the text-format equivalent of one newline-terminated
// OpenMetrics line; it may alias line, which stays valid until the next read.
func (o *omReader) translate(line []byte) []byte {
	body := line[:len(line)-1]
	if len(body) == 0 || body[0] != '#' {
		return o.sample(line, body)
	}
	switch {
	case string(body) == "# EOF":
		o.sawEOF = true
		o.err = io.EOF
		return nil
	case bytes.HasPrefix(body, []byte("# TYPE ")):
		return o.typeLine(line, body[len("# TYPE "):])
	case bytes.HasPrefix(body, []byte("# HELP ")):
		if name, text, ok := cutName(body[len("# HELP "):]); ok {
			o.meta.set(&o.meta.help, name, omUnescapeHelp.Replace(string(text)))
		}
	case bytes.HasPrefix(body, []byte("# UNIT ")):
		if name, unit, ok := cutName(body[len("# UNIT "):]); ok && len(unit) > 0 {
			o.meta.set(&o.meta.unit, name, string(unit))
		}
	}
	return nil // other comments carry nothing
}

// typeLine rewrites the OpenMetrics types the text format lacks.
func (o *omReader) typeLine(line, rest []byte) []byte {
	name, typ, ok := cutName(rest)
	if !ok {
		return line // let the parser report it
	}
	var suffix, newType string
	switch string(typ) {
	case "counter":
		suffix, newType = "_total", "counter"
	case "info":
		suffix, newType = "_info", "gauge"
	case "stateset":
		newType = "gauge"
	case "unknown":
		newType = "untyped"
	default:
		return line
	}
	renamed := name
	if suffix != "" {
		renamed = appendNameSuffix(nil, name, suffix)
		o.meta.rename(unquoteName(renamed), unquoteName(name))
	}
	out := append(o.out[:0], "# TYPE "...)
	out = append(out, renamed...)
	out = append(out, ' ')
	out = append(out, newType...)
	out = append(out, '\n')
	o.out = out
	return out
}

// sample drops a sample line's exemplar and converts its timestamp from
// seconds to milliseconds; lines with neither pass through untouched.
func (o *omReader) sample(line, body []byte) []byte {
	end := sampleHeadEnd(body)
	if end < 0 {
		return line
	}
	value, rest, more := bytes.Cut(body[end+1:], []byte{' '})
	if !more {
		return line
	}
	out := append(o.out[:0], body[:end+1]...)
	out = append(out, value...)
	if ts, _, _ := bytes.Cut(rest, []byte{' '}); len(ts) > 0 && ts[0] != '#' {
		ms, ok := secondsToMillis(ts)
		if !ok {
			return line // let the parser report it
		}
		out = append(out, ' ')
		out = strconv.AppendInt(out, ms, 10)
	}
	out = append(out, '\n')
	o.out = out
	return out
}

// sampleHeadEnd returns the index of the space that ends a sample's name and
// labels, skipping over quoted strings, or -1.
func sampleHeadEnd(b []byte) int {
	depth, quoted := 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case quoted && c == '\\':
			i++
		case quoted:
			quoted = c != '"'
		case c == '"':
			quoted = true
		case c == '{':
			depth++
		case c == '}':
			depth--
		case c == ' ' && depth == 0:
			return i
		}
	}
	return -1
}

// cutName splits a metric name, bare or quoted, off the front of a
// descriptor, and the single space after it.
func cutName(b []byte) (name, rest []byte, ok bool) {
	end := bytes.IndexByte(b, ' ')
	if len(b) > 0 && b[0] == '"' {
		end = -1
		for i := 1; i < len(b); i++ {
			if b[i] == '\\' {
				i++
			} else if b[i] == '"' {
				end = i + 1
				break
			}
		}
		if end < 0 {
			return nil, nil, false
		}
	}
	if end < 0 {
		end = len(b)
	}
	if end == 0 {
		return nil, nil, false
	}
	rest = b[end:]
	if len(rest) > 0 {
		if rest[0] != ' ' {
			return nil, nil, false
		}
		rest = rest[1:]
	}
	return b[:end], rest, true
}

// appendNameSuffix appends name with suffix added inside its quotes, if any.
func appendNameSuffix(dst, name []byte, suffix string) []byte {
	if name[0] == '"' {
		dst = append(dst, name[:len(name)-1]...)
		dst = append(dst, suffix...)
		return append(dst, '"')
	}
	dst = append(dst, name...)
	return append(dst, suffix...)
}

func unquoteName(name []byte) string {
	if len(name) >= 2 && name[0] == '"' {
		return omUnescapeHelp.Replace(string(name[1 : len(name)-1]))
	}
	return string(name)
}

func secondsToMillis(b []byte) (int64, bool) {
	f, err := strconv.ParseFloat(string(b), 64)
	ms := math.Round(f * 1000)
	if err != nil || math.IsNaN(ms) || math.Abs(ms) >= math.MaxInt64 {
		return 0, false
	}
	return int64(ms), true
}

// omMeta holds what OpenMetrics says about families apart from their samples.
type omMeta struct {
	help, unit map[string]string // by OpenMetrics family name
	renamed    map[string]string // parsed family name -> OpenMetrics name
}

func (m *omMeta) set(dst *map[string]string, name []byte, v string) {
	if *dst == nil {
		*dst = make(map[string]string)
	}
	(*dst)[unquoteName(name)] = v
}

func (m *omMeta) rename(parsed, om string) {
	if m.renamed == nil {
		m.renamed = make(map[string]string)
	}
	m.renamed[parsed] = om
}

// apply sets HELP and UNIT on the parsed families.
func (m *omMeta) apply(fams map[string]*dto.MetricFamily) {
	if m.help == nil && m.unit == nil {
		return
	}
	for name, mf := range fams {
		if om, ok := m.renamed[name]; ok {
			name = om
		}
		if help, ok := m.help[name]; ok {
			mf.Help = &help
		}
		if unit, ok := m.unit[name]; ok {
			mf.Unit = &unit
		}
	}
}
