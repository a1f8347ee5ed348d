package gather

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// TestHistogramsParsedAsRead: with an idle time, an inference server's
// TTFT, ITL and prefill-time histograms are parsed only once a reader of
// its namespace has read them, and no longer after the idle time; its
// gauges always are.
func TestHistogramsParsedAsRead(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	_, port := serve(t, newSimOn(t, clk, 30))
	const idle = time.Minute
	st := store.New(30, store.WithLatencyWindowIdle(idle))
	g, err := New(Config{Pods: podList{annotatedPod("p", port)}, Scraper: scrape.New(scrape.Config{Timeout: time.Second, Clock: clk}),
		Store: st, Interval: time.Second, Registerer: prometheus.NewRegistry(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	key := store.Key{Namespace: "ml", Name: "p"}
	cycle := func() store.Sample {
		t.Helper()
		clk.Step(time.Second)
		g.Cycle(ctx)
		smp, ok := st.Latest(key, signal.SourceInference, clk.Now(), 2*time.Second)
		if !ok {
			t.Fatal("no fresh sample")
		}
		if _, ok := smp.Get(signal.QueueDepth); !ok {
			t.Fatal("no queue depth")
		}
		return smp
	}
	has := func(smp store.Sample) (ttft, itl, prefill bool) {
		return smp.TTFT != nil, smp.ITL != nil, smp.Prefill != nil
	}
	for range 3 {
		if ttft, itl, prefill := has(cycle()); ttft || itl || prefill {
			t.Fatalf("unread: TTFT %v, ITL %v, prefill %v parsed", ttft, itl, prefill)
		}
	}
	st.ReadHistograms("ml", store.HistogramsPrefill|store.HistogramsTTFT, clk.Now())
	if ttft, itl, prefill := has(cycle()); !ttft || itl || !prefill {
		t.Fatalf("TTFT and prefill read: TTFT %v, ITL %v, prefill %v parsed", ttft, itl, prefill)
	}
	// A quantile read of ITL has its family parsed too.
	st.HistIncrease(key, signal.HistITL, clk.Now(), 30*time.Second, 2*time.Second)
	if ttft, itl, prefill := has(cycle()); !ttft || !itl || !prefill {
		t.Fatalf("all read: TTFT %v, ITL %v, prefill %v parsed", ttft, itl, prefill)
	}
	clk.Step(idle)
	if ttft, itl, prefill := has(cycle()); ttft || itl || prefill {
		t.Fatalf("idle: TTFT %v, ITL %v, prefill %v still parsed", ttft, itl, prefill)
	}
}
