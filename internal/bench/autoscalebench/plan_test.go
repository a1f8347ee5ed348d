package autoscalebench

import (
	"slices"
	"testing"
	"time"
)

// TestEnvOptionsHoldTheSLO: the adapter the bench starts holds the capacity
// signal to the SLO the run is judged on, as the offline replay does, and
// times its windows and scrapes in wall time.
func TestEnvOptionsHoldTheSLO(t *testing.T) {
	for _, tc := range []struct {
		slo     time.Duration
		speedup float64
		want    []string
	}{
		{time.Second, 6, []string{"--capacity-ttft-objective=1s", "--capacity-time-scale=6", "--ttft-window=10s"}},
		{2 * time.Second, 6, []string{"--capacity-ttft-objective=2s", "--scrape-interval=833.333333ms"}},
		{10 * time.Second, 1, []string{"--capacity-ttft-objective=10s", "--ttft-window=1m0s"}},
	} {
		p := &Plan{Config: Config{SLO: tc.slo, Speedup: tc.speedup}}
		args := p.EnvOptions(t.TempDir(), nil, nil).AdapterArgs
		for _, w := range tc.want {
			if !slices.Contains(args, w) {
				t.Errorf("SLO %v at %gx: adapter args %q lack %q", tc.slo, tc.speedup, args, w)
			}
		}
	}
}
