package storesource

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// TestModelMatcher: the memoised matcher answers what the selector says of
// the model label, whatever the order of the models it is asked about.
func TestModelMatcher(t *testing.T) {
	for _, expr := range []string{"", provider.ModelLabel + "=llama", provider.ModelLabel + "!=llama", provider.ModelLabel + " in (llama, mistral)", "!" + provider.ModelLabel, provider.ModelLabel, "other=x"} {
		sel, err := labels.Parse(expr)
		if err != nil {
			t.Fatal(err)
		}
		mm := newModelMatcher(sel)
		for _, model := range []string{"llama", "llama", "mistral", "", "llama", "", "", "qwen"} {
			if got, want := mm.matches(model), sel.Matches(labels.Set{provider.ModelLabel: model}); got != want {
				t.Errorf("%q on model %q = %v, want %v", expr, model, got, want)
			}
		}
	}
	if mm := newModelMatcher(nil); !mm.matches("anything") {
		t.Error("a nil selector matches every model")
	}
}

func TestInParallel(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, n := range []int{0, 1, parallelMin, 2*parallelMin - 1, 2 * parallelMin, 10001} {
		var mu sync.Mutex
		seen := make([]int, n)
		calls := 0
		inParallel(n, func(lo, hi int) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			for i := lo; i < hi; i++ {
				seen[i]++
			}
		})
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("n=%d: index %d visited %d times", n, i, c)
			}
		}
		if want := max(1, min(4, n/parallelMin)); calls != want {
			t.Errorf("n=%d: %d shares, want %d", n, calls, want)
		}
	}
}

// TestConcurrentQuantileLists: lists of one pod set's TTFT quantile at
// once, each split among goroutines (more pods than parallelMin), while
// samples land, answer what a list alone answers at the same instant: a
// list that finds the set's memo taken works without it, and shares of
// one list write only their own pods' memo slots (go test -race).
func TestConcurrentQuantileLists(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	st := store.New(32)
	n := 3 * parallelMin
	pods := make([]*corev1.Pod, n)
	put := func(k int) {
		for i := range n {
			c := float64(100_000 + k*(i%7+1))
			h := &histogram.Histogram{Bounds: []float64{0.1, 1, math.Inf(1)}, Counts: []float64{c / 4, c / 2, c}, Count: c}
			smp := store.Sample{Time: t0.Add(time.Duration(k) * 5 * time.Second), TTFT: h}
			st.PutPod(store.Key{Namespace: "ns", Name: pods[i].Name}, signal.SourceInference, smp)
		}
	}
	for i := range pods {
		pods[i] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p%04d", i)}}
	}
	for k := range 12 {
		put(k)
	}
	var now atomic.Int64
	now.Store(t0.Add(56 * time.Second).UnixNano())
	src := New(st, time.Minute, time.Minute, func() time.Time { return time.Unix(0, now.Load()) })
	set := provider.NewPodSet("ns", pods)
	m, _ := provider.MetricByName(provider.TTFTP90)
	for round := range 5 {
		want, err := src.Pods(context.Background(), provider.NewPodSet("ns", pods), m, labels.Everything())
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				got, err := src.Pods(context.Background(), set, m, labels.Everything())
				if err != nil {
					t.Error(err)
					return
				}
				for i := range got {
					if got[i].V != want[i].V || got[i].Time != want[i].Time {
						t.Errorf("round %d: pod %d listed %v, alone %v", round, i, got[i], want[i])
						return
					}
				}
			})
		}
		wg.Wait()
		put(12 + round)
		now.Add(int64(5 * time.Second))
	}
}

// TestNewestHistogramReadsAreRecorded: the capacity signal's reads of the
// newest histograms, of one namespace's pods or of several, tell the
// store that those pods' scrapes must parse them.
func TestNewestHistogramReadsAreRecorded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	pod := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	reads := []struct {
		name string
		read func(*Source, *provider.PodSet) error
		want store.Histograms
	}{
		{"prefill", func(s *Source, set *provider.PodSet) error {
			_, err := s.PodPrefill(context.Background(), set, labels.Everything())
			return err
		}, store.HistogramsPrefill},
		{"TTFT", func(s *Source, set *provider.PodSet) error {
			_, err := s.PodTTFT(context.Background(), set, labels.Everything())
			return err
		}, store.HistogramsTTFT},
		{"ITL", func(s *Source, set *provider.PodSet) error {
			_, err := s.PodITL(context.Background(), set, labels.Everything())
			return err
		}, store.HistogramsITL},
	}
	for _, r := range reads {
		for _, set := range []*provider.PodSet{
			provider.NewPodSet("a", []*corev1.Pod{pod("a", "p")}),
			provider.NewPodSet("", []*corev1.Pod{pod("a", "p"), pod("b", "q")}),
		} {
			st := store.New(4, store.WithLatencyWindowIdle(time.Minute))
			src := New(st, time.Minute, time.Minute, func() time.Time { return now })
			if err := r.read(src, set); err != nil {
				t.Fatal(err)
			}
			for _, p := range set.Pods {
				if got := st.HistogramsRead(p.Namespace, now); got != r.want {
					t.Errorf("%s of %q: namespace %s parses %b, want %b", r.name, set.Namespace, p.Namespace, got, r.want)
				}
			}
		}
	}
}
