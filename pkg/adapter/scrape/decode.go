package scrape

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"
)

// acceptHeader asks for the classic text format, which expfmt parses fast.
// OpenMetrics is deliberately not listed, not even at a lower q: Python's
// prometheus_client (vLLM, SGLang) answers OpenMetrics whenever it is
// mentioned at all, ignoring q-values, and OpenMetrics costs a translation
// pass (see openmetrics.go). It is still decoded when a server sends it.
const acceptHeader = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// readBufSize sizes the pooled read buffer in front of the parsers; the
// parsers reuse a *bufio.Reader of at least 4 KiB rather than adding their own.
const readBufSize = 32 << 10

var (
	bufPool  = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}
	gzipPool sync.Pool // *gzip.Reader; empty until the first gzip response
)

// capReader passes at most limit bytes through and fails with ErrTooLarge when
// the source holds more. It probes a single byte past the limit to tell "ends
// exactly at the cap" from "too large", so no more than limit+1 bytes are ever
// read. It also records the source's own read error, so that a transport
// failure surfacing inside a parser is not mistaken for malformed input.
type capReader struct {
	r        io.Reader
	left     int64
	exceeded bool
	readErr  error
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.exceeded {
		return 0, ErrTooLarge
	}
	if c.left <= 0 {
		var probe [1]byte
		n, err := io.ReadFull(c.r, probe[:]) // io.EOF or nil for one byte
		if n > 0 {
			c.exceeded = true
			return 0, ErrTooLarge
		}
		return 0, c.note(err)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, c.note(err)
}

// note records err unless it is the normal end of the stream.
func (c *capReader) note(err error) error {
	if err != nil && !errors.Is(err, io.EOF) {
		c.readErr = err
	}
	return err
}

// decodeBody reads a response body of the given Content-Encoding and
// Content-Type into metric families, reading at most maxBytes+1 bytes of the
// body and of its decompressed form, within the limits lim applies (the
// default Limits without a budget when lim is nil).
func decodeBody(body io.Reader, h http.Header, maxBytes int64, sel *Families, lim *limiter) (map[string]*dto.MetricFamily, error) {
	if lim == nil {
		lim = newLimiter(Limits{}.withDefaults(), nil)
		defer lim.done()
	}
	raw := &capReader{r: body, left: maxBytes}
	src := io.Reader(raw)
	decomp := raw
	switch enc := strings.ToLower(strings.TrimSpace(h.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		gz, err := getGzip(raw)
		if errors.Is(err, io.EOF) {
			return map[string]*dto.MetricFamily{}, nil // empty body
		}
		if err != nil {
			return nil, bodyError(raw, raw, lim, &parseError{format: "gzip", err: err})
		}
		defer gzipPool.Put(gz)
		decomp = &capReader{r: gz, left: maxBytes}
		src = decomp
	default:
		return nil, &parseError{format: "body", err: fmt.Errorf("unsupported Content-Encoding %q", enc)}
	}
	fams, err := decode(src, expfmt.ResponseFormat(h), maxBytes, sel, lim)
	if err != nil {
		return nil, bodyError(raw, decomp, lim, err)
	}
	return fams, nil
}

// bodyError decides what a decode failure really was: a breached limit, a
// body over the cap and a failing transport all make the parser stop early,
// and each explains the failure better than the parser's complaint about the
// cut-off input.
func bodyError(raw, decomp *capReader, lim *limiter, err error) error {
	switch {
	case lim.err != nil:
		return lim.err
	case raw.exceeded || decomp.exceeded:
		return ErrTooLarge
	case raw.readErr != nil:
		return fmt.Errorf("reading body: %w", raw.readErr)
	default:
		return err
	}
}

// getBuf takes a reader of r from pool; putBuf returns it.
func getBuf(pool *sync.Pool, r io.Reader) *bufio.Reader {
	br := pool.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

func putBuf(pool *sync.Pool, br *bufio.Reader) {
	br.Reset(nil)
	pool.Put(br)
}

func getGzip(r io.Reader) (*gzip.Reader, error) {
	if gz, ok := gzipPool.Get().(*gzip.Reader); ok {
		if err := gz.Reset(r); err != nil {
			gzipPool.Put(gz)
			return nil, err
		}
		return gz, nil
	}
	return gzip.NewReader(r)
}

// decode parses an exposition in the given format. Metric and label names are
// validated as UTF-8 whatever the format says, so that both legacy names with
// colons (vllm:num_requests_waiting) and quoted UTF-8 names are accepted.
// Unknown formats are parsed as the classic text format, which is what
// exporters that send a bare or wrong Content-Type almost always serve.
// An empty input yields no families and no error. A non-nil sel limits the
// text format to the families it selects. lim sees every line (or protobuf
// message) before the parser does; nil applies the default Limits.
func decode(r io.Reader, format expfmt.Format, maxBytes int64, sel *Families, lim *limiter) (map[string]*dto.MetricFamily, error) {
	if lim == nil {
		lim = newLimiter(Limits{}.withDefaults(), nil)
		defer lim.done()
	}
	fams, err := decodeFormat(r, format, maxBytes, sel, lim)
	if err != nil && lim.err != nil {
		return nil, lim.err
	}
	return fams, err
}

func decodeFormat(r io.Reader, format expfmt.Format, maxBytes int64, sel *Families, lim *limiter) (map[string]*dto.MetricFamily, error) {
	br := getBuf(&bufPool, r)
	defer putBuf(&bufPool, br)
	if _, err := br.Peek(1); err != nil {
		if errors.Is(err, io.EOF) {
			return map[string]*dto.MetricFamily{}, nil
		}
		return nil, &parseError{format: "body", err: err} // e.g. corrupt gzip
	}
	switch format.FormatType() {
	case expfmt.TypeOpenMetrics:
		return decodeOpenMetrics(br, lim)
	case expfmt.TypeProtoDelim:
		return decodeProto(br, maxBytes, lim)
	default:
		return decodeText(br, sel, lim)
	}
}

// decodeText parses the classic text format, of the families sel
// selects: the selected lines are gathered (each checked by lim), then
// parsed by parseTextFast into the scrape's arena, or by expfmt where
// the text is not in the shape the fast path takes.
func decodeText(br *bufio.Reader, sel *Families, lim *limiter) (map[string]*dto.MetricFamily, error) {
	a := lim.arena
	if a == nil {
		a = newArena() // the families outlive the call: nothing to reuse
	}
	text, err := (&familyFilter{src: br, sel: sel, lim: lim}).collect(a.text[:0])
	a.text = text
	if err != nil {
		return nil, &parseError{format: "text", err: err}
	}
	if fams, ok := parseTextFast(text, a); ok {
		return fams, nil
	}
	a.resetParse()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, &parseError{format: "text", err: err}
	}
	return fams, nil
}

// decodeProto decodes delimited protobuf, which only servers that ignore
// the Accept header send. expfmt's decoder is not used: it lets a message's
// length prefix size an allocation without limit, so ten bytes of input
// could demand gigabytes. Here no message may exceed the body cap, its bytes
// are charged to the budget before they are read, and its series and labels
// are checked against the limits before it is unmarshalled.
func decodeProto(br *bufio.Reader, maxBytes int64, lim *limiter) (map[string]*dto.MetricFamily, error) {
	fams := make(map[string]*dto.MetricFamily)
	for {
		size, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			return fams, nil
		}
		if err == nil && size > uint64(maxBytes) {
			err = fmt.Errorf("message of %d bytes exceeds the body cap", size)
		}
		if err != nil {
			return nil, &parseError{format: "protobuf", err: err}
		}
		if err := lim.charge(int(size)); err != nil {
			return nil, err
		}
		msg := make([]byte, size)
		if _, err := io.ReadFull(br, msg); err != nil {
			return nil, &parseError{format: "protobuf", err: err}
		}
		if err := lim.family(msg); err != nil {
			return nil, err
		}
		mf := new(dto.MetricFamily)
		err = proto.Unmarshal(msg, mf)
		if err == nil {
			err = validateFamily(mf)
		}
		if err != nil {
			return nil, &parseError{format: "protobuf", err: err}
		}
		if len(mf.GetMetric()) == 0 {
			continue // as the text parser drops families without samples
		}
		// A family sent twice is malformed, but losing half of it
		// would be worse than keeping both halves.
		if prev, ok := fams[mf.GetName()]; ok {
			prev.Metric = append(prev.Metric, mf.Metric...)
			continue
		}
		fams[mf.GetName()] = mf
	}
}

// validateFamily applies the checks the text parser makes to names and
// label values.
func validateFamily(mf *dto.MetricFamily) error {
	if !model.UTF8Validation.IsValidMetricName(mf.GetName()) {
		return fmt.Errorf("invalid metric name %q", mf.GetName())
	}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if !model.UTF8Validation.IsValidLabelName(l.GetName()) {
				return fmt.Errorf("invalid label name %q", l.GetName())
			}
			if !utf8.ValidString(l.GetValue()) {
				return fmt.Errorf("invalid label value %q", l.GetValue())
			}
		}
	}
	return nil
}
