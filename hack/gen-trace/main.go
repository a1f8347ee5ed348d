// Command gen-trace writes the synthetic workloads of the autoscaling
// replay (test/traces/synthetic-*.csv; docs/autoscaling.md) from stated
// distributions, in the Azure trace's CSV format. The output is fixed by
// the seed, so the committed files can be regenerated and checked:
//
//	go run ./hack/gen-trace -workload=code -out=test/traces/synthetic-code-completion.csv
//	go run ./hack/gen-trace -workload=burst -out=test/traces/synthetic-burst.csv
//
// Arrivals are a Poisson process whose rate follows the workload's
// piecewise-linear profile (thinning, Lewis and Shedler 1979); token
// counts are log-normal, rounded and clamped to what an L4 replica can
// serve at all (a prompt and its output within its 32k-token KV cache).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"time"
)

// workload is a synthetic traffic shape.
type workload struct {
	// rate is requests per minute at each knot; knots are a minute
	// apart, linear in between.
	rate []float64
	// Log-normal token counts: median and sigma of the logarithm.
	ctxMedian, ctxSigma float64
	genMedian, genSigma float64
	ctxMax, genMax      int
}

var workloads = map[string]workload{
	// Code completion: long prompts (the file around the cursor, median
	// 1,500 tokens) and short outputs (median 24 tokens), as in the
	// traffic where a fixed running-requests target failed. Load ramps
	// from 40 to 200 requests a minute over 10 minutes, holds, and falls.
	"code": {
		rate:      append(append(ramp(40, 200, 10), flat(200, 8)...), ramp(200, 60, 7)...),
		ctxMedian: 1500, ctxSigma: 0.5, ctxMax: 12000,
		genMedian: 24, genSigma: 0.7, genMax: 512,
	},
	// A step: conversation-sized requests (median 800 prompt and 200
	// output tokens) at 120 a minute that triple within one minute at
	// minute 8, hold for 8 minutes, and drop back.
	"burst": {
		rate:      append(append(append(flat(120, 8), flat(360, 8)...), flat(120, 8)...), 120),
		ctxMedian: 800, ctxSigma: 0.8, ctxMax: 8000,
		genMedian: 200, genSigma: 0.6, genMax: 2000,
	},
}

func ramp(from, to float64, minutes int) []float64 {
	out := make([]float64, minutes)
	for i := range out {
		out[i] = from + (to-from)*float64(i)/float64(minutes)
	}
	return out
}

func flat(r float64, minutes int) []float64 {
	out := make([]float64, minutes)
	for i := range out {
		out[i] = r
	}
	return out
}

func main() {
	name := flag.String("workload", "code", "Workload: code or burst.")
	out := flag.String("out", "", "Output CSV (default: stdout).")
	seed := flag.Uint64("seed", 2026, "Random seed; the committed traces use the default.")
	flag.Parse()
	w, ok := workloads[*name]
	if !ok {
		fmt.Fprintf(os.Stderr, "gen-trace: unknown workload %q\n", *name)
		os.Exit(2)
	}
	f := os.Stdout
	if *out != "" {
		var err error
		if f, err = os.Create(*out); err != nil {
			fmt.Fprintln(os.Stderr, "gen-trace:", err)
			os.Exit(1)
		}
	}
	if err := write(f, w, rand.New(rand.NewPCG(*seed, 0))); err != nil {
		fmt.Fprintln(os.Stderr, "gen-trace:", err)
		os.Exit(1)
	}
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "gen-trace:", err)
		os.Exit(1)
	}
}

func write(f *os.File, w workload, rng *rand.Rand) error {
	b := bufio.NewWriter(f)
	fmt.Fprintln(b, "TIMESTAMP,ContextTokens,GeneratedTokens")
	origin := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	peak := 0.0
	for _, r := range w.rate {
		peak = max(peak, r)
	}
	end := float64(len(w.rate)-1) * 60
	for t := 0.0; ; {
		t += rng.ExpFloat64() / (peak / 60)
		if t >= end {
			break
		}
		if rng.Float64()*peak > rateAt(w.rate, t) {
			continue // thinned
		}
		ctx := logNormal(rng, w.ctxMedian, w.ctxSigma, w.ctxMax)
		gen := logNormal(rng, w.genMedian, w.genSigma, w.genMax)
		at := origin.Add(time.Duration(t * float64(time.Second)))
		fmt.Fprintf(b, "%s,%d,%d\n", at.Format("2006-01-02 15:04:05.0000000"), ctx, gen)
	}
	return b.Flush()
}

func rateAt(knots []float64, t float64) float64 {
	i := int(t / 60)
	if i >= len(knots)-1 {
		return knots[len(knots)-1]
	}
	f := t/60 - float64(i)
	return knots[i]*(1-f) + knots[i+1]*f
}

func logNormal(rng *rand.Rand, median, sigma float64, most int) int {
	v := int(math.Round(median * math.Exp(sigma*rng.NormFloat64())))
	return min(max(v, 1), most)
}
