package hostile_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/internal/harness/hostile"
	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/adapter/gather"
	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// The second round: what a tenant's pods can serve within every per-scrape
// limit (internal/harness/hostile.TenantKinds), through the real discovery,
// scraper, ingest and store, at the adapter's defaults (64 workers, a scrape
// timeout of 80% of the interval, the cycle ending at the interval).

// fleet is a gatherer over pods listening on loopback addresses; pods
// added after it started are listed from the next cycle on.
type fleet struct {
	mu   sync.Mutex
	pods podList
	st   *store.Store
	reg  *prometheus.Registry
	g    *gather.Gatherer
	next int // the next loopback address
}

// List implements gather.PodLister.
func (f *fleet) List(labels.Selector) ([]*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pods), nil
}

func newFleet() *fleet {
	return &fleet{st: store.New(13, store.WithTTFTRetention(time.Minute)), reg: prometheus.NewRegistry()}
}

// add serves k as pod ns/name on a fresh loopback address.
func (f *fleet) add(t testing.TB, ns, name string, k hostile.Kind) {
	t.Helper()
	ip := fmt.Sprintf("127.%d.%d.%d", 20+f.next/62500, f.next/250%250, f.next%250+1)
	f.next++
	listen(t, ip, k)
	f.mu.Lock()
	f.pods = append(f.pods, pod(ns, name, ip, node, true))
	f.mu.Unlock()
}

// start builds the gatherer with the adapter's defaults at interval.
func (f *fleet) start(t testing.TB, interval time.Duration) {
	t.Helper()
	g, err := gather.New(gather.Config{
		Pods: f, Store: f.st, Interval: interval, Registerer: f.reg, RetainFor: time.Hour,
		Scraper: scrape.New(scrape.Config{Timeout: interval * 8 / 10, CycleTimeout: interval}),
		Discovery: discovery.Config{ExporterSelector: labels.SelectorFromSet(exporterLabels), ExporterPort: port,
			ExporterNamespace: releaseNS, ExporterDaemonSet: daemonSet, MaxTargetsPerNamespace: 2000},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.g = g
}

// cycles runs n cycles back to back and calls check after each with the
// start of the cycle before it (the first cycle's own start): a pod
// scraped in this cycle or the one before has its newest sample from then
// on. The gatherer lets a target its deadline left out go first in the
// next cycle, once (order), so a healthy pod may lose one cycle to
// hostile ones but never two in a row; an age bound in intervals would
// say the same only while no cycle overran its interval by a millisecond.
func (f *fleet) cycles(n int, check func(cycle int, since time.Time)) {
	var prev time.Time
	for cycle := range n {
		start := time.Now()
		if cycle == 0 {
			prev = start
		}
		f.g.Cycle(context.Background())
		check(cycle, prev)
		prev = start
	}
}

// TestHangAfterAnswer512: 16 healthy pods answer for two cycles; then 512
// pods appear, listed before them, that answer once and then hang. At the
// adapter's defaults,
// from the cycle in which they first hang, every healthy pod is scraped
// in each cycle or the one before it (no older than two intervals while
// cycles keep to theirs). (Before: 2-16 of 16 healthy pods scraped a
// cycle, samples 28.9 s old against a 15 s staleness limit.)
func TestHangAfterAnswer512(t *testing.T) {
	const interval = 2 * time.Second
	f := newFleet()
	for i := range 16 {
		f.add(t, tenantNS, fmt.Sprintf("healthy-%02d", i), queueServer(i))
	}
	f.start(t, interval)
	for range 2 {
		f.g.Cycle(context.Background())
	}
	for i := range 512 {
		f.add(t, attackerNS, fmt.Sprintf("hang-%03d", i), hostile.Kind{Name: "hang-after-answer", PerPod: hostile.HangAfterAnswer})
	}
	// Listed first: the informer lists pods in no order the tenants
	// cannot get ahead in.
	f.mu.Lock()
	f.pods = append(f.pods[16:], f.pods[:16]...)
	f.mu.Unlock()
	worst := time.Duration(0)
	f.cycles(6, func(cycle int, since time.Time) {
		if cycle == 0 {
			return // the first answers
		}
		now := time.Now()
		for i := range 16 {
			s, ok := f.st.Latest(store.Key{Namespace: tenantNS, Name: fmt.Sprintf("healthy-%02d", i)}, signal.SourceInference, now, time.Hour)
			age := now.Sub(s.Time)
			worst = max(worst, age)
			if !ok || s.Time.Before(since) {
				t.Errorf("cycle %d: healthy-%02d's newest sample is %v old (ok=%v): scraped in neither this cycle nor the one before", cycle, i, age.Round(time.Millisecond), ok)
			}
		}
	})
	t.Logf("worst healthy staleness after the hanging began: %v (interval %v)", worst.Round(time.Millisecond), interval)
}

// TestTenantKinds: each second-round kind gets what it may keep and no
// more, and the healthy pods beside them stay exact, each scraped in every
// cycle or the one before it.
func TestTenantKinds(t *testing.T) {
	f := newFleet()
	for _, k := range hostile.TenantKinds() {
		f.add(t, attackerNS, k.Name, k)
		if k.Name == "router-most-models" {
			// Three of them name 12,288 models: one is past the
			// namespace's bound.
			f.add(t, attackerNS, k.Name+"-2", k)
			f.add(t, attackerNS, k.Name+"-3", k)
		}
	}
	for i := range healthyPods {
		f.add(t, tenantNS, fmt.Sprintf("healthy-%02d", i), queueServer(i))
	}
	const interval = 2 * time.Second
	f.start(t, interval)
	f.cycles(4, func(cycle int, since time.Time) {
		now := time.Now()
		for i := range healthyPods {
			s, ok := f.st.Latest(store.Key{Namespace: tenantNS, Name: fmt.Sprintf("healthy-%02d", i)}, signal.SourceInference, now, time.Hour)
			if v, _ := s.Get(signal.QueueDepth); !ok || s.Time.Before(since) || v != float64(i) {
				t.Errorf("cycle %d: healthy-%02d: %v, %v old (ok=%v; scraped in neither this cycle nor the one before?)", cycle, i, v, now.Sub(s.Time).Round(time.Millisecond), ok)
			}
		}
	})
	fams, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	latest := func(name string) (store.Sample, bool) {
		return f.st.Latest(store.Key{Namespace: attackerNS, Name: name}, signal.SourceInference, now, time.Hour)
	}
	// model-names: every series names a model past 256 bytes.
	if s, ok := latest("model-names"); ok {
		if v, has := s.Get(signal.QueueDepth); has || s.Model != "" {
			t.Errorf("model-names: stored queue %v, model of %d bytes", v, len(s.Model))
		}
	}
	if n := count(fams, "gpuscale_adapter_rejected_values_total", attackerNS, "model-names", "model_name"); n < 1800 {
		t.Errorf("model-names: %v names rejected, want 1,800 a scrape", n)
	}
	// router-names: every name past 256 bytes, none kept.
	if r, ok := f.st.LatestRouter(store.Key{Namespace: attackerNS, Name: "router-names"}, now, time.Hour); ok && len(r.Held) != 0 {
		t.Errorf("router-names: %d models held", len(r.Held))
	}
	if n := count(fams, "gpuscale_adapter_rejected_values_total", attackerNS, "router-names", "model_name"); n < 1900 {
		t.Errorf("router-names: %v names rejected, want 1,900 a scrape", n)
	}
	// router-most-models: 4,096 counts of 256-byte names each; with
	// router-kept's 8, the third (at least) is past the namespace's bound
	// and refused.
	held, refused := 0, 0.0
	for _, pod := range []string{"router-most-models", "router-most-models-2", "router-most-models-3", "router-kept"} {
		if r, ok := f.st.LatestRouter(store.Key{Namespace: attackerNS, Name: pod}, now, time.Hour); ok {
			held += len(r.Held)
		}
		refused += count(fams, "gpuscale_adapter_scrape_errors_total", attackerNS, pod, "too_many_models")
	}
	if held > store.MaxHeldModelsPerNamespace || held < 4096+8 || refused == 0 {
		t.Errorf("routers: %d counts held, %v scrapes refused; want at most %d, and some refused", held, refused, store.MaxHeldModelsPerNamespace)
	}
	// histogram-buckets: the histograms refused, the queue kept.
	if s, ok := latest("histogram-buckets"); !ok || s.TTFT != nil || s.Prefill != nil {
		t.Errorf("histogram-buckets: stored %v, TTFT %v, prefill %v", ok, s.TTFT != nil, s.Prefill != nil)
	} else if v, _ := s.Get(signal.QueueDepth); v != 1 {
		t.Errorf("histogram-buckets: queue %v, want 1", v)
	}
	if n := count(fams, "gpuscale_adapter_rejected_values_total", attackerNS, "histogram-buckets", "too_many_buckets"); n < 2 {
		t.Errorf("histogram-buckets: %v histograms rejected, want 2 a scrape", n)
	}
	// capacity-inputs: every value in range, stored as such (the capacity
	// signal holds its slots to what a server holds: pkg/signal/capacity).
	if s, ok := latest("capacity-inputs"); !ok {
		t.Error("capacity-inputs: its in-range values were not stored")
	} else if v, _ := s.Get(signal.RequestsRunning); v != 1000 {
		t.Errorf("capacity-inputs: running %v", v)
	}
	// names-kept: the most an inference pod keeps, kept.
	if s, ok := latest("names-kept"); !ok || len(s.Model) != 1023 || s.TTFT == nil || len(s.TTFT.Bounds) != 64 {
		t.Errorf("names-kept: stored %v, model of %d bytes, TTFT %v", ok, len(s.Model), s.TTFT != nil)
	}
	// hang-after-answer: a suspect once it hangs.
	if n := count(fams, "gpuscale_adapter_scrape_errors_total", attackerNS, "hang-after-answer", scrape.ReasonTimeout, scrape.ReasonCycleDeadline); n == 0 {
		t.Errorf("hang-after-answer: no timeout counted: %v", byReason(fams, "gpuscale_adapter_scrape_errors_total", attackerNS, "hang-after-answer"))
	}
}

// tenantFleet serves perNS pods in each of namespaces namespaces, most of
// them keeping all they may (names-kept, router-kept, capacity-inputs in
// turn), and four of each kind at the per-scrape limits (model-names,
// router-names, router-most-models, histogram-buckets), and scrapes them
// for cycles at interval, or, with cycles 0, until as many pods are stored
// as two cycles before (at most 40 cycles): every pod has been stored, or
// refused. It returns the peak heap during the cycles (live objects and
// garbage not yet collected) and the live heap after them.
func tenantFleet(t testing.TB, namespaces, perNS, cycles int, interval time.Duration) (peak, live uint64, f *fleet) {
	kept := []string{"names-kept", "router-kept", "capacity-inputs"}
	bombs := []string{"model-names", "router-names", "router-most-models", "histogram-buckets"}
	// One handler a kind: the attack side's bodies, which share this
	// process's heap, are built once.
	kinds := map[string]hostile.Kind{}
	for _, k := range hostile.TenantKinds() {
		kinds[k.Name] = k
	}
	f = newFleet()
	for n := range namespaces {
		ns := fmt.Sprintf("tenant-%d", n)
		for i := range perNS {
			name := kept[i%len(kept)]
			if i < 4*len(bombs) {
				name = bombs[i%len(bombs)]
			}
			f.add(t, ns, fmt.Sprintf("%s-%04d", name, i), kinds[name])
		}
	}
	f.start(t, interval)
	runtime.GC()
	p := watchHeap(t)
	var history []int
	for i := 0; cycles == 0 && i < 40 || i < cycles; i++ {
		f.g.Cycle(context.Background())
		if cycles > 0 {
			continue
		}
		history = append(history, f.stored())
		if n := len(history); n > 2 && history[n-1] == history[n-3] {
			break
		}
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return p.Load(), m.HeapAlloc, f
}

// TestTenantFleetKeepsBoundedState: four namespaces of 150 pods, each
// namespace with four pods of each kind at the per-scrape limits, the rest
// keeping all they may: the router counts kept are within each namespace's
// bound (its four router-most-models pods name 16,384 models), and the live
// heap stays small. The full measurement
// (2,000 pods a namespace) is BenchmarkTenantFleet.
func TestTenantFleetKeepsBoundedState(t *testing.T) {
	peak, live, f := tenantFleet(t, 4, 150, 4, 5*time.Second)
	t.Logf("peak heap %d MiB, live after the cycles %d MiB", peak>>20, live>>20)
	now := time.Now()
	for n := range 4 {
		ns := fmt.Sprintf("tenant-%d", n)
		held := 0
		for _, p := range f.pods {
			if r, ok := f.st.LatestRouter(store.Key{Namespace: ns, Name: p.Name}, now, time.Hour); ok && p.Namespace == ns {
				held += len(r.Held)
			}
		}
		if held > store.MaxHeldModelsPerNamespace {
			t.Errorf("%s: routers hold %d model counts, more than %d", ns, held, store.MaxHeldModelsPerNamespace)
		}
	}
	if live > 128<<20 {
		t.Errorf("live heap %d MiB after scraping the fleet, want under 128 MiB", live>>20)
	}
}

// stored is how many of the fleet's pods the store holds a sample of, as
// an inference server or a router.
func (f *fleet) stored() int {
	n := 0
	now := time.Now()
	for _, p := range f.pods {
		k := store.Key{Namespace: p.Namespace, Name: p.Name}
		_, inference := f.st.Latest(k, signal.SourceInference, now, time.Hour)
		_, router := f.st.LatestRouter(k, now, time.Hour)
		if inference || router {
			n++
		}
	}
	return n
}

// BenchmarkTenantFleet is the measurement: 2,000 hostile pods in
// each of 4 namespaces, inference and router kinds mixed, each keeping all
// it may or at the per-scrape limits, scraped at the default 5 s interval
// until every pod has been stored once or refused. It reports the peak heap during the
// cycles and the live heap after them (the chart's limit is 512 MiB, its
// soft limit 460 MiB), and how many pods were stored: the routers past a
// namespace's bound are refused, and are the ones missing.
func BenchmarkTenantFleet(b *testing.B) {
	for range b.N {
		start := time.Now()
		peak, live, f := tenantFleet(b, 4, 2000, 0, 5*time.Second)
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		b.ReportMetric(float64(live)/(1<<20), "live-heap-MiB")
		b.ReportMetric(float64(f.stored()), "pods-stored")
		b.ReportMetric(time.Since(start).Seconds()/5, "cycles")
	}
}
