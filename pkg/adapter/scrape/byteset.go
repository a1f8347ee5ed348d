package scrape

// byteSet is a set of bytes, for the scans every line of every scrape
// makes. bytes.IndexAny builds its set again on each call, which was a
// tenth of the scrape cycle's CPU profile (docs/performance.md, "The
// line scans").
type byteSet [256]bool

func newByteSet(chars string) *byteSet {
	var s byteSet
	for i := 0; i < len(chars); i++ {
		s[chars[i]] = true
	}
	return &s
}

// index is the index of b's first byte in s, -1 if none is.
func (s *byteSet) index(b []byte) int {
	for i, c := range b {
		if s[c] {
			return i
		}
	}
	return -1
}

var (
	blankOrEOL    = newByteSet(" \t\r\n")
	labelsOrBlank = newByteSet("{ \t")
	labelNameEnd  = newByteSet("=,} \t\"")
	// floatRejects are what strconv.ParseFloat accepts and expfmt does
	// not: hexadecimal exponents and underscores.
	floatRejects = newByteSet("pP_")
)

// leadingMetricName is the metric name a sample line starts with, up to
// its first '{', blank or line end, in one pass: ok is false when that is
// empty or no metric name of the legacy character set.
func leadingMetricName(line []byte) (name []byte, ok bool) {
	for i, c := range line {
		switch {
		case c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		case c == '{' || c == ' ' || c == '\t' || c == '\r' || c == '\n':
			return line[:i], i > 0
		default:
			return nil, false
		}
	}
	return line, len(line) > 0
}
