package promqlcompat

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

var inf = math.Inf(+1)

// layout is a bucket layout; scale converts its unit to seconds (Triton
// exposes milliseconds).
type layout struct {
	name   string
	bounds []float64 // finite bounds; +Inf is implied
	scale  float64
	median float64 // typical TTFT in the layout's unit
}

var layouts = []layout{
	{"vllm", []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}, 1, 0.3},
	{"sglang", []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}, 1, 0.7},
	{"triton-ms", []float64{100, 500, 2000, 5000}, 0.001, 400},
	{"tiny", []float64{0.5}, 1, 0.4},
	{"zero-first", []float64{0, 0.05, 0.2, 1}, 1, 0.1},
}

// itlLayouts are the servers' inter-token latency bucket layouts, in
// seconds, with a typical gap in each (pkg/adapter/inference reads these families).
var itlLayouts = []layout{
	// vllm/v1/metrics/loggers.py, inter_token_latency_seconds.
	{"vllm-itl", []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}, 1, 0.06},
	// python/sglang/srt/metrics/collector.py, inter_token_latency_seconds.
	{"sglang-itl", []float64{0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000}, 1, 0.03},
	// text-generation-inference: 35 geometric buckets from 0.00015 s
	// (tgi_request_mean_time_per_token_duration).
	{"tgi-tpot", tgiDurationBounds(), 1, 0.04},
}

func tgiDurationBounds() []float64 {
	out := make([]float64, 35)
	for i := range out {
		out[i] = 0.0001 * 1.5 * math.Pow(1.5, float64(i))
	}
	return out
}

// scenario is one histogram series, scraped every step from time 0; nil
// samples are missed scrapes.
type scenario struct {
	layout  layout
	step    time.Duration
	samples []*histogram.Histogram // bounds in the layout's unit
}

// newScenario draws a series: lognormal latencies around the layout's
// median, a load that comes and goes (idle stretches, idle high buckets),
// optional restarts (every bucket back to zero), missed scrapes, and either a
// fresh server (counters from zero) or a warm one (large counters).
func newScenario(seed uint64) scenario { return scenarioOf(seed, layouts) }

// scenarioOf is newScenario over the layouts given.
func scenarioOf(seed uint64, ls []layout) scenario { return scenarioWith(seed, ls, 0) }

// scenarioWith is scenarioOf scraped every step (0: a step drawn as
// newScenario draws it).
func scenarioWith(seed uint64, ls []layout, step time.Duration) scenario {
	rng := rand.New(rand.NewPCG(seed, 0x7ff))
	l := ls[int(seed)%len(ls)]
	steps := []time.Duration{5 * time.Second, 7 * time.Second, 10 * time.Second, 15 * time.Second}
	sc := scenario{layout: l, step: steps[rng.IntN(len(steps))]}
	if step > 0 {
		sc.step = step
	}
	n := int(5*time.Minute/sc.step) + 1
	per := make([]float64, len(l.bounds)+1) // non-cumulative bucket counts
	if rng.IntN(2) == 0 {                   // warm server
		for i := range per {
			per[i] = float64(1000 + rng.IntN(5000))
		}
	}
	restart := -1
	if rng.IntN(3) == 0 {
		restart = 1 + rng.IntN(n-1)
	}
	sigma := 0.3 + rng.Float64()
	for s := range n {
		if s == restart {
			clear(per)
		}
		load := rng.IntN(25)
		if rng.IntN(5) == 0 {
			load = 0 // idle scrape interval
		}
		for range load {
			v := l.median * math.Exp(sigma*rng.NormFloat64())
			per[bucketOf(l.bounds, v)]++
		}
		if rng.IntN(12) == 0 {
			sc.samples = append(sc.samples, nil) // missed scrape
			continue
		}
		sc.samples = append(sc.samples, cumulative(l.bounds, per))
	}
	return sc
}

func bucketOf(bounds []float64, v float64) int {
	for i, b := range bounds {
		if v <= b {
			return i
		}
	}
	return len(bounds)
}

func cumulative(bounds, per []float64) *histogram.Histogram {
	h := &histogram.Histogram{Bounds: append(append([]float64(nil), bounds...), inf)}
	c := 0.0
	for _, p := range per {
		c += p
		h.Counts = append(h.Counts, c)
	}
	h.Count = c
	return h
}

// load renders the scenario in promqltest's load syntax, as ttft_bucket
// series; missed scrapes are "_".
func (sc scenario) load() string {
	return "load " + model(sc.step) + "\n" + sc.series("ttft_bucket", "")
}

// series renders the scenario's samples as series of one bucket family,
// with extra labels (`pod="a"`, or empty) beside le.
func (sc scenario) series(bucket, labels string) string {
	var b strings.Builder
	if labels != "" {
		labels += ","
	}
	bounds := append(append([]float64(nil), sc.layout.bounds...), inf)
	for i, le := range bounds {
		fmt.Fprintf(&b, "  %s{%sle=%q}", bucket, labels, strconv.FormatFloat(le, 'g', -1, 64))
		for _, h := range sc.samples {
			if h == nil {
				b.WriteString(" _")
				continue
			}
			b.WriteString(" " + strconv.FormatFloat(h.Counts[i], 'g', -1, 64))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func model(d time.Duration) string { return strconv.Itoa(int(d/time.Second)) + "s" }

// seconds returns the scraped samples with timestamps, bounds converted to
// seconds as the adapter stores them.
func (sc scenario) seconds() []histogram.Sample {
	var out []histogram.Sample
	for i, h := range sc.samples {
		if h == nil {
			continue
		}
		s := h.Clone()
		for j := range s.Bounds {
			s.Bounds[j] *= sc.layout.scale
		}
		out = append(out, histogram.Sample{T: time.UnixMilli(int64(i) * sc.step.Milliseconds()), H: s})
	}
	return out
}
