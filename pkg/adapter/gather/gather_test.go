package gather

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscale/gpuscale/internal/harness/testlog"
	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/exporter/backend/sim"
	"github.com/gpuscale/gpuscale/pkg/exporter/httpapi"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/metrics"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

type podList []*corev1.Pod

func (l podList) List(labels.Selector) ([]*corev1.Pod, error) { return l, nil }

func annotatedPod(name string, port int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, Annotations: map[string]string{
			discovery.AnnotationScrape: "true", discovery.AnnotationPort: strconv.Itoa(port)}},
		Spec:   corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"},
	}
}

// serve starts h on a loopback port and returns the port.
func serve(t *testing.T, h http.Handler) (*httptest.Server, int) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	return srv, port
}

func newSim(t *testing.T, rate float64) *inferencesim.Server {
	t.Helper()
	return newSimOn(t, nil, rate)
}

// newSimOn is newSim simulating by clk (the real clock when nil): a
// server on the scraper's fake clock does a step's work at each step.
func newSimOn(t *testing.T, clk *clocktesting.FakeClock, rate float64) *inferencesim.Server {
	t.Helper()
	var now func() time.Time
	if clk != nil {
		now = clk.Now
	}
	s, err := inferencesim.NewServer(inferencesim.Options{Dialect: inferencesim.VLLM, Model: "llama", Rate: rate, Seed: 7, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type staticPods map[string][]metrics.PodRef

func (s staticPods) PodsByDevice() map[string][]metrics.PodRef { return s }

// TestCycleEndToEnd runs real simulated servers, a real exporter and the
// real scraper through one gather cycle after another, with broken
// targets among them. The servers, the scraper and the gatherer share a
// fake clock, stepped between cycles.
func TestCycleEndToEnd(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	busy := newSimOn(t, clk, 30)
	_, busyPort := serve(t, busy)

	backend, err := sim.New(sim.Options{GPUs: 2, Identity: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	util := 80.0
	if err := backend.SetLoad("0", sim.Load{Utilization: &util}); err != nil {
		t.Fatal(err)
	}
	col, err := exporter.NewCollector(exporter.Config{Backend: backend, Hostname: "node-a", Interval: time.Second,
		Pods: staticPods{sim.GPUUUID("node-a", 0): {{Namespace: "ml", Pod: "busy", Container: "vllm"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := col.CollectOnce(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	_, exporterPort := serve(t, httpapi.New(httpapi.Config{Source: col, Gatherer: reg}))

	_, garbagePort := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("vllm:num_requests_waiting{ this is not exposition\n"))
	}))
	slow, slowPort := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	_ = slow
	gone, gonePort := serve(t, newSim(t, 1))
	gone.Close()

	pods := podList{annotatedPod("busy", busyPort), annotatedPod("garbage", garbagePort),
		annotatedPod("slow", slowPort), annotatedPod("gone", gonePort), exporterPod("exporter-xyz", "node-a")}

	st := store.New(30)
	reg2 := prometheus.NewRegistry()
	g, err := New(Config{
		// The timeout is the slow target's, and the others' too: with
		// 300 ms, under -race beside CI's other phases, the garbage
		// target once counted 3 parse errors of 4, its fourth scrape
		// most likely outlasting the timeout (the failure now names
		// every reason counted).
		Pods: pods, Scraper: scrape.New(scrape.Config{Timeout: time.Second, Clock: clk}), Store: st,
		Interval: time.Second, Registerer: reg2, Discovery: exporterDiscovery(exporterPort), Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < 4; i++ {
		g.Cycle(ctx)
		clk.Step(400 * time.Millisecond)
	}
	now := clk.Now()

	smp, ok := st.Latest(store.Key{Namespace: "ml", Name: "busy"}, signal.SourceInference, now, 2*time.Second)
	if !ok || smp.Model != "llama" || smp.TTFT == nil {
		t.Fatalf("busy pod sample: ok=%v %+v", ok, smp)
	}
	if _, ok := smp.Get(signal.QueueDepth); !ok {
		t.Error("busy pod has no queue depth")
	}
	gpu, ok := st.Latest(store.Key{Namespace: "ml", Name: "busy"}, signal.SourceGPU, now, 2*time.Second)
	if v, _ := gpu.Get(signal.GPUUtilization); !ok || v != 80 {
		t.Errorf("busy pod GPU utilization = %v (ok=%v), want 80 from the exporter", v, ok)
	}
	node, ok := st.LatestNode("node-a", now, 2*time.Second)
	if v, _ := node.Get(signal.GPUUtilization); !ok || v != 40 {
		t.Errorf("node utilization = %v (ok=%v), want mean of 80 and 0", v, ok)
	}
	for _, name := range []string{"garbage", "slow", "gone"} {
		if _, ok := st.Latest(store.Key{Namespace: "ml", Name: name}, signal.SourceInference, now, time.Hour); ok {
			t.Errorf("broken target %s has a sample", name)
		}
	}
	for reason, pod := range map[string]string{"parse": "garbage", "timeout": "slow", "connect": "gone"} {
		if n := scrapeErrors(t, g, pod, reason); n != 4 {
			all := map[string]float64{}
			for _, r := range failReasons {
				if n := scrapeErrors(t, g, pod, r); n > 0 {
					all[r] = n
				}
			}
			t.Errorf("errors{pod=%s,reason=%s} = %v, want 4 (all of %s's: %v)", pod, reason, n, pod, all)
		}
	}
	// Four cycles with a 1 s timeout on the slow target: the broken
	// targets cost their own timeout, not the others' samples.
	t.Logf("4 cycles in %v", time.Since(start))

	// The TTFT increase over the window is the PromQL-exact one.
	inc, ok := st.TTFTIncrease(store.Key{Namespace: "ml", Name: "busy"}, now, time.Minute, 2*time.Second)
	if !ok {
		t.Fatal("no TTFT increase for the busy pod")
	}
	if q := histogram.Quantile(0.9, inc); math.IsNaN(q) || q <= 0 {
		t.Errorf("p90 = %v, want a positive latency", q)
	}
}

// TestCounterResetAndVanishing: a server that restarts (its counters reset)
// still gives a sane TTFT increase; a target that leaves discovery has its
// per-target series removed.
func TestCounterResetAndVanishing(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	first := newSimOn(t, clk, 40)
	h := &swap{h: first}
	_, port := serve(t, h)
	pods := &mutablePods{pods: podList{annotatedPod("p", port)}}
	st := store.New(30)
	g, err := New(Config{Pods: pods, Scraper: scrape.New(scrape.Config{Timeout: time.Second, Clock: clk}), Store: st, Interval: time.Second,
		Registerer: prometheus.NewRegistry(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		g.Cycle(ctx)
		clk.Step(300 * time.Millisecond)
	}
	h.set(newSimOn(t, clk, 40)) // restart: every counter and bucket starts from zero
	for i := 0; i < 3; i++ {
		clk.Step(300 * time.Millisecond)
		g.Cycle(ctx)
	}
	inc, ok := st.TTFTIncrease(store.Key{Namespace: "ml", Name: "p"}, clk.Now(), time.Minute, 2*time.Second)
	if !ok {
		t.Fatal("no increase across the restart")
	}
	for i, c := range inc.Counts {
		if c < 0 || math.IsNaN(c) {
			t.Fatalf("bucket %d increase %v: a reset must not produce negative increases", i, c)
		}
	}
	success := targetCollector{g}
	if testutil.CollectAndCount(success, "gpuscale_adapter_scrape_last_success_timestamp_seconds") != 1 {
		t.Fatal("want one success series")
	}
	// The last cycle's scrape succeeded, at the clock's time.
	if v, want := testutil.ToFloat64(success), float64(clk.Now().UnixNano())/1e9; v != want {
		t.Errorf("last success at %v, want %v", v, want)
	}
	pods.pods = nil
	g.Cycle(ctx)
	// Its error series go too (the restart made some scrapes fail).
	if n := testutil.CollectAndCount(success); n != 0 {
		t.Fatalf("vanished target still has %d series", n)
	}
}

type mutablePods struct{ pods podList }

func (m *mutablePods) List(sel labels.Selector) ([]*corev1.Pod, error) { return m.pods.List(sel) }

// swap lets a test replace the server behind one address, as a restarted
// pod does.
type swap struct {
	mu sync.Mutex
	h  http.Handler
}

func (s *swap) set(h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h = h
}

func (s *swap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	h.ServeHTTP(w, r)
}

// TestProblemsLoggedOnChange: a misconfigured pod is logged when its
// problem appears and when it is fixed, not at every cycle, while the gauge
// counts it at every cycle.
func TestProblemsLoggedOnChange(t *testing.T) {
	bad := annotatedPod("bad", 8000)
	bad.Annotations[discovery.AnnotationPort] = "eighty"
	pods := &mutablePods{pods: podList{bad}}
	var logs testlog.Buffer
	g, err := New(Config{Pods: pods, Scraper: scrape.New(scrape.Config{Timeout: time.Second}), Store: store.New(30),
		Interval: time.Second, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		g.Cycle(context.Background())
	}
	if n := strings.Count(logs.String(), "pod asks to be scraped but cannot be"); n != 1 {
		t.Errorf("problem logged %d times in 3 cycles, want once:\n%s", n, logs.String())
	}
	if v := testutil.ToFloat64(g.m.misconfigured); v != 1 {
		t.Errorf("misconfigured gauge %v, want 1", v)
	}
	pods.pods = nil
	g.Cycle(context.Background())
	if !strings.Contains(logs.String(), "scrape problem resolved") {
		t.Errorf("fixing the pod was not logged:\n%s", logs.String())
	}
	if v := testutil.ToFloat64(g.m.misconfigured); v != 0 {
		t.Errorf("misconfigured gauge %v after the fix, want 0", v)
	}
}

// scrapeErrors reads gpuscale_adapter_scrape_errors_total of one pod of ml
// and reason as a scrape of the adapter would.
func scrapeErrors(t *testing.T, g *Gatherer, pod, reason string) float64 {
	t.Helper()
	return counterOf(t, targetCollector{g}, "gpuscale_adapter_scrape_errors_total", "ml", pod, reason)
}

func TestFailReason(t *testing.T) {
	for _, tt := range []struct {
		reason, want string
	}{
		{scrape.ReasonTimeout, "timeout"},
		{reasonUnknownDialect, "unknown_dialect"},
		{reasonNoGPUSeries, "no_gpu_series"},
		{"a reason added later", "other"},
	} {
		if got := failReasons[failReason(tt.reason)]; got != tt.want {
			t.Errorf("failReason(%q) is %q, want %q", tt.reason, got, tt.want)
		}
	}
}

// recordingScraper records the targets of every cycle it passes on.
type recordingScraper struct {
	*scrape.Scraper
	cycles [][]scrape.Target
}

func (r *recordingScraper) Cycle(ctx context.Context, ts []scrape.Target, sink func(scrape.Result)) {
	r.cycles = append(r.cycles, slices.Clone(ts))
	r.Scraper.Cycle(ctx, ts, sink)
}

// TestCycleTellsTheScraperTargetHealth checks that targets are passed to the
// scraper as unknown until scraped, then up or down by their last scrape, so
// that it can scrape failing ones last. One the cycle's deadline cut short
// after it had held a worker is down too; one the deadline left unscraped
// stays as it was.
func TestCycleTellsTheScraperTargetHealth(t *testing.T) {
	_, up := serve(t, newSim(t, 10))
	_, down := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	_, silent := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	// One worker: the silent target holds it until the cycle ends, long
	// before its own timeout, and the one listed after it is never tried.
	rec := &recordingScraper{Scraper: scrape.New(scrape.Config{Timeout: time.Minute, CycleTimeout: 500 * time.Millisecond, Workers: 1})}
	g, err := New(Config{Pods: podList{annotatedPod("up", up), annotatedPod("down", down), annotatedPod("silent", silent), annotatedPod("later", up)},
		Scraper: rec, Store: store.New(30), Interval: time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	g.Cycle(t.Context())
	g.Cycle(t.Context())
	want := []map[string]scrape.Health{
		{"ml/up": scrape.HealthUnknown, "ml/down": scrape.HealthUnknown, "ml/silent": scrape.HealthUnknown, "ml/later": scrape.HealthUnknown},
		{"ml/up": scrape.HealthUp, "ml/down": scrape.HealthDown, "ml/silent": scrape.HealthDown, "ml/later": scrape.HealthUnknown},
	}
	for i, w := range want {
		for _, tg := range rec.cycles[i] {
			if tg.Health != w[tg.Key] {
				t.Errorf("cycle %d: %s passed with health %d, want %d", i, tg.Key, tg.Health, w[tg.Key])
			}
		}
	}
}

// hangAfterAnswer answers its first scrape as a healthy vLLM would, then
// accepts every later one and never answers.
func hangAfterAnswer(t *testing.T) int {
	t.Helper()
	var once sync.Once
	_, port := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answered := false
		once.Do(func() {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = w.Write([]byte("vllm:num_requests_waiting{model_name=\"m\"} 1\n"))
			answered = true
		})
		if !answered {
			<-r.Context().Done()
		}
	}))
	return port
}

// growingPods is a pod list that can grow between cycles.
type growingPods struct {
	mu   sync.Mutex
	pods podList
}

func (g *growingPods) List(labels.Selector) ([]*corev1.Pod, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.pods), nil
}

func (g *growingPods) add(p ...*corev1.Pod) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pods = append(g.pods, p...)
}

// TestHangAfterAnswerDoesNotStarveHealthyTargets: 16 healthy pods answer
// for three cycles; then 48 pods appear that answer once and then hang,
// listed first, with 8 workers and a scrape timeout of twice the interval.
// From then on no healthy pod's newest sample is ever older than two
// intervals, and once they have hung, the hanging pods are scraped as
// suspects. (Before, a target cut by the cycle's deadline stayed healthy,
// and each cycle scraped a few of the healthy ones.)
func TestHangAfterAnswerDoesNotStarveHealthyTargets(t *testing.T) {
	const interval = 2 * time.Second
	pods := &growingPods{}
	_, healthy := serve(t, newSim(t, 10))
	for i := range 16 {
		pods.add(annotatedPod(fmt.Sprintf("victim-%02d", i), healthy))
	}
	rec := &recordingScraper{Scraper: scrape.New(scrape.Config{Timeout: 2 * interval, CycleTimeout: interval, Workers: 8})}
	g, err := New(Config{Pods: pods, Scraper: rec, Store: store.New(30), Interval: interval, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	// Until every healthy pod has answered (three cycles at least): under
	// -race on a loaded machine a first scrape can miss a cycle's deadline.
	answered := func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		n := 0
		for k, tt := range g.known {
			if strings.HasPrefix(k, "ml/victim-") && tt.lastSuccess.Load() != 0 {
				n++
			}
		}
		return n == 16
	}
	for i := 0; i < 3 || !answered(); i++ {
		if i == 30 {
			t.Fatal("the healthy pods did not all answer in 30 cycles")
		}
		g.Cycle(t.Context())
	}
	var hangers []*corev1.Pod
	for i := range 48 {
		hangers = append(hangers, annotatedPod(fmt.Sprintf("hang-%02d", i), hangAfterAnswer(t)))
	}
	pods.mu.Lock()
	pods.pods = append(hangers, pods.pods...)
	pods.mu.Unlock()
	for cycle := range 8 {
		g.Cycle(t.Context())
		now := time.Now()
		g.mu.Lock()
		for k, tt := range g.known {
			if !strings.HasPrefix(k, "ml/victim-") {
				continue
			}
			if age := now.Sub(time.Unix(0, tt.lastSuccess.Load())); age > 2*interval {
				t.Errorf("cycle %d after the hanging pods came: %s's newest sample is %v old, more than two intervals", cycle, k, age.Round(time.Millisecond))
			}
		}
		g.mu.Unlock()
	}
	last := rec.cycles[len(rec.cycles)-1]
	for _, tg := range last {
		if strings.HasPrefix(tg.Key, "ml/hang-") && tg.Health == scrape.HealthUp {
			t.Errorf("%s still scraped as healthy after hanging for cycles", tg.Key)
		}
	}
}
