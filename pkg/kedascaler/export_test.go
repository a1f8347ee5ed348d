package kedascaler

import "github.com/prometheus/client_golang/prometheus"

// Vec exposes the counter to the tests.
func (r *Requests) Vec() *prometheus.CounterVec { return r.vec }
