package capacity

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkEstimateCallRate measures one estimate of a workload of eight
// prefill-reporting replicas in steady state, when the API is asked for it
// every interval while the replicas are scraped every 5 s: anyone allowed to
// read the metric sets the call rate, and each call must stay cheap however
// often it comes.
func BenchmarkEstimateCallRate(b *testing.B) {
	for _, every := range []time.Duration{15 * time.Second, time.Second, 50 * time.Millisecond} {
		b.Run(fmt.Sprintf("every=%v", every), func(b *testing.B) {
			e := New(DefaultConfig(), nil)
			k := Key{Namespace: "ns", Target: "deployment/llm"}
			now := time.Unix(1000, 0)
			pods := make([]Pod, 8)
			scrape := func(n int) {
				for i := range pods {
					pods[i] = Pod{Ready: true, Data: true, Running: 10, Waiting: 1, KVPercent: 50,
						UID: fmt.Sprint("pod-", i), Prefill: prefillHist(float64(5*n), float64(3*n), float64(n))}
				}
			}
			step := func(i int) {
				now = now.Add(every)
				if i%int(max(1, 5*time.Second/every)) == 0 {
					scrape(i)
				}
				if _, err := e.Estimate(k, now, pods); err != nil {
					b.Fatal(err)
				}
			}
			warm := int(2 * time.Minute / every)
			for i := range warm {
				step(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				step(warm + i)
			}
			var hs int
			for _, st := range e.state {
				hs = len(st.prefill.steps)
			}
			b.ReportMetric(float64(hs), "steps")
		})
	}
}
