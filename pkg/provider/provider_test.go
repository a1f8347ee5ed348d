package provider_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/internal/harness/cpumeter"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/adapter/storesource"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fixture holds real client-go indexers (what informers fill) and a store.
// Pods are added through it, which tells the provider as an informer would.
type fixture struct {
	pods, nodes, deploys, sets cache.Indexer
	events                     podEvents
	store                      *store.Store
	obs                        *recorder
	p                          *provider.Provider
	now                        time.Time
	rv                         int // the last pod resourceVersion
}

// podEvents delivers the fixture's pod changes the way an informer does:
// after the indexer holds them.
type podEvents struct{ handlers []cache.ResourceEventHandler }

func (e *podEvents) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	e.handlers = append(e.handlers, h)
	return nil, nil
}

type recorder struct {
	mu    sync.Mutex
	calls map[string]int
}

func (r *recorder) Observe(api, metric, resource, result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[api+"/"+metric+"/"+resource+"/"+result]++
}

func newFixture() *fixture {
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	f := &fixture{pods: idx(), nodes: idx(), deploys: idx(), sets: idx(), store: store.New(30),
		obs: &recorder{calls: map[string]int{}}, now: t0}
	f.p = provider.New(provider.Config{
		Values: storesource.New(f.store, 15*time.Second, time.Minute, func() time.Time { return f.now }),
		Pods:   corelisters.NewPodLister(f.pods), Nodes: corelisters.NewNodeLister(f.nodes),
		Deployments: appslisters.NewDeploymentLister(f.deploys), StatefulSets: appslisters.NewStatefulSetLister(f.sets),
		MaxStaleness: 15 * time.Second, TTFTWindow: time.Minute, Observer: f.obs,
		Now: func() time.Time { return f.now },
	})
	if err := f.p.TrackPods(&f.events); err != nil {
		panic(err)
	}
	return f
}

// addPod adds a pod, or replaces the one of that name.
func (f *fixture) addPod(ns, name string, ready bool, lbl map[string]string) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.1.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
	f.rv++
	pod.ResourceVersion = fmt.Sprint(f.rv)
	old, exists, _ := f.pods.Get(pod)
	_ = f.pods.Add(pod)
	for _, h := range f.events.handlers {
		if exists {
			h.OnUpdate(old, pod)
		} else {
			h.OnAdd(pod, false)
		}
	}
}

func (f *fixture) deletePod(ns, name string) {
	old, exists, _ := f.pods.GetByKey(ns + "/" + name)
	if !exists {
		return
	}
	_ = f.pods.Delete(old)
	for _, h := range f.events.handlers {
		h.OnDelete(cache.DeletedFinalStateUnknown{Key: ns + "/" + name, Obj: old})
	}
}

func (f *fixture) put(ns, name string, src signal.Source, at time.Time, model string, vals map[signal.Signal]float64, ttft *histogram.Histogram) {
	s := store.Sample{Time: at, Model: model, TTFT: ttft}
	for k, v := range vals {
		s.Set(k, v)
	}
	f.store.PutPod(store.Key{Namespace: ns, Name: name}, src, s)
}

var bounds = []float64{0.1, 0.25, 0.5, 1, 2.5, math.Inf(1)}

// hist is a cumulative TTFT histogram from per-bucket (non-cumulative) counts.
func hist(per ...float64) *histogram.Histogram {
	h := &histogram.Histogram{Bounds: bounds, Counts: make([]float64, len(bounds))}
	var c float64
	for i := range bounds {
		if i < len(per) {
			c += per[i]
		}
		h.Counts[i] = c
	}
	h.Count = c
	return h
}

func podsInfo(metric string) cmprovider.CustomMetricInfo {
	return cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: metric}
}

func milli(t *testing.T, got interface{ MilliValue() int64 }) float64 {
	t.Helper()
	return float64(got.MilliValue()) / 1000
}

func TestPodsBySelector(t *testing.T) {
	f := newFixture()
	app := map[string]string{"app": "llm"}
	f.addPod("ml", "ready-fresh", true, app)
	f.addPod("ml", "not-ready", false, app)
	f.addPod("ml", "ready-stale", true, app)
	f.addPod("ml", "other-app", true, map[string]string{"app": "x"})
	f.put("ml", "ready-fresh", signal.SourceInference, t0.Add(-2*time.Second), "m", map[signal.Signal]float64{signal.QueueDepth: 7}, nil)
	f.put("ml", "not-ready", signal.SourceInference, t0.Add(-2*time.Second), "m", map[signal.Signal]float64{signal.QueueDepth: 0}, nil)
	f.put("ml", "ready-stale", signal.SourceInference, t0.Add(-16*time.Second), "m", map[signal.Signal]float64{signal.QueueDepth: 3}, nil)
	f.put("ml", "other-app", signal.SourceInference, t0.Add(-2*time.Second), "m", map[signal.Signal]float64{signal.QueueDepth: 9}, nil)

	list, err := f.p.GetMetricBySelector(context.Background(), "ml", labels.SelectorFromSet(app), podsInfo(provider.QueueDepth), labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("items = %d, want 1 (only the ready, fresh pod): %+v", len(list.Items), list.Items)
	}
	it := list.Items[0]
	if it.DescribedObject.Name != "ready-fresh" || it.DescribedObject.APIVersion != "v1" || it.DescribedObject.Kind != "Pod" {
		t.Errorf("described object = %+v", it.DescribedObject)
	}
	if v := milli(t, &it.Value); v != 7 {
		t.Errorf("value = %v, want 7", v)
	}
	if !it.Timestamp.Time.Equal(t0.Add(-2 * time.Second)) {
		t.Errorf("timestamp = %v, want the sample's time", it.Timestamp)
	}

	// Nothing fresh: an explicit NotFound, never an empty list.
	f.now = t0.Add(time.Minute)
	_, err = f.p.GetMetricBySelector(context.Background(), "ml", labels.SelectorFromSet(app), podsInfo(provider.QueueDepth), labels.Everything())
	if !apierrors.IsNotFound(err) {
		t.Fatalf("all stale: err = %v, want NotFound", err)
	}
	if f.obs.calls["custom/"+provider.QueueDepth+"/pods/not_found"] != 1 || f.obs.calls["custom/"+provider.QueueDepth+"/pods/ok"] != 1 {
		t.Errorf("observer calls = %v", f.obs.calls)
	}
}

func TestMetricByNameErrors(t *testing.T) {
	f := newFixture()
	f.addPod("ml", "p", true, nil)
	f.put("ml", "p", signal.SourceGPU, t0, "", map[signal.Signal]float64{signal.GPUUtilization: 80}, nil)
	cases := []struct {
		name     string
		info     cmprovider.CustomMetricInfo
		obj      types.NamespacedName
		wantErr  bool
		wantMill int64
	}{
		{"pod gpu", podsInfo(provider.GPUUtilization), types.NamespacedName{Namespace: "ml", Name: "p"}, false, 80000},
		{"pod missing signal", podsInfo(provider.QueueDepth), types.NamespacedName{Namespace: "ml", Name: "p"}, true, 0},
		{"unknown metric", podsInfo("no_such_metric"), types.NamespacedName{Namespace: "ml", Name: "p"}, true, 0},
		{"unknown pod", podsInfo(provider.GPUUtilization), types.NamespacedName{Namespace: "ml", Name: "nope"}, true, 0},
		{"unknown resource", cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "services"}, Metric: provider.GPUUtilization},
			types.NamespacedName{Namespace: "ml", Name: "p"}, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mv, err := f.p.GetMetricByName(context.Background(), tc.obj, tc.info, labels.Everything())
			if tc.wantErr {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("err = %v, want NotFound", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if mv.Value.MilliValue() != tc.wantMill {
				t.Errorf("value = %v, want %dm", mv.Value.String(), tc.wantMill)
			}
		})
	}
}

// TestWorkloadAggregation checks the Object-metric rules: sums for queue
// depth, means for utilization, and TTFT from merged histograms, which
// differs from the mean of the pods' quantiles.
func TestWorkloadAggregation(t *testing.T) {
	f := newFixture()
	sel := map[string]string{"app": "llm"}
	_ = f.deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}})
	f.addPod("ml", "a", true, sel)
	f.addPod("ml", "b", true, sel)
	f.addPod("ml", "c", false, sel) // not ready: ignored
	// Pod a: 90 fast requests in the window; pod b: 10 slow ones.
	for i, at := range []time.Time{t0.Add(-50 * time.Second), t0.Add(-5 * time.Second)} {
		k := float64(i)
		f.put("ml", "a", signal.SourceInference, at, "m", map[signal.Signal]float64{signal.QueueDepth: 2, signal.KVCacheUtilization: 40}, hist(90*k))
		f.put("ml", "b", signal.SourceInference, at, "m", map[signal.Signal]float64{signal.QueueDepth: 5, signal.KVCacheUtilization: 60}, hist(0, 0, 0, 0, 10*k))
		f.put("ml", "c", signal.SourceInference, at, "m", map[signal.Signal]float64{signal.QueueDepth: 100}, hist(0, 0, 0, 0, 0, 50*k))
	}
	info := func(m string) cmprovider.CustomMetricInfo {
		return cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: m}
	}
	get := func(m string) float64 {
		t.Helper()
		mv, err := f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: "llm"}, info(m), labels.Everything())
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		if mv.DescribedObject.APIVersion != "apps/v1" || mv.DescribedObject.Kind != "Deployment" {
			t.Errorf("described object = %+v", mv.DescribedObject)
		}
		return milli(t, &mv.Value)
	}
	if got := get(provider.QueueDepth); got != 7 {
		t.Errorf("queue depth = %v, want sum 7", got)
	}
	if got := get(provider.KVCacheUtilization); got != 50 {
		t.Errorf("kv cache = %v, want mean 50", got)
	}
	// Merged: 100 requests, 90 in (0,0.1], 10 in (1,2.5]. p90 rank 90 ->
	// 0.1 exactly; the pods' own p90s are 0.09 and 2.35, mean 1.22.
	merged := histogram.Quantile(0.9, hist(90, 0, 0, 0, 10))
	if got := get(provider.TTFTP90); math.Abs(got-merged) > 0.001 {
		t.Errorf("ttft p90 = %v, want the merged histogram's %v", got, merged)
	}
	meanOfQuantiles := (histogram.Quantile(0.9, hist(90)) + histogram.Quantile(0.9, hist(0, 0, 0, 0, 10))) / 2
	if math.Abs(merged-meanOfQuantiles) < 0.5 {
		t.Fatalf("test is too weak: merged %v vs mean of quantiles %v", merged, meanOfQuantiles)
	}
}

func TestNodesAndExternal(t *testing.T) {
	f := newFixture()
	_ = f.nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: map[string]string{"gpu": "yes"}}})
	var n store.Sample
	n.Time = t0
	n.Set(signal.GPUUtilization, 55)
	f.store.PutNode("gpu-1", n)

	list, err := f.p.GetMetricBySelector(context.Background(), "", labels.SelectorFromSet(map[string]string{"gpu": "yes"}),
		cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "nodes"}, Metric: provider.GPUUtilization}, labels.Everything())
	if err != nil || len(list.Items) != 1 || milli(t, &list.Items[0].Value) != 55 || list.Items[0].DescribedObject.Kind != "Node" {
		t.Fatalf("nodes: %+v, %v", list, err)
	}

	for _, p := range []struct {
		name, model string
		q           float64
	}{{"a", "llama", 3}, {"b", "llama", 4}, {"c", "mistral", 10}, {"d", "meta-llama/Llama-3.1-8B-Instruct", 5}} {
		f.addPod("ml", p.name, true, nil)
		f.put("ml", p.name, signal.SourceInference, t0, p.model, map[signal.Signal]float64{signal.QueueDepth: p.q}, nil)
	}
	sel, _ := labels.Parse("model_name=llama")
	ext, err := f.p.GetExternalMetric(context.Background(), "ml", sel, cmprovider.ExternalMetricInfo{Metric: provider.QueueDepth})
	if err != nil {
		t.Fatal(err)
	}
	if len(ext.Items) != 1 || ext.Items[0].MetricLabels[provider.ModelLabel] != "llama" || milli(t, &ext.Items[0].Value) != 7 {
		t.Fatalf("external = %+v", ext.Items)
	}
	all, err := f.p.GetExternalMetric(context.Background(), "ml", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: provider.QueueDepth})
	if err != nil || len(all.Items) != 3 {
		t.Fatalf("all models = %+v, %v", all, err)
	}
	// A Hugging Face name cannot be a selector's value: it is selected
	// by its label value (provider.ModelLabelValue).
	if _, err := labels.Parse("model_name=meta-llama/Llama-3.1-8B-Instruct"); err == nil {
		t.Fatal("a selector took a value with '/': the label value is not needed")
	}
	hf, _ := labels.Parse("model_name=meta-llama_Llama-3.1-8B-Instruct")
	ext, err = f.p.GetExternalMetric(context.Background(), "ml", hf, cmprovider.ExternalMetricInfo{Metric: provider.QueueDepth})
	if err != nil || len(ext.Items) != 1 || ext.Items[0].MetricLabels[provider.ModelLabel] != "meta-llama_Llama-3.1-8B-Instruct" || milli(t, &ext.Items[0].Value) != 5 {
		t.Fatalf("a model by its label value: %+v, %v", ext, err)
	}
	none, _ := labels.Parse("model_name=gpt")
	if _, err := f.p.GetExternalMetric(context.Background(), "ml", none, cmprovider.ExternalMetricInfo{Metric: provider.QueueDepth}); !apierrors.IsNotFound(err) {
		t.Fatalf("unknown model: err = %v, want NotFound", err)
	}
	if _, err := f.p.GetExternalMetric(context.Background(), "ml", sel, cmprovider.ExternalMetricInfo{Metric: provider.GPUUtilization}); !apierrors.IsNotFound(err) {
		t.Fatalf("unsupported external metric: err = %v, want NotFound", err)
	}
}

func TestListAllMetrics(t *testing.T) {
	f := newFixture()
	got := map[string]bool{}
	for _, m := range f.p.ListAllMetrics() {
		got[m.String()] = true
	}
	for _, want := range []string{"pods/gpu_utilization(namespaced)", "nodes/gpu_utilization", "nodes/gpu_memory_utilization",
		"deployments.apps/inference_ttft_seconds_p90(namespaced)", "statefulsets.apps/inference_queue_depth(namespaced)",
		"namespaces/inference_requests_running"} {
		if !got[want] {
			t.Errorf("ListAllMetrics lacks %s", want)
		}
	}
	if got["nodes/inference_queue_depth"] {
		t.Error("nodes do not serve inference metrics")
	}
	if n := len(f.p.ListAllExternalMetrics()); n != 3 {
		t.Errorf("external metrics = %d, want 3", n)
	}
}

// BenchmarkPodsBySelector10k is the HPA's call for a Pods metric over a
// namespace of 10,000 pods, each with a minute of samples at 5 s:
//   - unchanged: the same pods and samples as the call before;
//   - pod-changed: one pod's readiness flips before each call, so the
//     list of Ready pods is built afresh;
//   - pod-updated: one pod is updated before each call and stays Ready
//     (a status heartbeat), so the list is built again with the same pods
//     and keeps what was memoised on it;
//   - rescraped: every pod has a new sample since the call before, as in
//     an adapter that scrapes every 5 s (each pod's TTFT window increase
//     is computed again). The scrape itself is not timed.
//
// The servers have been up for an hour before the first sample, as a
// fleet's servers usually have: their counters are far above a window's
// increase.
func BenchmarkPodsBySelector10k(b *testing.B) {
	for _, metric := range []string{provider.QueueDepth, provider.TTFTP90} {
		for _, change := range []string{"unchanged", "pod-changed", "pod-updated", "rescraped"} {
			b.Run(metric+"/"+change, func(b *testing.B) { benchPodsBySelector(b, metric, change, nil) })
		}
	}
	// vLLM's TTFT layout has 23 buckets: four times the histogram memory
	// each pod's quantile reads.
	b.Run(provider.TTFTP90+"/vllm-buckets/rescraped", func(b *testing.B) { benchPodsBySelector(b, provider.TTFTP90, "rescraped", vllmBounds) })
}

// vllmBounds is vLLM's TTFT bucket layout.
var vllmBounds = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
	2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0, math.Inf(1)}

// benchPodsBySelector lists 10,000 pods' metric; their TTFT histograms
// have the test's 6 buckets, or layout's when it is set.
func benchPodsBySelector(b *testing.B, metric, change string, layout []float64) {
	f := newFixture()
	sel := map[string]string{"app": "llm"}
	names := make([]string, 10000)
	const upFor = 720 // scrapes before the first sample: an hour at 5 s
	scrape := func(i, s int) {
		h := hist(float64((upFor+s)*10), float64(upFor+s))
		if layout != nil {
			h = &histogram.Histogram{Bounds: slices.Clone(layout), Counts: make([]float64, len(layout))}
			for k := range h.Counts {
				h.Counts[k] = float64((upFor + s) * 10 * (k + 1) / len(layout))
			}
			h.Count = h.Counts[len(layout)-1]
		}
		f.put("ml", names[i], signal.SourceInference, t0.Add(time.Duration(s-11)*5*time.Second), "m",
			map[signal.Signal]float64{signal.QueueDepth: float64(i % 9), signal.RequestsRunning: 3}, h)
	}
	for i := range names {
		names[i] = fmt.Sprintf("llm-%05d", i)
		f.addPod("ml", names[i], true, sel)
		for s := 0; s < 12; s++ {
			scrape(i, s)
		}
	}
	selector := labels.SelectorFromSet(sel)
	b.ReportAllocs()
	cpu := cpumeter.Start(b)
	for n := 0; n < b.N; n++ {
		want := 10000
		switch change {
		case "pod-changed":
			// One pod flips readiness: 10,000 and 9,999 Ready pods in turn.
			f.addPod("ml", names[0], n%2 == 0, sel)
			want -= n % 2
		case "pod-updated":
			f.addPod("ml", names[0], true, sel)
		case "rescraped":
			cpu.Pause(b)
			for i := range names {
				scrape(i, 12+n)
			}
			f.now = t0.Add(time.Duration(n+1) * 5 * time.Second)
			cpu.Resume(b)
		}
		list, err := f.p.GetMetricBySelector(context.Background(), "ml", selector, podsInfo(metric), labels.Everything())
		if err != nil || len(list.Items) != want {
			b.Fatalf("items %d, want %d, err %v", len(list.Items), want, err)
		}
	}
	cpu.Report(b)
}

type failingValues struct{ provider.Values }

func (failingValues) Pods(context.Context, *provider.PodSet, provider.Metric, labels.Selector) ([]provider.Value, error) {
	return nil, fmt.Errorf("query prometheus at http://127.0.0.1:9090: connection refused")
}

// TestSourceErrorIsAnInternalError: a source that cannot answer gives a
// clear InternalError naming the cause, never NotFound.
func TestSourceErrorIsAnInternalError(t *testing.T) {
	f := newFixture()
	f.addPod("ml", "p", true, nil)
	f.p.SetValues(failingValues{})
	_, err := f.p.GetMetricBySelector(context.Background(), "ml", labels.Everything(), podsInfo(provider.QueueDepth), labels.Everything())
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "query prometheus at http://127.0.0.1:9090") {
		t.Fatalf("err = %v, want an InternalError naming prometheus", err)
	}
	if f.obs.calls["custom/"+provider.QueueDepth+"/pods/error"] != 1 {
		t.Errorf("observer calls = %v", f.obs.calls)
	}
}

// TestPodsListItems: every item of a Pods list is what the by-name call
// answers for that pod (object reference, metric, time, value, window),
// pods whose model the metric selector rejects are left out, and the items
// cover exactly the pods with a fresh value.
func TestPodsListItems(t *testing.T) {
	app := map[string]string{"app": "llm"}
	llama, _ := labels.Parse(provider.ModelLabel + "=llama")
	for _, tc := range []struct {
		metric string
		sel    labels.Selector
		want   []string
	}{
		{provider.QueueDepth, labels.Everything(), []string{"a", "b", "c"}},
		{provider.QueueDepth, llama, []string{"a", "c"}},
		{provider.GPUUtilization, nil, []string{"a"}},
		{provider.TTFTP90, labels.Everything(), []string{"a", "b", "c"}},
		{provider.TTFTP50, llama, []string{"a", "c"}},
	} {
		t.Run(tc.metric+"/"+fmt.Sprint(tc.sel), func(t *testing.T) {
			f := newFixture()
			for i, pod := range []struct{ name, model string }{{"a", "llama"}, {"b", "mistral"}, {"c", "llama"}, {"stale", "llama"}} {
				f.addPod("ml", pod.name, true, app)
				last := t0.Add(-time.Duration(i+1) * time.Second)
				if pod.name == "stale" {
					last = t0.Add(-time.Minute)
				}
				for s, at := range []time.Time{last.Add(-30 * time.Second), last} {
					f.put("ml", pod.name, signal.SourceInference, at, pod.model,
						map[signal.Signal]float64{signal.QueueDepth: float64(i) + 0.25}, hist(float64(10*s*(i+1)), float64(s)))
				}
			}
			f.put("ml", "a", signal.SourceGPU, t0, "", map[signal.Signal]float64{signal.GPUUtilization: 61.5}, nil)

			list, err := f.p.GetMetricBySelector(context.Background(), "ml", labels.SelectorFromSet(app), podsInfo(tc.metric), tc.sel)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range list.Items {
				got = append(got, it.DescribedObject.Name)
				one, err := f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: it.DescribedObject.Name}, podsInfo(tc.metric), tc.sel)
				if err != nil {
					t.Fatalf("%s by name: %v", it.DescribedObject.Name, err)
				}
				// A list works out each distinct value's text once
				// and shares it; a single read leaves it to the
				// encoder. The quantities are to be equal either way.
				_, _ = it.Value.String(), one.Value.String()
				if !reflect.DeepEqual(it, *one) {
					t.Errorf("list item\n%+v\nby name\n%+v", it, *one)
				}
				if isTTFT := strings.Contains(tc.metric, "ttft"); isTTFT != (it.WindowSeconds != nil) || isTTFT && *it.WindowSeconds != 60 {
					t.Errorf("%s window = %v", it.DescribedObject.Name, it.WindowSeconds)
				}
			}
			sort.Strings(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("items for %v, want %v", got, tc.want)
			}
		})
	}
}

// misalignedValues answers one value too few: a broken source is an
// error, never a list that names the wrong pods.
type misalignedValues struct{ provider.Values }

func (misalignedValues) Pods(_ context.Context, pods *provider.PodSet, _ provider.Metric, _ labels.Selector) ([]provider.Value, error) {
	out := make([]provider.Value, len(pods.Pods)-1)
	for i := range out {
		out[i] = provider.Value{V: 1, Time: t0}
	}
	return out, nil
}

func TestMisalignedSourceIsAnError(t *testing.T) {
	f := newFixture()
	f.addPod("ml", "a", true, nil)
	f.addPod("ml", "b", true, nil)
	f.p.SetValues(misalignedValues{})
	if _, err := f.p.GetMetricBySelector(context.Background(), "ml", labels.Everything(), podsInfo(provider.QueueDepth), labels.Everything()); !apierrors.IsInternalError(err) {
		t.Errorf("list: err = %v, want an InternalError", err)
	}
	if _, err := f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: "a"}, podsInfo(provider.QueueDepth), labels.Everything()); !apierrors.IsInternalError(err) {
		t.Errorf("by name: err = %v, want an InternalError", err)
	}
}

// TestPodsAllNamespaces: a Pods list without a namespace names each pod in
// its own namespace.
func TestPodsAllNamespaces(t *testing.T) {
	f := newFixture()
	app := map[string]string{"app": "llm"}
	for _, ns := range []string{"a", "b"} {
		f.addPod(ns, "p", true, app)
		f.put(ns, "p", signal.SourceInference, t0, "m", map[signal.Signal]float64{signal.QueueDepth: float64(len(ns) + int(ns[0]))}, nil)
	}
	list, err := f.p.GetMetricBySelector(context.Background(), "", labels.SelectorFromSet(app), podsInfo(provider.QueueDepth), labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, it := range list.Items {
		got[it.DescribedObject.Namespace+"/"+it.DescribedObject.Name] = milli(t, &it.Value)
	}
	want := map[string]float64{"a/p": 1 + 'a', "b/p": 1 + 'b'}
	if !maps.Equal(got, want) {
		t.Errorf("items %v, want %v", got, want)
	}
}

// TestTTFTListInParallel: a TTFT list long enough to be split among
// goroutines answers exactly as one goroutine does, model selector,
// missing histograms and stale pods included.
func TestTTFTListInParallel(t *testing.T) {
	f := newFixture()
	sel := map[string]string{"app": "llm"}
	// storesource splits a list among goroutines from 2048 pods on.
	const pods = 3*2048 + 17
	for i := range pods {
		name := fmt.Sprintf("llm-%05d", i)
		f.addPod("ml", name, true, sel)
		model := []string{"a", "b"}[i%2]
		for s := range 12 {
			at := t0.Add(time.Duration(s-11) * 5 * time.Second)
			if i%7 == 0 {
				at = at.Add(-time.Hour) // stale
			}
			var h *histogram.Histogram
			if i%5 != 0 {
				h = hist(float64(s*(i%13)), float64(s*(1+i%3)))
			}
			f.put("ml", name, signal.SourceInference, at, model, map[signal.Signal]float64{signal.QueueDepth: 1}, h)
		}
	}
	list := func(procs int, metricSel labels.Selector) []custom_metrics.MetricValue {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		l, err := f.p.GetMetricBySelector(context.Background(), "ml", labels.SelectorFromSet(sel), podsInfo(provider.TTFTP90), metricSel)
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	for _, metricSel := range []labels.Selector{labels.Everything(), labels.SelectorFromSet(map[string]string{provider.ModelLabel: "a"})} {
		want, got := list(1, metricSel), list(4, metricSel)
		if len(want) == 0 || len(want) == pods {
			t.Fatalf("%d items of %d pods: the fixture should leave some pods out", len(want), pods)
		}
		if len(got) != len(want) {
			t.Fatalf("selector %q: %d items in parallel, %d alone", metricSel, len(got), len(want))
		}
		for i := range want {
			if got[i].DescribedObject.Name != want[i].DescribedObject.Name || got[i].Value.Cmp(want[i].Value) != 0 {
				t.Fatalf("item %d: %s=%s in parallel, %s=%s alone", i, got[i].DescribedObject.Name, got[i].Value.String(),
					want[i].DescribedObject.Name, want[i].Value.String())
			}
		}
	}
}
