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
type Meter struct {
	start, paused, excluded time.Duration
}

// Start resets the benchmark timer and starts measuring.
func Start(b *testing.B) *Meter {
	b.ResetTimer()
	return &Meter{start: processCPU(b)}
}

// Pause stops the benchmark timer and the meter, for set-up work inside
// the loop that is not part of the operation.
func (m *Meter) Pause(b *testing.B) {
	b.StopTimer()
	m.paused = processCPU(b)
}

// Resume restarts both after Pause.
func (m *Meter) Resume(b *testing.B) {
	m.excluded += processCPU(b) - m.paused
	b.StartTimer()
}

// Report adds the cpu-ns/op metric.
func (m *Meter) Report(b *testing.B) {
	b.ReportMetric(float64(processCPU(b)-m.start-m.excluded)/float64(b.N), "cpu-ns/op")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
