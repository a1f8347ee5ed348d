// Package tracetest holds small traces that tests of the replay tools share.
package tracetest

import (
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
)

// BurstThenQuiet is two minutes of a burst (600 requests a minute), then
// three quiet ones (30 a minute): evenly spaced requests of one size
// (1,500 prompt tokens, 100 generated). It is the smallest trace on which
// the two readings of a minute's need differ after a burst: a fleet sized
// for the whole trace carries the burst's backlog into the quiet minutes,
// one that follows the load does not.
func BurstThenQuiet() []trace.Request {
	var reqs []trace.Request
	add := func(from, to time.Duration, perMinute int) {
		gap := time.Minute / time.Duration(perMinute)
		for at := from; at < to; at += gap {
			reqs = append(reqs, trace.Request{At: at, ContextTokens: 1500, GeneratedTokens: 100})
		}
	}
	add(0, 2*time.Minute, 600)
	add(2*time.Minute, 5*time.Minute, 30)
	return reqs
}
