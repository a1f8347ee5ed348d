package promapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	jsoniter "github.com/json-iterator/go"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// An instant vector's answer is decoded here in one pass with
// json-iterator's streaming Iterator, keeping of each sample only the
// labels the caller asked for, its value and its time. client_golang's
// v1 API decodes the same answer into a model.Vector, whose samples
// decode through encoding/json's reflection, each into a map of all its
// labels: for 10,000 pods that was about half the adapter's CPU per list
// and most of its garbage.
//
// The answer is untrusted. It must first be valid JSON by encoding/json's
// rules, the rules the v1 API's sample decoding applied, so that nothing
// json-iterator's more lenient skipping would let through is served. Then
// anything but a well-formed instant vector is an error, never a partial
// result: the decoder is as strict as the v1 API or stricter
// (FuzzVectorDecode holds it to that), and stricter only where the v1 API
// made a value up (decode_test.go, TestStricterThanV1).

// MaxLabels is the most labels a query may ask to keep.
const MaxLabels = 64

// Sample is one sample of an instant vector, with only the labels asked
// for.
type Sample struct {
	// Value is the sample's value, NaN and infinities included.
	Value float64
	// Timestamp is the sample's time.
	Timestamp model.Time
	labels    []string
	named     uint64
}

// Label returns the value of the i-th label asked for, and whether the
// series names it at all.
func (s *Sample) Label(i int) (string, bool) {
	if i < 0 || i >= len(s.labels) {
		return "", false
	}
	return s.labels[i], s.named&(1<<i) != 0
}

// vectorType is an instant vector's resultType.
const vectorType = "vector"

// errNoResult is a 2xx answer that holds no result ("{}" from a proxy,
// say).
var errNoResult = errors.New("the answer holds no result")

// decoder decodes one answer. A failure is stored in it.Error, which
// stops the Iterator.
type decoder struct {
	it     *jsoniter.Iterator
	labels []string
	// Of the envelope:
	status, errorType, errMsg string
	// Of data:
	resultType string
	result     []Sample
	hasResult  bool
	// rawResult is a result met before its resultType.
	rawResult []byte
	// block is where the next samples' labels are cut from, so that a
	// vector's labels take a few allocations, not one per sample.
	block []string
}

// decode reads an answer to an instant query that came with status code
// code (one exchange passed on).
func decode(code int, body []byte, labels []string) ([]Sample, error) {
	if len(labels) > MaxLabels {
		return nil, fmt.Errorf("%d labels asked, at most %d", len(labels), MaxLabels)
	}
	if code == http.StatusNoContent {
		return nil, errNoResult
	}
	if !json.Valid(body) {
		return nil, &v1.Error{Type: v1.ErrBadResponse, Msg: "the answer is not valid JSON"}
	}
	it := jsoniter.ConfigDefault.BorrowIterator(body)
	defer jsoniter.ConfigDefault.ReturnIterator(it)
	d := &decoder{it: it, labels: labels}
	it.ReadObjectCB(d.envelopeField)
	if it.Error != nil {
		return nil, fmt.Errorf("%s: %w", v1.ErrBadResponse, it.Error)
	}
	switch {
	case d.status == "error":
		return nil, &v1.Error{Type: v1.ErrorType(d.errorType), Msg: d.errMsg}
	case d.status != "success":
		// The v1 API took any other status, on an error code too, as
		// success (a 422 without one: an empty vector).
		return nil, fmt.Errorf("%w: status %q, want success or error", errStricter, d.status)
	case apiError(code):
		return nil, &v1.Error{Type: v1.ErrBadResponse, Msg: "inconsistent body for response code"}
	}
	return d.vector()
}

// vector is the decoded data: an instant vector, else an error.
func (d *decoder) vector() ([]Sample, error) {
	if d.resultType == "" && !d.hasResult {
		return nil, errNoResult
	}
	if d.resultType != vectorType {
		return nil, fmt.Errorf("got a %q, want an instant vector", d.resultType)
	}
	if d.rawResult != nil {
		d.it.ResetBytes(d.rawResult)
		d.readResult()
		if d.it.Error != nil {
			return nil, fmt.Errorf("%s: %w", v1.ErrBadResponse, d.it.Error)
		}
	}
	if !d.hasResult {
		return nil, errNoResult
	}
	return d.result, nil
}

// errStricter marks the errors of answers the v1 API took, making up
// what they lack: a sample with no value, a null where a value belongs
// (the v1 API read "" or 0), a native histogram's sample (read as 0), a
// status other than success or error, label values that are not UTF-8.
var errStricter = errors.New("malformed answer")

// fail stops the decoding with an error, unless it has failed already.
func (d *decoder) fail(format string, args ...any) bool {
	if d.it.Error == nil {
		d.it.Error = fmt.Errorf(format, args...)
	}
	return false
}

// stricter fails as fail does, with errStricter.
func (d *decoder) stricter(format string, args ...any) bool {
	return d.fail("%w: "+format, append([]any{errStricter}, args...)...)
}

// want reads nothing, and fails unless the next value is of type t: a
// null is errStricter's.
func (d *decoder) want(t jsoniter.ValueType, what string) bool {
	switch d.it.WhatIsNext() {
	case t:
		return true
	case jsoniter.NilValue:
		return d.stricter("%s is null", what)
	}
	return d.fail("%s is not %s", what, typeNames[t])
}

var typeNames = map[jsoniter.ValueType]string{jsoniter.StringValue: "a string", jsoniter.NumberValue: "a number",
	jsoniter.ArrayValue: "an array", jsoniter.ObjectValue: "an object"}

// str reads a string, where json-iterator would also take null as "".
func (d *decoder) str(what string) string {
	if !d.want(jsoniter.StringValue, what) {
		return ""
	}
	return d.it.ReadString()
}

// Field names match without regard to case, as the v1 API's decoders
// match them; a field given twice counts the last time.

func (d *decoder) envelopeField(it *jsoniter.Iterator, field string) bool {
	switch {
	case strings.EqualFold(field, "status"):
		d.status = d.str("status")
	case strings.EqualFold(field, "errorType"):
		d.errorType = d.str("errorType")
	case strings.EqualFold(field, "error"):
		d.errMsg = d.str("error")
	case strings.EqualFold(field, "warnings"):
		// Read only to hold them to their type, as the v1 API does.
		it.ReadArrayCB(func(*jsoniter.Iterator) bool { d.str("a warning"); return it.Error == nil })
	case strings.EqualFold(field, "data"):
		if !d.want(jsoniter.ObjectValue, "data") {
			return false
		}
		d.resultType, d.result, d.hasResult, d.rawResult = "", nil, false, nil
		it.ReadObjectCB(d.dataField)
	default:
		it.Skip()
	}
	return it.Error == nil
}

func (d *decoder) dataField(it *jsoniter.Iterator, field string) bool {
	switch {
	case strings.EqualFold(field, "resultType"):
		d.resultType = d.str("resultType")
	case strings.EqualFold(field, "result"):
		if d.resultType != vectorType {
			// The type is not known yet, or is another: hold the
			// result until the type is known.
			d.rawResult = it.SkipAndReturnBytes()
			d.result, d.hasResult = nil, false
			return it.Error == nil
		}
		d.rawResult = nil
		d.readResult()
	default:
		it.Skip()
	}
	return it.Error == nil
}

// readResult reads an instant vector's samples.
func (d *decoder) readResult() {
	if !d.want(jsoniter.ArrayValue, "the result") {
		return
	}
	d.result, d.hasResult = d.result[:0], true
	d.it.ReadArrayCB(d.readSample)
}

// readSample reads one sample: its metric (the labels), and its value, a
// [time, "value"] pair. A sample with no value, or a native histogram's,
// is an error: the v1 API made it a 0 at 1970.
func (d *decoder) readSample(it *jsoniter.Iterator) bool {
	if !d.want(jsoniter.ObjectValue, "a sample") {
		return false
	}
	if len(d.block) < len(d.labels) {
		d.block = make([]string, 256*len(d.labels))
	}
	s := Sample{labels: d.block[:len(d.labels):len(d.labels)]}
	d.block = d.block[len(d.labels):]
	valued := false
	it.ReadObjectCB(func(it *jsoniter.Iterator, field string) bool {
		switch {
		case strings.EqualFold(field, "metric"):
			it.ReadObjectCB(func(it *jsoniter.Iterator, name string) bool { return d.label(&s, name) })
		case strings.EqualFold(field, "value"):
			valued = d.pair(&s)
		case strings.EqualFold(field, "histogram"):
			return d.stricter("a native histogram sample, want a float")
		default:
			it.Skip()
		}
		return it.Error == nil
	})
	if it.Error == nil && !valued {
		return d.stricter("a sample has no value")
	}
	d.result = append(d.result, s)
	return it.Error == nil
}

// label reads the value of the label name into s if it was asked for.
func (d *decoder) label(s *Sample, name string) bool {
	for i, l := range d.labels {
		if l != name {
			continue
		}
		v := d.str("a label value")
		if !utf8.ValidString(v) {
			// encoding/json would have made each bad byte U+FFFD.
			return d.stricter("label %q is not UTF-8", name)
		}
		s.labels[i], s.named = v, s.named|1<<i
		return d.it.Error == nil
	}
	d.it.Skip()
	return d.it.Error == nil
}

// pair reads [time, "value"] into s: the time in seconds, to the
// millisecond, and the value a float in a string ("NaN", "+Inf" and "1e3"
// included), each parsed as model.Time and model.SampleValue parse them.
func (d *decoder) pair(s *Sample) bool {
	it := d.it
	if !d.want(jsoniter.ArrayValue, "a sample's value") {
		return false
	}
	n := 0
	it.ReadArrayCB(func(it *jsoniter.Iterator) bool {
		switch n++; n {
		case 1:
			if !d.want(jsoniter.NumberValue, "a sample's time") {
				return false
			}
			if err := s.Timestamp.UnmarshalJSON([]byte(it.ReadNumber())); err != nil {
				return d.fail("a sample's time: %w", err)
			}
		case 2:
			if !d.want(jsoniter.StringValue, "a sample's value") {
				return false
			}
			v, err := strconv.ParseFloat(string(it.ReadStringAsSlice()), 64)
			if err != nil {
				return d.fail("a sample's value: %w", err)
			}
			s.Value = v
		default:
			return d.stricter("a sample's value has more than a time and a value")
		}
		return it.Error == nil
	})
	if it.Error == nil && n != 2 {
		return d.stricter("a sample's value is not a [time, value] pair")
	}
	return it.Error == nil
}
