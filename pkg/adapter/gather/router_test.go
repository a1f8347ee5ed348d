package gather

import (
	"context"
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/adapter/inference"
	"github.com/gpuscale/gpuscale/pkg/adapter/ingest"
	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// TestRouterTargets: an annotated router pod is scraped like an inference
// pod and stored as a router, its held requests per model; hostile routers
// get their values rejected or their scrape refused, counted by reason,
// never stored; an inference server beside them is unaffected.
func TestRouterTargets(t *testing.T) {
	_, epp := serve(t, text(string(readFile(t, "../inference/testdata/routers/epp.txt"))))
	_, dynamo := serve(t, text(string(readFile(t, "../inference/testdata/routers/dynamo_frontend.txt"))))
	_, nan := serve(t, text("dynamo_frontend_queued_requests{model=\"a\"} NaN\ndynamo_frontend_queued_requests{model=\"b\"} 2\n"))
	_, dup := serve(t, text("dynamo_frontend_queued_requests{model=\"a\"} 1\ndynamo_frontend_queued_requests{model=\"a\"} 1\n"))
	_, server := serve(t, newSim(t, 10))
	pods := &mutablePods{pods: podList{annotatedPod("epp", epp), annotatedPod("dynamo", dynamo), annotatedPod("nan", nan),
		annotatedPod("dup", dup), annotatedPod("server", server)}}
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
	router := func(pod string) (store.RouterSample, bool) {
		return st.LatestRouter(store.Key{Namespace: "ml", Name: pod}, now, time.Minute)
	}
	for pod, want := range map[string]map[string]float64{
		"epp":    {"food-review-1": 5, "meta-llama/Llama-3.1-8B-Instruct": 4, "idle-model": 0},
		"dynamo": {"Qwen/Qwen3-0.6B": 5, "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": 0},
		"nan":    {"b": 2},
	} {
		if got, ok := router(pod); !ok || !maps.Equal(got.Held, want) {
			t.Errorf("%s: %v, %v; want %v", pod, got.Held, ok, want)
		}
		if _, ok := st.Latest(store.Key{Namespace: "ml", Name: pod}, signal.SourceInference, now, time.Minute); ok {
			t.Errorf("%s: a router stored as an inference server", pod)
		}
	}
	if _, ok := router("dup"); ok {
		t.Error("dup: a refused scrape was stored")
	}
	if _, ok := router("server"); ok {
		t.Error("an inference server stored as a router")
	}
	if _, ok := st.Latest(store.Key{Namespace: "ml", Name: "server"}, signal.SourceInference, now, time.Minute); !ok {
		t.Error("the inference server beside the routers has no sample")
	}
	for _, c := range []struct{ metric, pod, reason string }{
		{"gpuscale_adapter_rejected_values_total", "nan", "not_finite"},
		{"gpuscale_adapter_scrape_errors_total", "dup", "duplicate_series"},
	} {
		if n := targetCount(t, g, c.metric, c.pod, c.reason); n != cycles {
			t.Errorf("%s{pod=%s,reason=%s} = %v, want %d", c.metric, c.pod, c.reason, n, cycles)
		}
	}
	// The Dynamo frontend and the one with a NaN are both stored.
	for d, want := range map[inference.Dialect]float64{inference.EPP: cycles, inference.DynamoFrontend: 2 * cycles} {
		if n := testutil.ToFloat64(g.m.dialects.WithLabelValues(string(d))); n != want {
			t.Errorf("%s scrapes = %v, want %v", d, n, want)
		}
	}
}

// The scraper parses only the families ingest reads: a router's exposition
// cut down to them reads as the whole one does.
func TestReadFamiliesKeepWhatRouterIngestReads(t *testing.T) {
	s := scrape.New(scrape.Config{})
	for _, name := range []string{"epp.txt", "epp_idle.txt", "dynamo_frontend.txt"} {
		t.Run(name, func(t *testing.T) {
			all, read := scrapeBoth(t, s, readFile(t, "../inference/testdata/routers/"+name), discovery.KindInference)
			if !inference.IsRouter(read) {
				t.Fatal("not a router once filtered")
			}
			wantS, wantD, wantRej, wantErr := ingest.Router(all)
			gotS, gotD, gotRej, gotErr := ingest.Router(read)
			if (gotErr == nil) != (wantErr == nil) || gotD != wantD || !reflect.DeepEqual(gotS, wantS) || !reflect.DeepEqual(gotRej, wantRej) {
				t.Errorf("got %s %+v %v %v, want %s %+v %v %v", gotD, gotS, gotRej, gotErr, wantD, wantS, wantRej, wantErr)
			}
		})
	}
}
