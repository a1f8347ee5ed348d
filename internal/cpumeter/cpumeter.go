// Package cpumeter reports a benchmark's process CPU time per operation
// (user + system, garbage collection included). On a machine shared with
// other work, wall-clock ns/op swings with the load; CPU time per
// operation is the steadier figure to compare with a target.
package cpumeter

import (
	"syscall"
	"testing"
	"time"
)

// Meter holds the CPU time at the start of a measurement.
type Meter time.Duration

// Start resets the benchmark timer and starts measuring.
func Start(b *testing.B) Meter {
	b.ResetTimer()
	return Meter(processCPU(b))
}

// Report adds the cpu-ns/op metric.
func (m Meter) Report(b *testing.B) {
	b.ReportMetric(float64(processCPU(b)-time.Duration(m))/float64(b.N), "cpu-ns/op")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
