package autoscalebench

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// steady is rate requests/s of the default request for d.
func steady(rate float64, d time.Duration) []trace.Request {
	var out []trace.Request
	step := time.Duration(float64(time.Second) / rate)
	for at := time.Duration(0); at < d; at += step {
		out = append(out, trace.Request{At: at, ContextTokens: 1000, GeneratedTokens: 130})
	}
	return out
}

func TestStaticNeed(t *testing.T) {
	p := inferencesim.L4Profile()
	for _, tc := range []struct {
		rate     float64
		min, max int
	}{
		// One L4 replica keeps up with about 2 requests/s of this size
		// (TestL4ProfileCapacity); need grows with the rate.
		{rate: 1, min: 1, max: 1},
		{rate: 5, min: 3, max: 4},
		{rate: 10, min: 5, max: 7},
	} {
		n, met, minutes, err := StaticNeed(steady(tc.rate, 5*time.Minute), p, time.Second, 20)
		if err != nil {
			t.Fatal(err)
		}
		if met != 5 || minutes != 5 {
			t.Errorf("%v req/s: %d replicas meet the SLO in %d of %d minutes, want 5 of 5", tc.rate, n, met, minutes)
		}
		if n < tc.min || n > tc.max {
			t.Errorf("%v req/s: need %d replicas, want %d-%d", tc.rate, n, tc.min, tc.max)
		}
		// The answer is the fewest: one replica fewer misses the SLO.
		if n > 1 {
			out, err := simulate(steady(tc.rate, 5*time.Minute), p, n-1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if met, _ := minutesMet(steady(tc.rate, 5*time.Minute), out, time.Second); met == 5 {
				t.Errorf("%v req/s: %d replicas already meet the SLO in every minute", tc.rate, n-1)
			}
		}
	}
	// Minutes that no number of replicas can save do not inflate the need:
	// a long prompt in every tenth request of minute 2 and minute 4 (eight
	// seconds of prefill each) keeps their p90 over the SLO.
	reqs := steady(1, 5*time.Minute)
	for i := range reqs {
		if m := reqs[i].At / time.Minute; (m == 1 || m == 3) && i%5 == 0 {
			reqs[i].ContextTokens = 30000
			reqs[i].GeneratedTokens = 10
		}
	}
	n, met, minutes, err := StaticNeed(reqs, p, time.Second, 20)
	if err != nil || met != 3 || minutes != 5 || n > 5 {
		t.Errorf("StaticNeed = %d replicas meeting %d of %d minutes, err %v; want a few replicas meeting 3 of 5", n, met, minutes, err)
	}
	// A slice whose every minute is hopeless has no static answer.
	long := []trace.Request{{At: 0, ContextTokens: 30000, GeneratedTokens: 10}}
	if _, _, _, err := StaticNeed(long, p, time.Second, 4); err == nil || !strings.Contains(err.Error(), "in no trace minute") {
		t.Errorf("err = %v, want one saying the SLO cannot be met", err)
	}
}

// TestStaticNeedRejectsOversized: a request larger than a replica's KV
// cache is refused, not fatal, and counts in no minute: every third request
// below is too large, and the rest size as they would alone.
func TestStaticNeedRejectsOversized(t *testing.T) {
	p := inferencesim.L4Profile()
	reqs := steady(5, 5*time.Minute)
	for i := range reqs {
		if i%3 == 0 {
			reqs[i].ContextTokens = p.KVCacheTokens
		}
	}
	n, met, minutes, err := StaticNeed(reqs, p, time.Second, 20)
	if err != nil {
		t.Fatalf("StaticNeed with oversized requests: %v", err)
	}
	if met != minutes || minutes != 5 || n < 1 || n > 4 {
		t.Errorf("%d replicas meet %d of %d minutes; want every minute met by the few the rest need", n, met, minutes)
	}
}
