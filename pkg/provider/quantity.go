package provider

import (
	"errors"
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

// errNotServable is wrapped by the error for a value that is not served:
// outside its range, or past what a quantity holds.
var errNotServable = errors.New("value not servable")

// maxMilli bounds the milli-units a quantity is served in: HPAs read
// every value with MilliValue, an int64. 2^63 itself does not fit, and
// float64(math.MaxInt64) rounds up to it.
const maxMilli = 0x1p63

// valueRange is the range of a metric's value over pods pods: the
// signal's for one pod or node and for a mean, pods times its top for a
// sum, the latency bound (a week) for a quantile of TTFT or ITL.
func valueRange(def metricDef, pods int) signal.Range {
	if def.isQuantile() {
		return def.hist.Range()
	}
	r := def.signal.Range()
	if def.agg == signal.Sum && pods > 1 {
		r.Max *= float64(pods)
	}
	return r
}

// quantityOf is the one conversion of a value to the quantity served,
// three decimals kept (HPAs compare at milli-unit precision, and TTFT in
// seconds needs millisecond resolution). It fails for a value that is not
// finite, outside the range of def over pods pods (valueRange), or that
// milli-units in an int64 cannot hold: a wrong quantity (an overflow to
// -9223372036854775808m) would make an HPA scale to its minimum.
func quantityOf(v float64, def metricDef, pods int) (resource.Quantity, error) {
	if err := valueRange(def, pods).Check(v); err != nil {
		return resource.Quantity{}, fmt.Errorf("%w: %s: %w", errNotServable, def.name, err)
	}
	milli := math.Round(v * 1000)
	if !(milli > -maxMilli && milli < maxMilli) {
		return resource.Quantity{}, fmt.Errorf("%w: %s: %g is past what a quantity holds", errNotServable, def.name, v)
	}
	if def.format == resource.BinarySI {
		return *resource.NewQuantity(int64(math.Round(v)), def.format), nil
	}
	return *resource.NewMilliQuantity(int64(milli), def.format), nil
}

// quantitySlotBits sizes quantities' table: 256 slots, the 101 whole
// percents of GPU utilization with room (18 KiB a list).
const quantitySlotBits = 8

// quantities gives one list's values as quantities whose text is worked out
// once per distinct value. The protobuf encoder asks each item's quantity
// for its text (Quantity.String, for its size and then its bytes), a
// quarter of the CPU of a 10,000-pod list's provider, conversion and
// encoding when every item worked its own out (BenchmarkListEncode10k). A
// fleet's values repeat (queue depths, GPU utilization in whole percents),
// and a value seen before takes its quantity, text and all, from a small
// direct-mapped table; copies of a Quantity share its text.
type quantities struct {
	def  metricDef
	seen [1 << quantitySlotBits]struct {
		milli int64
		q     resource.Quantity
		ok    bool
	}
}

// of is quantityOf for one pod.
func (qs *quantities) of(v float64) (resource.Quantity, error) {
	q, err := quantityOf(v, qs.def, 1)
	if err != nil {
		return q, err
	}
	// quantityOf checked that milli-units of v fit an int64, and values
	// with equal milli-units make equal quantities.
	milli := int64(math.Round(v * 1000))
	// Fibonacci hashing: values in whole units (multiples of 1,000
	// milli-units) would share a few slots by the remainder alone.
	e := &qs.seen[(uint64(milli)*0x9E3779B97F4A7C15)>>(64-quantitySlotBits)]
	if e.ok && e.milli == milli {
		return e.q, nil
	}
	_ = q.String() // cached in q, and in every copy of it
	e.milli, e.q, e.ok = milli, q, true
	return q, nil
}
