package capacity

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/harness/cpumeter"
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

// BenchmarkEstimateHostileInputs is one capacity read whose pods report, in
// range, what a tenant chooses: slots from a running count over a tiny KV
// use, up to and past what a server can hold, and a prefill bucket layout
// per pod. A read must cost at most about a millisecond whatever they say.
// No anchor is kept for slots past exactSlots: the costliest case.
func BenchmarkEstimateHostileInputs(b *testing.B) {
	ready := func(running, kv float64) Pod {
		return Pod{Ready: true, Data: true, Startup: time.Minute, Running: running, Waiting: 1, KVPercent: kv}
	}
	layouts := make([]Pod, 50)
	for p := range layouts {
		h := prefillHist(float64(p + 1))
		h.Bounds = append([]float64{float64(p+1) / 1e4}, h.Bounds...)
		h.Counts = append([]float64{0}, h.Counts...)
		layouts[p] = ready(10, 50)
		layouts[p].UID, layouts[p].Prefill = fmt.Sprint(p), h
	}
	for _, tc := range []struct {
		name string
		pods []Pod
	}{
		{"slots=20", []Pod{ready(10, 50)}},
		{"slots=1e4", []Pod{ready(1000, 10)}},
		{"slots=1e7", []Pod{ready(1000, 1e-2)}},
		{"slots=1e13", []Pod{ready(1000, 1e-8)}},
		{"slots=1e300", []Pod{ready(1<<30, 1e-290)}},
		{"layout-per-pod=50", layouts},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := New(DefaultConfig(), nil)
			now := time.Unix(1000, 0)
			b.ReportAllocs()
			cpu := cpumeter.Start(b)
			for i := range b.N {
				anchored.Store(nil)
				now = now.Add(time.Second)
				if _, err := e.Estimate(Key{Namespace: "ns", Target: fmt.Sprint("deployment/", i%200)}, now, tc.pods); err != nil {
					b.Fatal(err)
				}
			}
			cpu.Report(b)
		})
	}
}
