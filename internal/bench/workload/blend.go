package workload

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
)

// Blend is traffic of several shapes at once, each with its own profile
// and mix: a service whose kinds of request come and go independently.
type Blend struct {
	Name, About string
	Bursty      bool
	Parts       []Shape
}

// Duration is how long the longest part lasts.
func (b Blend) Duration() time.Duration {
	var d time.Duration
	for _, p := range b.Parts {
		d = max(d, p.Duration())
	}
	return d
}

// Generate draws every part's requests, part i with seed+i, merged in
// arrival order.
func (b Blend) Generate(seed uint64) []trace.Request {
	var out []trace.Request
	for i, p := range b.Parts {
		out = append(out, p.Generate(seed+uint64(i))...)
	}
	slices.SortStableFunc(out, func(x, y trace.Request) int { return cmp.Compare(x.At, y.At) })
	return out
}

// Disaggregated is the workload of prefill/decode disaggregation's bench:
// chat, whose cost is decoding (800 prompt tokens and 200 out, medians),
// rising from 100 to 360 requests a minute and back over 45 minutes, and,
// independently of it, code completion, whose cost is prefill (1,500
// prompt tokens and 24 out), at 20 a minute with two rushes to 320 a
// minute: a 4-minute rise, 5 minutes held, a 3-minute fall, from minutes 6
// and 26. The prefill and the decode work each role must carry move
// apart: no fixed ratio of prefill to decode replicas fits all of it.
func Disaggregated() Blend {
	rush := concat(ramp(20, 320, 4), flat(320, 5), ramp(320, 20, 3))
	rushes := concat(flat(20, 6), rush, flat(20, 8), rush, flat(20, 7), []float64{20})
	return Blend{
		Name:   "disaggregated",
		About:  "chat rising from 100 to 360 a minute and back over 45 minutes, with code completion rushing from 20 to 320 a minute twice",
		Bursty: true,
		Parts: []Shape{
			{Name: "chat", Knots: wave(45, 100, 360), Mix: one(chat)},
			{Name: "code rushes", Knots: rushes, Mix: one(code)},
		},
	}
}
