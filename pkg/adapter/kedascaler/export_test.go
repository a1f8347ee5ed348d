package kedascaler

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Vec exposes the counter to the tests.
func (r *Requests) Vec() *prometheus.CounterVec { return r.vec }

// SetReauthorizeEvery sets how often streams are authorized again, until
// the test ends.
func SetReauthorizeEvery(t interface{ Cleanup(func()) }, d time.Duration) {
	old := reauthorizeEvery
	reauthorizeEvery = d
	t.Cleanup(func() { reauthorizeEvery = old })
}
