package capacity

import (
	"fmt"
	"math"
	"testing"

	"github.com/gpuscale/gpuscale/internal/harness/cpumeter"
)

// erlangCNaive and maxLoadNaive are Erlang C and MaxLoad as first written:
// the recurrence from k = 0 and a bisection over [0, c]; exact, and in
// time linear in c.
func erlangCNaive(c int, a float64) float64 {
	if a >= float64(c) {
		return 1
	}
	b := 1.0
	for k := 1; k <= c; k++ {
		b = a * b / (float64(k) + a*b)
	}
	return float64(c) * b / (float64(c) - a*(1-b))
}

func maxLoadNaive(c int, wait float64) float64 {
	lo, hi := 0.0, float64(c)
	for range 200 {
		mid := (lo + hi) / 2
		if erlangCNaive(c, mid) <= wait {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo < 1e-12*math.Max(1, hi) {
			break
		}
	}
	return lo
}

// TestErlangCMatchesTheFullRecurrence: starting the recurrence below the
// load changes Erlang C by no more than rounding.
func TestErlangCMatchesTheFullRecurrence(t *testing.T) {
	for _, c := range []int{1, 2, 7, 50, 300, 1000, 5000, 16384, 70000} {
		for _, share := range []float64{0.01, 0.3, 0.8, 0.95, 0.99, 0.999} {
			a := share * float64(c)
			got, want := ErlangC(c, a), erlangCNaive(c, a)
			if math.Abs(got-want) > 1e-12*math.Max(want, 1e-300) && math.Abs(got-want) > 1e-15 {
				t.Errorf("ErlangC(%d, %g) = %.17g, the full recurrence %.17g", c, a, got, want)
			}
		}
	}
}

// TestMaxLoadMatchesTheNaiveSolution: up to exactSlots MaxLoad solves the
// same equation as the naive bisection, to its precision.
func TestMaxLoadMatchesTheNaiveSolution(t *testing.T) {
	for _, wait := range []float64{0.5, 0.1, 0.01, 1e-4} {
		for _, c := range []int{1, 2, 3, 10, 23, 100, 1000, 4096, exactSlots} {
			got, want := MaxLoad(c, wait), maxLoadNaive(c, wait)
			if math.Abs(got-want) > 2e-9*math.Max(1, want) {
				t.Errorf("MaxLoad(%d, %g) = %.12g, want %.12g", c, wait, got, want)
			}
		}
	}
}

// TestMaxLoadPastExactSlots: past exactSlots, the spare capacity's law
// fitted at exactSlots stays within a hundredth of a request of the exact
// answer up to 16 times exactSlots for p90 and p99 objectives, and
// MaxLoad keeps rising with c, as does the share of the slots it uses.
func TestMaxLoadPastExactSlots(t *testing.T) {
	for _, wait := range []float64{0.1, 0.01} {
		for _, c := range []int{exactSlots + 1, 2 * exactSlots, 4 * exactSlots, 16 * exactSlots} {
			got, want := MaxLoad(c, wait), maxLoadNaive(c, wait)
			if math.Abs(got-want) > 0.01 {
				t.Errorf("MaxLoad(%d, %g) = %.6f, exactly %.6f", c, wait, got, want)
			}
		}
		prev, prevShare := 0.0, 0.0
		for c := exactSlots - 2; c < 1<<31; c = c*3/2 + 1 {
			l := MaxLoad(c, wait)
			if !(l > prev) || !(l/float64(c) >= prevShare) || l >= float64(c) {
				t.Fatalf("MaxLoad(%d, %g) = %g after %g (share %g after %g)", c, wait, l, prev, l/float64(c), prevShare)
			}
			prev, prevShare = l, l/float64(c)
		}
	}
}

// BenchmarkMaxLoad is the per-replica capacity of an estimate, for slot
// counts up to what one server can hold (2^30): a pod's own numbers set
// the slots (running requests over KV cache in use), so a read's cost
// must not grow with them.
func BenchmarkMaxLoad(b *testing.B) {
	for _, c := range []int{20, 1000, exactSlots, 1 << 20, 1 << 30} {
		b.Run(fmt.Sprintf("slots=%d", c), func(b *testing.B) {
			cpu := cpumeter.Start(b)
			for range b.N {
				anchored.Store(nil) // the worst case: no anchor kept
				MaxLoad(c, 0.1)
			}
			cpu.Report(b)
		})
	}
}
