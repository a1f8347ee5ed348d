package inferencesim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// MaxRate is the highest arrival rate Load accepts, in requests per second.
// It bounds the work of one Advance call, not the model.
const MaxRate = 100_000

// DefaultRequest is the default request size: roughly the median of the
// Azure LLM inference conversation trace (1020 prompt and 129 generated
// tokens).
var DefaultRequest = Request{ContextTokens: 1000, GeneratedTokens: 130}

// Sizes draws request sizes.
type Sizes interface {
	Sample(rng *rand.Rand) Request
}

// FixedSizes makes every request the same.
type FixedSizes Request

// Sample implements Sizes.
func (f FixedSizes) Sample(*rand.Rand) Request { return Request(f) }

// EmpiricalSizes draws uniformly from a list of requests, for example the
// sizes found in a production trace.
type EmpiricalSizes []Request

// Sample implements Sizes.
func (e EmpiricalSizes) Sample(rng *rand.Rand) Request { return e[rng.IntN(len(e))] }

// validateSizes checks that every size s can draw is servable under p.
func validateSizes(s Sizes, p Profile) error {
	switch s := s.(type) {
	case nil:
		return errors.New("inferencesim: no request sizes")
	case FixedSizes:
		return Request(s).Validate(p)
	case EmpiricalSizes:
		if len(s) == 0 {
			return errors.New("inferencesim: empirical sizes are empty")
		}
		for i, r := range s {
			if err := r.Validate(p); err != nil {
				return fmt.Errorf("empirical size %d: %w", i, err)
			}
		}
	}
	return nil
}

// Load generates Poisson arrivals at a rate that can change at run time. It
// is deterministic: the same seed, sizes and sequence of SetRate and Drive
// calls produce the same requests at the same instants. It is not safe for
// concurrent use.
type Load struct {
	rng   *rand.Rand
	sizes Sizes
	rate  float64
	next  time.Time // the next arrival; meaningless while rate is 0
}

// NewLoad returns a load with rate 0 that draws sizes from sizes
// (DefaultRequest when nil).
func NewLoad(seed uint64, sizes Sizes) *Load {
	if sizes == nil {
		sizes = FixedSizes(DefaultRequest)
	}
	// Two PCG words from one seed; the constant only keeps them apart.
	return &Load{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), sizes: sizes}
}

// Rate returns the arrival rate in requests per second.
func (l *Load) Rate() float64 { return l.rate }

// Sizes returns the request size distribution.
func (l *Load) Sizes() Sizes { return l.sizes }

// SetSizes changes the request size distribution for later arrivals.
func (l *Load) SetSizes(s Sizes) { l.sizes = s }

// SetRate changes the arrival rate from instant at on. Poisson arrivals are
// memoryless, so the next arrival is simply drawn afresh at the new rate.
func (l *Load) SetRate(at time.Time, rate float64) error {
	if math.IsNaN(rate) || rate < 0 || rate > MaxRate {
		return fmt.Errorf("inferencesim: rate must be between 0 and %d requests/s, got %v", MaxRate, rate)
	}
	l.rate = rate
	if rate > 0 {
		l.next = at.Add(l.gap())
	}
	return nil
}

// Drive submits to e every arrival up to to and advances e to to.
// Requests e rejects are counted in its Stats.
func (l *Load) Drive(e *Engine, to time.Time) {
	for l.rate > 0 && !l.next.After(to) {
		_ = e.SubmitAt(l.next, l.sizes.Sample(l.rng))
		l.next = l.next.Add(l.gap())
	}
	e.Advance(to)
}

// gap draws the time to the next arrival. It is at least 1ns so that time
// always moves.
func (l *Load) gap() time.Duration {
	return max(time.Nanosecond, time.Duration(l.rng.ExpFloat64()/l.rate*float64(time.Second)))
}
