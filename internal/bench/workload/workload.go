// Package workload generates synthetic LLM traffic of stated shapes: a rate
// profile over time, and prompt and output lengths drawn from stated
// distributions. It makes the project's two synthetic traces
// (test/traces/synthetic-*.csv, through hack/gen-trace) and the family of
// shapes the autoscaling signals are checked on (Family; docs/autoscaling.md,
// "Robustness"), so that a signal's defaults are judged on traffic they
// were not designed on.
//
// Arrivals are a Poisson process whose rate follows the shape's profile
// (thinning, Lewis and Shedler 1979); token counts are log-normal, from one
// component of a mixture. Everything is fixed by the seed.
package workload

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
)

// Lengths is one log-normal distribution of prompt and output lengths:
// the median and the sigma of the logarithm of each, and the most tokens
// drawn (a longer draw is clamped to it).
type Lengths struct {
	CtxMedian, CtxSigma float64
	GenMedian, GenSigma float64
	CtxMax, GenMax      int
}

// Component is one kind of request in a mix, drawn with the given weight.
type Component struct {
	Weight float64
	Lengths
}

// Shape is a synthetic workload.
type Shape struct {
	// Name is the shape's name in tables and file names.
	Name string
	// About says in one line what the traffic does.
	About string
	// Bursty shapes have lulls or bursts: load that changes faster than
	// a replica starts. The robustness goals ask more of a signal on
	// them (docs/autoscaling.md).
	Bursty bool
	// Step is the time between the profile's knots (a minute if 0), and
	// Knots the rate at each, in requests per minute, linear in between.
	// The shape lasts until the last knot.
	Step  time.Duration
	Knots []float64
	// Mix are the request kinds; one component draws no extra random
	// number per request.
	Mix []Component
}

// Duration is how long the shape's traffic lasts.
func (s Shape) Duration() time.Duration {
	return time.Duration(len(s.Knots)-1) * s.step()
}

func (s Shape) step() time.Duration {
	if s.Step <= 0 {
		return time.Minute
	}
	return s.Step
}

// rateAt is the rate in requests per minute t seconds in.
func (s Shape) rateAt(t float64) float64 {
	step := s.step().Seconds()
	i := int(t / step)
	if i >= len(s.Knots)-1 {
		return s.Knots[len(s.Knots)-1]
	}
	f := t/step - float64(i)
	return s.Knots[i]*(1-f) + s.Knots[i+1]*f
}

// Generate draws the shape's requests with the given seed, in arrival
// order.
func (s Shape) Generate(seed uint64) []trace.Request {
	rng := rand.New(rand.NewPCG(seed, 0))
	peak := 0.0
	for _, r := range s.Knots {
		peak = max(peak, r)
	}
	var out []trace.Request
	if peak <= 0 {
		return out
	}
	end := s.Duration().Seconds()
	for t := 0.0; ; {
		t += rng.ExpFloat64() / (peak / 60)
		if t >= end {
			break
		}
		if rng.Float64()*peak > s.rateAt(t) {
			continue // thinned
		}
		l := s.pick(rng)
		ctx := logNormal(rng, l.CtxMedian, l.CtxSigma, l.CtxMax)
		gen := logNormal(rng, l.GenMedian, l.GenSigma, l.GenMax)
		out = append(out, trace.Request{At: time.Duration(t * float64(time.Second)), ContextTokens: ctx, GeneratedTokens: gen})
	}
	return out
}

// pick draws a component of the mix.
func (s Shape) pick(rng *rand.Rand) Lengths {
	if len(s.Mix) == 1 {
		return s.Mix[0].Lengths
	}
	total := 0.0
	for _, c := range s.Mix {
		total += c.Weight
	}
	x := rng.Float64() * total
	for _, c := range s.Mix {
		if x < c.Weight {
			return c.Lengths
		}
		x -= c.Weight
	}
	return s.Mix[len(s.Mix)-1].Lengths
}

func logNormal(rng *rand.Rand, median, sigma float64, most int) int {
	v := int(math.Round(median * math.Exp(sigma*rng.NormFloat64())))
	return min(max(v, 1), most)
}

// origin is the wall-clock start written into generated traces.
var origin = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// WriteCSV writes requests in the Azure trace's CSV format, starting at a
// fixed wall-clock time, so that the same requests write the same bytes.
func WriteCSV(w io.Writer, reqs []trace.Request) error {
	b := bufio.NewWriter(w)
	fmt.Fprintln(b, "TIMESTAMP,ContextTokens,GeneratedTokens")
	for _, r := range reqs {
		fmt.Fprintf(b, "%s,%d,%d\n", origin.Add(r.At).Format("2006-01-02 15:04:05.0000000"), r.ContextTokens, r.GeneratedTokens)
	}
	return b.Flush()
}
