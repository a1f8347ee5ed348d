package provider_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/metrics/pkg/apis/custom_metrics"

	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// recycleFixture has two namespaces of queue-depth pods, 30 in a and 7 in
// b, and a handler that lists one namespace's pods as the API server
// would, writing each item, and keeps the last list's items.
func recycleFixture(t *testing.T) (http.Handler, map[string]string, func() []custom_metrics.MetricValue) {
	f := newFixture()
	want := map[string]string{}
	for ns, n := range map[string]int{"a": 30, "b": 7} {
		var lines []string
		for i := range n {
			name := fmt.Sprintf("%s-%02d", ns, i)
			f.addPod(ns, name, true, map[string]string{"app": "llm"})
			f.put(ns, name, signal.SourceInference, f.now, "m", map[signal.Signal]float64{signal.QueueDepth: float64(i)}, nil)
			lines = append(lines, fmt.Sprintf("%s=%d", name, i))
		}
		slices.Sort(lines)
		want[ns] = strings.Join(lines, "\n")
	}
	var (
		mu   sync.Mutex
		last []custom_metrics.MetricValue
	)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns := r.URL.Query().Get("namespace")
		list, err := f.p.GetMetricBySelector(r.Context(), ns, labels.SelectorFromSet(map[string]string{"app": "llm"}), podsInfo(provider.QueueDepth), labels.Everything())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		var lines []string
		for _, it := range list.Items {
			lines = append(lines, fmt.Sprintf("%s=%d", it.DescribedObject.Name, it.Value.Value()))
		}
		slices.Sort(lines)
		_, _ = io.WriteString(w, strings.Join(lines, "\n"))
		mu.Lock()
		last = list.Items
		mu.Unlock()
	})
	return h, want, func() []custom_metrics.MetricValue {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

func get(t *testing.T, h http.Handler, ns string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?namespace="+ns, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("namespace %s: %d %s", ns, rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// TestRecycle lists two namespaces of different sizes in turn through
// Recycle: every answer is exactly its own namespace's, and a request's
// items are given back, cleared, once its handler has returned.
func TestRecycle(t *testing.T) {
	inner, want, last := recycleFixture(t)
	h := provider.Recycle(inner)
	for _, ns := range []string{"a", "b", "a", "b", "b", "a"} {
		if got := get(t, h, ns); got != want[ns] {
			t.Fatalf("namespace %s answered\n%s\nwant\n%s", ns, got, want[ns])
		}
		items := last()
		if len(items) == 0 {
			t.Fatal("no items listed")
		}
		for i, it := range items {
			if it.DescribedObject.Name != "" || !it.Value.IsZero() {
				t.Fatalf("item %d still holds %s=%v after its request", i, it.DescribedObject.Name, it.Value.String())
			}
		}
	}
}

// TestRecycleConcurrent serves both namespaces from 8 goroutines at once:
// no request's answer holds another's items (run under -race, too).
func TestRecycleConcurrent(t *testing.T) {
	inner, want, _ := recycleFixture(t)
	h := provider.Recycle(inner)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				ns := []string{"a", "b"}[(g+i)%2]
				if got := get(t, h, ns); got != want[ns] {
					t.Errorf("namespace %s answered\n%s\nwant\n%s", ns, got, want[ns])
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestNoRecycleOutsideARequest lists without Recycle (as the KEDA scaler
// does): the items are the caller's to keep.
func TestNoRecycleOutsideARequest(t *testing.T) {
	inner, want, last := recycleFixture(t)
	if got := get(t, inner, "a"); got != want["a"] {
		t.Fatalf("answered\n%s\nwant\n%s", got, want["a"])
	}
	for i, it := range last() {
		if it.DescribedObject.Name == "" {
			t.Fatalf("item %d cleared without a recycler", i)
		}
	}
}

// BenchmarkRecycledList10k lists 10,000 pods' queue depth in a request's
// handler, with its items recycled and without: the memory a list
// allocates (B/op) is what the collector has to follow.
func BenchmarkRecycledList10k(b *testing.B) {
	f := newFixture()
	sel := map[string]string{"app": "llm"}
	for i := range 10000 {
		name := fmt.Sprintf("llm-%05d", i)
		f.addPod("ml", name, true, sel)
		f.put("ml", name, signal.SourceInference, f.now, "m", map[signal.Signal]float64{signal.QueueDepth: float64(i % 9)}, nil)
	}
	list := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, err := f.p.GetMetricBySelector(r.Context(), "ml", labels.SelectorFromSet(sel), podsInfo(provider.QueueDepth), labels.Everything())
		if err != nil || len(l.Items) != 10000 {
			b.Fatalf("items %d, err %v", len(l.Items), err)
		}
	})
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"allocated", list}, {"recycled", provider.Recycle(list)}} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			b.ReportAllocs()
			for b.Loop() {
				bc.h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}
