package ingest

import (
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/adapter/inference"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// Reasons a value is rejected while the rest of its scrape is stored. They
// are metric label values, so the set is small and fixed.
const (
	ReasonNotFinite  = "not_finite"
	ReasonOutOfRange = "out_of_range"
	ReasonWrongType  = "wrong_type"
	// ReasonTooManyBuckets is a TTFT or prefill-time histogram of more
	// than signal.MaxHistogramBuckets buckets.
	ReasonTooManyBuckets = "too_many_buckets"
	// ReasonModelName is a series, or a server's names, past
	// inference.MaxModelName or inference.MaxServerModelNames.
	ReasonModelName = "model_name"
)

// RejectReasons lists every Rejection.Reason.
var RejectReasons = [...]string{ReasonNotFinite, ReasonOutOfRange, ReasonWrongType, ReasonTooManyBuckets, ReasonModelName}

// Reasons a whole scrape is rejected, returned by Reason.
const (
	ReasonNoGPUSeries      = "no_gpu_series"
	ReasonUnknownDialect   = "unknown_dialect"
	ReasonDuplicateSeries  = "duplicate_series"
	ReasonInvalidHistogram = "invalid_histogram"
)

var (
	// ErrNoGPUSeries is returned by GPU for a scrape without any of the
	// DCGM fields it reads.
	ErrNoGPUSeries = errors.New("the exporter reported no GPU series")
	// ErrDuplicateSeries is wrapped by the error for a scrape holding one
	// series twice (one name, one label set), or a series with a label
	// twice: which of the values is meant cannot be told, and adding them
	// up would count one device or engine twice.
	ErrDuplicateSeries = errors.New("duplicate series")
)

// Reason maps an error of GPU or Inference to one of the scrape-level
// Reason* constants, for use as a metric label; "" for nil or an error it
// does not know.
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrNoGPUSeries):
		return ReasonNoGPUSeries
	case errors.Is(err, inference.ErrUnknownDialect):
		return ReasonUnknownDialect
	case errors.Is(err, ErrDuplicateSeries):
		return ReasonDuplicateSeries
	case errors.Is(err, histogram.ErrInvalid):
		return ReasonInvalidHistogram
	}
	return routerReason(err)
}

// Rejection is a value that was not stored, and with it every sum or mean
// it belongs to.
type Rejection struct {
	// Reason is one of RejectReasons.
	Reason string
	// Series is the series, name{label="value",...}, or the aggregate
	// whose sum was out of range.
	Series string
	Err    error
}

func (r Rejection) Error() string { return r.Series + ": " + r.Err.Error() }

// maxSeriesText bounds how much of a series' text a rejection or an error
// keeps: label values are the target's to choose, of any size.
const maxSeriesText = 256

// truncate cuts s to maxSeriesText bytes, on a rune boundary.
func truncate(s string) string {
	if len(s) <= maxSeriesText {
		return s
	}
	n := maxSeriesText
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "...(truncated)"
}

func rejection(series string, err error) Rejection {
	series = truncate(series)
	reason := ReasonWrongType
	switch {
	case errors.Is(err, signal.ErrNotFinite):
		reason = ReasonNotFinite
	case errors.Is(err, signal.ErrOutOfRange):
		reason = ReasonOutOfRange
	case errors.Is(err, signal.ErrTooManyBuckets):
		reason = ReasonTooManyBuckets
	case errors.Is(err, inference.ErrModelName):
		reason = ReasonModelName
	}
	return Rejection{Reason: reason, Series: series, Err: err}
}

// seriesSet finds a series seen twice in the families one reader reads. It
// keeps a hash of each series' name and label set, and compares the labels
// themselves only when two hashes agree: a string key per series was half
// of an exporter scrape's ingest allocations.
type seriesSet struct {
	seed maphash.Seed
	seen map[uint64]series
}

type series struct {
	name   string
	labels []*dto.LabelPair // sorted by name
}

func newSeriesSet() *seriesSet {
	return &seriesSet{seed: maphash.MakeSeed(), seen: map[uint64]series{}}
}

// add records m of family name; an error wrapping ErrDuplicateSeries if it
// was there already, or names one label twice (the text parser refuses
// that; the protobuf decoder does not).
func (s *seriesSet) add(name string, m *dto.Metric) error {
	lps := m.GetLabel()
	byName := func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) }
	if !slices.IsSortedFunc(lps, byName) { // the text parser sorts them
		lps = slices.Clone(lps)
		slices.SortFunc(lps, byName)
	}
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(name)
	for i, lp := range lps {
		if i > 0 && lp.GetName() == lps[i-1].GetName() {
			return fmt.Errorf("%w: label %q twice in a series of %s", ErrDuplicateSeries, truncate(lp.GetName()), name)
		}
		// 0xff occurs in no valid UTF-8 text: names and values cannot
		// run into each other.
		h.WriteByte(0xff)
		h.WriteString(lp.GetName())
		h.WriteByte(0xff)
		h.WriteString(lp.GetValue())
	}
	key := h.Sum64()
	for {
		prev, ok := s.seen[key]
		if !ok {
			s.seen[key] = series{name: name, labels: lps}
			return nil
		}
		if prev.name == name && slices.EqualFunc(prev.labels, lps, func(a, b *dto.LabelPair) bool {
			return a.GetName() == b.GetName() && a.GetValue() == b.GetValue()
		}) {
			return fmt.Errorf("%w: %s", ErrDuplicateSeries, truncate(inference.Describe(name, m)))
		}
		key++ // two series, one hash: probe on
	}
}
