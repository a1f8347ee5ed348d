package gather

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// text serves body as the classic text format.
func text(body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(body))
	})
}

// TestHostileTargets: targets serving out-of-range values, duplicate
// series or a malformed histogram get their values rejected and counted
// by reason, never stored, and cost the good target beside them nothing.
func TestHostileTargets(t *testing.T) {
	_, good := serve(t, newSim(t, 10))
	_, huge := serve(t, text("vllm:num_requests_waiting{model_name=\"m\"} 1e16\nvllm:num_requests_running{model_name=\"m\"} 3\n"))
	_, dup := serve(t, text("vllm:num_requests_waiting{model_name=\"m\"} 4\nvllm:num_requests_waiting{model_name=\"m\"} 4\n"))
	_, negLE := serve(t, text(`# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="m",le="-1"} 5
vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 5
vllm:time_to_first_token_seconds_count{model_name="m"} 5
vllm:num_requests_waiting{model_name="m"} 4
`))
	pods := &mutablePods{pods: podList{annotatedPod("good", good), annotatedPod("huge", huge), annotatedPod("dup", dup), annotatedPod("neg-le", negLE)}}
	st := store.New(30)
	g, err := New(Config{Pods: pods, Scraper: scrape.New(scrape.Config{Timeout: 2 * time.Second}), Store: st,
		Interval: time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	const cycles = 2
	for range cycles {
		g.Cycle(context.Background())
	}
	now := time.Now()
	latest := func(pod string) (store.Sample, bool) {
		return st.Latest(store.Key{Namespace: "ml", Name: pod}, signal.SourceInference, now, time.Minute)
	}
	if smp, ok := latest("good"); !ok {
		t.Error("the good target has no sample")
	} else if _, ok := smp.Get(signal.QueueDepth); !ok {
		t.Error("the good target has no queue depth")
	}
	smp, ok := latest("huge")
	if !ok {
		t.Fatal("the rest of the scrape with an out-of-range queue was not stored")
	}
	if v, ok := smp.Get(signal.QueueDepth); ok {
		t.Errorf("queue depth %g stored", v)
	}
	if v, ok := smp.Get(signal.RequestsRunning); !ok || v != 3 {
		t.Errorf("running = %g, %v; want the valid value kept", v, ok)
	}
	for _, pod := range []string{"dup", "neg-le"} {
		if smp, ok := latest(pod); ok {
			t.Errorf("%s: a rejected scrape was stored: %+v", pod, smp)
		}
	}
	for _, c := range []struct{ metric, pod, reason string }{
		{"gpuscale_adapter_rejected_values_total", "huge", "out_of_range"},
		{"gpuscale_adapter_scrape_errors_total", "dup", "duplicate_series"},
		{"gpuscale_adapter_scrape_errors_total", "neg-le", "invalid_histogram"},
	} {
		if n := targetCount(t, g, c.metric, c.pod, c.reason); n != cycles {
			t.Errorf("%s{pod=%s,reason=%s} = %v, want %d", c.metric, c.pod, c.reason, n, cycles)
		}
	}
	if n := testutil.CollectAndCount(targetCollector{g}, "gpuscale_adapter_rejected_values_total"); n != 1 {
		t.Errorf("%d rejected-values series, want only the huge target's", n)
	}
	pods.pods = nil
	g.Cycle(context.Background())
	if n := testutil.CollectAndCount(targetCollector{g}); n != 0 {
		t.Errorf("vanished targets still have %d series", n)
	}
}

// targetCount reads one per-target counter of one pod of ml and reason as
// a scrape of the adapter would.
func targetCount(t *testing.T, g *Gatherer, metric, pod, reason string) float64 {
	t.Helper()
	return counterOf(t, targetCollector{g}, metric, "ml", pod, reason)
}
