package autoscalebench

import (
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
)

// TestPlanEndsWithTheTrace: a slice asked past the trace's last request
// ends with it (the code-completion trace's 24 minutes asked as 30 billed
// six idle minutes and put the bench 7 points of static's GPU-hours below
// the replay); a slice within the trace keeps its length.
func TestPlanEndsWithTheTrace(t *testing.T) {
	var reqs []trace.Request
	for i := range 240 { // one request every 0.5 s for 2 minutes
		reqs = append(reqs, trace.Request{At: time.Duration(i) * 500 * time.Millisecond, ContextTokens: 500, GeneratedTokens: 50})
	}
	tr := &trace.Trace{Requests: reqs}
	for _, c := range []struct {
		name            string
		start, duration time.Duration
		want            time.Duration
	}{
		{"past the end", 0, 10 * time.Minute, tr.Duration() + time.Nanosecond},
		{"from an offset past the end", time.Minute, 10 * time.Minute, tr.Duration() - time.Minute + time.Nanosecond},
		{"within the trace", 0, time.Minute, time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig("t.csv", tr)
			cfg.Start, cfg.Duration, cfg.SLO = c.start, c.duration, 2*time.Second
			cfg.Policies = []string{PolicyStatic}
			p, err := NewPlan(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if p.Duration != c.want {
				t.Errorf("duration %v, want %v", p.Duration, c.want)
			}
		})
	}
}
