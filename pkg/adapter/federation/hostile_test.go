package federation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

const cmPath = "/apis/custom.metrics.k8s.io/v1beta2"

var podsInfo = cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: "queue_backlog"}

// TestRedirectsAreNotFollowed: a backend that answers with a redirect to
// another host gets its answer refused as an error; the other host never
// hears from gpuscale, so it never sees the caller's identity (nor, over
// TLS, the front-proxy certificate).
func TestRedirectsAreNotFollowed(t *testing.T) {
	var elsewhere atomic.Int32
	var sentAs atomic.Value
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		sentAs.Store(r.Header.Get("X-Remote-User"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta2","items":[]}`))
	}))
	defer evil.Close()
	f := newFixture(t, 0)
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			f.backend.set(cmPath+"/namespaces/ns1/pods/*/queue_backlog", answer{code: code,
				header: http.Header{"Location": {evil.URL + cmPath + "/namespaces/ns1/pods/*/queue_backlog"}},
				body:   status(int32(code), "", "moved")})
			_, err := f.p.GetMetricBySelector(asAlice(), "ns1", labels.Everything(), podsInfo, labels.Everything())
			if err == nil {
				t.Fatal("a redirect was answered as a value")
			}
			if n := elsewhere.Load(); n != 0 {
				t.Fatalf("the redirect was followed: %d requests to the other host, as %q", n, sentAs.Load())
			}
		})
	}
}

// TestAnswersAboutOtherObjectsAreRefused: an answer that describes another
// namespace's objects, or another object than the one asked, is an
// error, never passed on to a caller who asked about its own namespace.
func TestAnswersAboutOtherObjectsAreRefused(t *testing.T) {
	f := newFixture(t, 0)
	byName := func(ns, name string) func() error {
		return func() error {
			_, err := f.p.GetMetricByName(asAlice(), types.NamespacedName{Namespace: ns, Name: name}, podsInfo, labels.Everything())
			return err
		}
	}
	list := func(ns string) func() error {
		return func() error {
			_, err := f.p.GetMetricBySelector(asAlice(), ns, labels.Everything(), podsInfo, labels.Everything())
			return err
		}
	}
	nsObject := func(name string) func() error {
		return func() error {
			_, err := f.p.GetMetricByName(asAlice(), types.NamespacedName{Name: name},
				cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "namespaces"}, Metric: "queue_backlog"}, labels.Everything())
			return err
		}
	}
	for _, tc := range []struct {
		name  string
		path  string
		items []cmv1beta2.MetricValue
		call  func() error
		ok    bool
	}{
		{"a list with another namespace's pod", "/namespaces/ns1/pods/*/queue_backlog",
			[]cmv1beta2.MetricValue{v1beta2Value("Pod", "ns1", "a", "queue_backlog", "1"), v1beta2Value("Pod", "victim", "b", "queue_backlog", "2")}, list("ns1"), false},
		{"one pod, of another namespace", "/namespaces/ns1/pods/a/queue_backlog",
			[]cmv1beta2.MetricValue{v1beta2Value("Pod", "victim", "a", "queue_backlog", "1")}, byName("ns1", "a"), false},
		{"one pod, another one", "/namespaces/ns1/pods/a/queue_backlog",
			[]cmv1beta2.MetricValue{v1beta2Value("Pod", "ns1", "secret", "queue_backlog", "1")}, byName("ns1", "a"), false},
		{"a namespace, described as another", "/namespaces/ns1/metrics/queue_backlog",
			[]cmv1beta2.MetricValue{v1beta2Value("Namespace", "victim", "ns1", "queue_backlog", "1")}, nsObject("ns1"), false},
		{"a list of the namespace's pods", "/namespaces/ns1/pods/*/queue_backlog",
			[]cmv1beta2.MetricValue{v1beta2Value("Pod", "ns1", "a", "queue_backlog", "1"), v1beta2Value("Pod", "", "b", "queue_backlog", "2")}, list("ns1"), true},
		{"a namespace, as itself", "/namespaces/ns1/metrics/queue_backlog",
			[]cmv1beta2.MetricValue{v1beta2Value("Namespace", "", "ns1", "queue_backlog", "1")}, nsObject("ns1"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.backend.set(cmPath+tc.path, answer{code: 200, body: v1beta2List(tc.items...)})
			err := tc.call()
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !apierrors.IsInternalError(err) {
				t.Fatalf("err = %v, want an InternalError", err)
			}
		})
	}
}

// TestConcurrentLargeAnswersAreBounded: eight HPAs asking at once, each
// answered with a 15 MB list, all get their answers, and the heap grows by
// a bounded amount: the answers are decoded a budget's worth at a time
// instead of all at once (which took the heap past 1 GiB).
func TestConcurrentLargeAnswersAreBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes 120 MB of answers")
	}
	f := newFixture(t, 5*time.Minute)
	const items = 40_000 // about 200 bytes each
	big := make([]cmv1beta2.MetricValue, items)
	for i := range big {
		big[i] = v1beta2Value("Pod", "ns1", fmt.Sprintf("pod-%06d-%s", i, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"), "queue_backlog", "1")
	}
	raw, err := json.Marshal(v1beta2List(big...))
	if err != nil {
		t.Fatal(err)
	}
	big = nil
	t.Logf("each answer is %d MiB", len(raw)>>20)
	f.backend.set(cmPath+"/namespaces/ns1/pods/*/queue_backlog", answer{code: 200, raw: raw})
	if _, err := f.p.GetMetricBySelector(asAlice(), "ns1", labels.Everything(), podsInfo, labels.Everything()); err != nil {
		t.Fatal(err)
	}
	peak := watchHeap(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			l, err := f.p.GetMetricBySelector(asAlice(), "ns1", labels.Everything(), podsInfo, labels.Everything())
			if err == nil && len(l.Items) != items {
				err = fmt.Errorf("%d items, want %d", len(l.Items), items)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	grew := peak()
	t.Logf("heap grew by at most %d MiB", grew>>20)
	if grew > 160<<20 {
		t.Errorf("the heap grew by %d MiB decoding eight answers at once, want under 160 MiB", grew>>20)
	}
}

// watchHeap samples the heap (live objects and garbage not yet collected)
// every 2 ms until the returned function is called, which reports how far
// it rose above where it was.
func watchHeap(t *testing.T) func() uint64 {
	t.Helper()
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(s); return s[0].Value.Uint64() }
	base := read()
	var top atomic.Uint64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			if v := read(); v > top.Load() {
				top.Store(v)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		cancel()
		<-done
		if v := read(); v > top.Load() {
			top.Store(v)
		}
		return top.Load() - min(base, top.Load())
	}
}
