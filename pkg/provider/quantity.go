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
		return signal.Range{Min: 0, Max: signal.MaxTTFTSeconds}
	}
	r := def.signal.Range()
	if def.agg == sum && pods > 1 {
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
