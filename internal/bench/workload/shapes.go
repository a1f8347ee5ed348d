package workload

import (
	"math"
	"math/rand/v2"
	"time"
)

// Request kinds, each a log-normal of prompt and output lengths. Caps are
// what a model's context allows, not what one replica holds: a request too
// large for a replica's KV cache is served by none and is rejected there,
// as vLLM rejects it (HTTP 400), so the mixes that draw such requests test
// that path.
var (
	// chat: conversation turns (the Azure conversation trace's medians
	// are about 1,000 prompt and 250 output tokens).
	chat = Lengths{CtxMedian: 800, CtxSigma: 0.8, GenMedian: 200, GenSigma: 0.6, CtxMax: 8000, GenMax: 2000}
	// code: completion around a cursor: long prompts, short outputs.
	code = Lengths{CtxMedian: 1500, CtxSigma: 0.5, GenMedian: 24, GenSigma: 0.7, CtxMax: 12000, GenMax: 512}
	// codeHeavy: as code, with a heavier prompt tail (p90 about 4,800).
	codeHeavy = Lengths{CtxMedian: 1500, CtxSigma: 0.9, GenMedian: 30, GenSigma: 0.9, CtxMax: 32000, GenMax: 1024}
	// longDoc: retrieval or document chat: median 6,900 prompt tokens,
	// p90 about 27,000, some 7% longer than an L4's 32k-token KV cache.
	longDoc = Lengths{CtxMedian: 6900, CtxSigma: 1.06, GenMedian: 250, GenSigma: 0.7, CtxMax: 128000, GenMax: 2000}
	// short: quick questions.
	short = Lengths{CtxMedian: 400, CtxSigma: 0.6, GenMedian: 120, GenSigma: 0.6, CtxMax: 4000, GenMax: 1000}
	// doc: summaries of long documents.
	doc = Lengths{CtxMedian: 9000, CtxSigma: 0.5, GenMedian: 500, GenSigma: 0.5, CtxMax: 30000, GenMax: 2000}
	// reasoning: short prompts with long outputs.
	reasoning = Lengths{CtxMedian: 300, CtxSigma: 0.7, GenMedian: 700, GenSigma: 0.8, CtxMax: 4000, GenMax: 6000}
)

func one(l Lengths) []Component { return []Component{{Weight: 1, Lengths: l}} }

// CodeCompletion is test/traces/synthetic-code-completion.csv: load ramps
// from 40 to 200 requests a minute over 10 minutes, holds, and falls.
func CodeCompletion() Shape {
	return Shape{
		Name:  "code-completion",
		About: "code completion: 40 to 200 requests a minute over 10 minutes, 8 held, then falling",
		Knots: concat(ramp(40, 200, 10), flat(200, 8), ramp(200, 60, 7)),
		Mix:   one(code),
	}
}

// Burst is test/traces/synthetic-burst.csv: 120 requests a minute that
// triple within one minute at minute 8, hold for 8 minutes, and drop back.
func Burst() Shape {
	return Shape{
		Name:   "burst",
		About:  "chat: 120 requests a minute, tripled from minute 8 to 16",
		Bursty: true,
		Knots:  concat(flat(120, 8), flat(360, 8), flat(120, 8), []float64{120}),
		Mix:    one(chat),
	}
}

// Family is the shapes a signal's defaults are checked on: each kind of
// change a serving fleet meets, with request mixes from short chat to
// long documents. None was used to choose a default (docs/autoscaling.md).
func Family() []Shape {
	return []Shape{
		{
			Name: "lulls", Bursty: true, Step: 10 * time.Second, Mix: one(codeHeavy),
			About: "code completion in bursts of 2-4 minutes at 450-650 a minute, lulls of 1-3 minutes at 3 a minute",
			Knots: onOff(45*time.Minute, 10*time.Second, 11,
				[2]time.Duration{2 * time.Minute, 4 * time.Minute}, [2]float64{450, 650},
				[2]time.Duration{time.Minute, 3 * time.Minute}, [2]float64{3, 3}),
		},
		{
			Name: "diurnal", Mix: one(chat),
			About: "chat rising from 120 to 600 a minute and back over an hour, as a day compressed",
			Knots: wave(60, 120, 600),
		},
		{
			Name: "doubling", Mix: one(chat),
			About: "chat at 300 a minute that doubles at minute 20 and stays doubled",
			Knots: concat(flat(300, 20), flat(600, 25), []float64{600}),
		},
		{
			Name: "decay", Mix: one(chat),
			About: "chat falling from 780 to 120 a minute over 50 minutes, as a launch's interest fades",
			Knots: decay(50, 780, 120),
		},
		{
			Name: "long-context", Mix: one(longDoc),
			About: "document chat at a steady 40 a minute; prompts median 6,900, p90 27,000, 7% beyond the KV cache",
			Knots: noisy(45, 40, 0.1, 12),
		},
		{
			Name: "mixed", Mix: []Component{{Weight: 0.85, Lengths: short}, {Weight: 0.15, Lengths: doc}},
			About: "85% short questions, 15% 9,000-token documents, 150 a minute wandering by 20%",
			Knots: noisy(45, 150, 0.2, 13),
		},
		{
			Name: "flash-crowd", Bursty: true, Step: 10 * time.Second, Mix: one(chat),
			About: "chat at 240 a minute with two 3-minute crowds of 960 a minute, at minutes 12 and 32",
			Knots: spikes(45*time.Minute, 10*time.Second, 240, 960, 3*time.Minute, 12*time.Minute, 32*time.Minute),
		},
		{
			Name: "on-off", Bursty: true, Step: 10 * time.Second, Mix: one(code),
			About: "code completion 8 minutes on at 800 a minute, 6 minutes off at 30 a minute, four times",
			Knots: square(56*time.Minute, 10*time.Second, 8*time.Minute, 6*time.Minute, 800, 30),
		},
		{
			Name: "ramp-up", Mix: one(chat),
			About: "chat growing from 60 to 720 a minute over 40 minutes, then held",
			Knots: concat(ramp(60, 720, 40), flat(720, 10), []float64{720}),
		},
		{
			Name: "sawtooth", Bursty: true, Mix: one(chat),
			About: "chat ramping from 120 to 720 a minute over 6 minutes, then dropping back, seven times",
			Knots: sawtooth(7, 6, 120, 720),
		},
		{
			Name: "on-off-random", Bursty: true, Step: 10 * time.Second, Mix: one(codeHeavy),
			About: "code completion switching at random between 800 a minute for 30-120 s and 40 a minute for 30-150 s",
			Knots: onOff(45*time.Minute, 10*time.Second, 17,
				[2]time.Duration{30 * time.Second, 2 * time.Minute}, [2]float64{800, 800},
				[2]time.Duration{30 * time.Second, 150 * time.Second}, [2]float64{40, 40}),
		},
		{
			Name: "steady-low", Mix: one(chat),
			About: "chat at a steady 15 a minute: one or two replicas",
			Knots: flat(15, 31),
		},
		{
			Name: "long-output", Mix: one(reasoning),
			About: "reasoning: short prompts, outputs median 700 tokens, 150 a minute wandering by 15%",
			Knots: noisy(45, 150, 0.15, 14),
		},
		{
			Name: "spiky", Bursty: true, Step: 30 * time.Second, Mix: one(chat),
			About: "chat whose rate is redrawn every 30 s around 360 a minute, log-normal with sigma 0.5",
			Knots: lognormalSteps(45*time.Minute, 30*time.Second, 360, 0.5, 15),
		},
	}
}

func concat(parts ...[]float64) []float64 {
	var out []float64
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// ramp is minutes knots from from towards to (to not included).
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

// wave is a raised cosine from lo up to hi and back over minutes.
func wave(minutes int, lo, hi float64) []float64 {
	out := make([]float64, minutes+1)
	for i := range out {
		out[i] = lo + (hi-lo)*(1-math.Cos(2*math.Pi*float64(i)/float64(minutes)))/2
	}
	return out
}

// decay falls exponentially from hi to lo over minutes.
func decay(minutes int, hi, lo float64) []float64 {
	out := make([]float64, minutes+1)
	for i := range out {
		out[i] = hi * math.Pow(lo/hi, float64(i)/float64(minutes))
	}
	return out
}

// noisy is rate with each minute's knot drawn within +-spread of it.
func noisy(minutes int, rate, spread float64, seed uint64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]float64, minutes+1)
	for i := range out {
		out[i] = rate * (1 + spread*(2*rng.Float64()-1))
	}
	return out
}

// knotsFor is how many step-spaced knots cover d.
func knotsFor(d, step time.Duration) int { return int(d/step) + 1 }

// square alternates on and off periods of the given rates over d.
func square(d, step, on, off time.Duration, hi, lo float64) []float64 {
	out := make([]float64, knotsFor(d, step))
	for i := range out {
		t := time.Duration(i) * step % (on + off)
		out[i] = lo
		if t < on {
			out[i] = hi
		}
	}
	return out
}

// onOff alternates on periods (length and rate drawn uniformly from their
// ranges) with off periods, drawn from seed; it starts on.
func onOff(d, step time.Duration, seed uint64, onLen [2]time.Duration, onRate [2]float64, offLen [2]time.Duration, offRate [2]float64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	draw := func(r [2]time.Duration) time.Duration {
		return (r[0] + time.Duration(rng.Float64()*float64(r[1]-r[0]))).Round(step)
	}
	out := make([]float64, knotsFor(d, step))
	on := true
	for i := 0; i < len(out); {
		length, rate := draw(offLen), offRate[0]+rng.Float64()*(offRate[1]-offRate[0])
		if on {
			length, rate = draw(onLen), onRate[0]+rng.Float64()*(onRate[1]-onRate[0])
		}
		for n := max(1, int(length/step)); n > 0 && i < len(out); n-- {
			out[i] = rate
			i++
		}
		on = !on
	}
	return out
}

// spikes is base with each of the spikes (at the given starts, of length
// each) at peak.
func spikes(d, step time.Duration, base, peak float64, length time.Duration, starts ...time.Duration) []float64 {
	out := make([]float64, knotsFor(d, step))
	for i := range out {
		t := time.Duration(i) * step
		out[i] = base
		for _, s := range starts {
			if t >= s && t < s+length {
				out[i] = peak
			}
		}
	}
	return out
}

// sawtooth is n ramps from lo to hi, each of the given minutes, each
// dropping back to lo.
func sawtooth(n, minutes int, lo, hi float64) []float64 {
	var out []float64
	for range n {
		out = append(out, ramp(lo, hi, minutes)...)
	}
	return append(out, lo)
}

// lognormalSteps holds a rate drawn log-normally around median for each
// step.
func lognormalSteps(d, step time.Duration, median, sigma float64, seed uint64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]float64, knotsFor(d, step))
	for i := range out {
		out[i] = median * math.Exp(sigma*rng.NormFloat64())
	}
	return out
}
