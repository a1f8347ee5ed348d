package store

import (
	"testing"
	"unsafe"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

// TestSampleHoldsEverySignal: a Sample has a presence bit for every signal
// of the vocabulary, and keeps each one's value at the top of its range.
// (TestSignalsDeclared, which walks the signal table, is in pkg/signal.)
func TestSampleHoldsEverySignal(t *testing.T) {
	var s Sample
	if bits := 8 * unsafe.Sizeof(s.present); uintptr(signal.NumSignals) > bits {
		t.Fatalf("%d signals, but Sample.present has %d bits", signal.NumSignals, bits)
	}
	for sig := signal.Signal(0); sig < signal.NumSignals; sig++ {
		top := sig.Range().Max
		s.Set(sig, top)
		if v, ok := s.Get(sig); !ok || v != top {
			t.Errorf("%s: Get after Set = %v, %v", sig, v, ok)
		}
	}
}
