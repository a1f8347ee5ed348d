// Package hostile_test is the hostile-target suite: the adapter's real
// discovery, scraper, ingest and store against real HTTP servers on
// loopback addresses that do what a hostile tenant or a broken fleet does
// (internal/harness/hostile), beside healthy inference servers and exporters.
// Every healthy target must stay fresh and exact; nothing a hostile one
// serves may be stored; every refusal is counted under its reason.
package hostile_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpuscale/gpuscale/internal/harness/hostile"
	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/adapter/gather"
	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

const (
	port        = 9400
	releaseNS   = "gpuscale"
	daemonSet   = "gpuscale-exporter"
	tenantNS    = "ml"
	attackerNS  = "attacker"
	node        = "node-a"
	healthyPods = 24
)

var exporterLabels = map[string]string{"app.kubernetes.io/name": "gpuscale-exporter"}

type podList []*corev1.Pod

func (l podList) List(labels.Selector) ([]*corev1.Pod, error) { return l, nil }

// listen serves h on ip:port until the test ends; a nil h accepts and
// never answers.
func listen(t testing.TB, ip string, k hostile.Kind) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go hostile.Serve(l, k)
}

func pod(ns, name, ip, nodeName string, annotate bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: nodeName},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
	if annotate {
		p.Annotations = map[string]string{discovery.AnnotationScrape: "true", discovery.AnnotationPort: strconv.Itoa(port)}
	}
	return p
}

// queueServer is a healthy vLLM: its queue depth is its own number.
func queueServer(n int) hostile.Kind {
	body := fmt.Sprintf("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"llama\"} %d\n"+
		"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"llama\"} 4\n", n)
	return hostile.Kind{Name: "healthy", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(body))
	})}
}

// dcgm serves GPU utilization for the given pods, as an exporter would.
func dcgm(util float64, pods ...string) hostile.Kind {
	body := "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
	for i, p := range pods {
		body += fmt.Sprintf("DCGM_FI_DEV_GPU_UTIL{gpu=\"%d\",UUID=\"GPU-%d\",Hostname=\"%s\",namespace=\"%s\",pod=\"%s\",container=\"c\"} %g\n", i, i, node, tenantNS, p, util)
	}
	return hostile.Kind{Name: "dcgm", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(body))
	})}
}

func TestHostileFleet(t *testing.T) {
	kinds, err := hostile.Kinds("http://127.0.0.1:1/", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	var pods podList
	for i := range healthyPods {
		ip := fmt.Sprintf("127.0.1.%d", i+1)
		listen(t, ip, queueServer(i))
		pods = append(pods, pod(tenantNS, fmt.Sprintf("healthy-%02d", i), ip, node, true))
	}
	for i, k := range kinds {
		ip := fmt.Sprintf("127.0.2.%d", i+1)
		listen(t, ip, k)
		pods = append(pods, pod(attackerNS, k.Name, ip, node, true))
	}
	// A pod on another node, which the genuine exporter below claims.
	pods = append(pods, pod(tenantNS, "elsewhere", "127.0.1.200", "node-b", false))
	// The genuine exporter: the release's DaemonSet's pod on node-a.
	exp := pod(releaseNS, "gpuscale-exporter-abcde", "127.0.3.1", node, false)
	exp.Labels = exporterLabels
	exp.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: daemonSet, UID: "ds", Controller: ptr.To(true)}}
	listen(t, exp.Status.PodIP, dcgm(70, "healthy-00", "elsewhere"))
	// A tenant's pod labelled like the exporter, claiming healthy-01's GPU.
	spoof := pod(attackerNS, "gpuscale-exporter-fake", "127.0.3.2", node, false)
	spoof.Labels = exporterLabels
	listen(t, spoof.Status.PodIP, dcgm(0, "healthy-01"))
	pods = append(pods, exp, spoof)

	st := store.New(30)
	reg := prometheus.NewRegistry()
	g, err := gather.New(gather.Config{
		Pods: pods, Store: st, Interval: time.Second, Registerer: reg,
		Scraper: scrape.New(scrape.Config{Timeout: time.Second, Workers: 8, CycleTimeout: 4 * time.Second}),
		Discovery: discovery.Config{ExporterSelector: labels.SelectorFromSet(exporterLabels), ExporterPort: port,
			ExporterNamespace: releaseNS, ExporterDaemonSet: daemonSet},
	})
	if err != nil {
		t.Fatal(err)
	}

	peak := watchHeap(t)
	ctx := context.Background()
	// The first cycle knows no target's health; from the second on, every
	// healthy target must be scraped in every cycle, whatever the others do.
	for cycle := range 4 {
		start := time.Now()
		g.Cycle(ctx)
		took := time.Since(start)
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for i := range healthyPods {
			name := fmt.Sprintf("healthy-%02d", i)
			s, ok := st.Latest(store.Key{Namespace: tenantNS, Name: name}, signal.SourceInference, time.Now(), time.Hour)
			if cycle > 0 && (!ok || s.Time.Before(start)) {
				t.Errorf("cycle %d: healthy pod %s not scraped in this cycle (sample %v, ok=%v, cycle took %v, its errors %v)", cycle, name, s.Time, ok, took,
					byReason(fams, "gpuscale_adapter_scrape_errors_total", tenantNS, name))
				continue
			}
			if v, _ := s.Get(signal.QueueDepth); ok && v != float64(i) {
				t.Errorf("cycle %d: %s queue depth %v, want %d", cycle, name, v, i)
			}
		}
		t.Logf("cycle %d took %v", cycle, took)
	}
	t.Logf("peak heap during the cycles: %.0f MiB", float64(peak.Load())/(1<<20))
	if p := peak.Load(); p > 256<<20 {
		t.Errorf("peak heap %.0f MiB while scraping the hostile fleet, want under 256 MiB (the chart's limit is 512 MiB)", float64(p)/(1<<20))
	}

	now := time.Now()
	for _, k := range kinds {
		if s, ok := st.Latest(store.Key{Namespace: attackerNS, Name: k.Name}, signal.SourceInference, now, time.Hour); ok {
			for _, sig := range []signal.Signal{signal.QueueDepth, signal.RequestsRunning, signal.KVCacheUtilization} {
				if v, has := s.Get(sig); has {
					t.Errorf("hostile %s: stored %v = %v", k.Name, sig, v)
				}
			}
		}
	}
	// Each misbehaviour is refused for its own reason, and counted.
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"endless":           {scrape.ReasonTooLarge, scrape.ReasonLimit},
		"gzip-bomb":         {scrape.ReasonTooLarge, scrape.ReasonLimit},
		"cardinality":       {scrape.ReasonLimit, scrape.ReasonTooLarge},
		"huge-labels":       {scrape.ReasonLimit, scrape.ReasonTooLarge},
		"duplicates":        {"duplicate_series"},
		"bad-histogram":     {"invalid_histogram"},
		"redirect":          {scrape.ReasonRedirect},
		"router-duplicates": {"duplicate_series"},
		"router-models":     {"too_many_models", scrape.ReasonLimit},
		"slow-drip":         {scrape.ReasonTimeout, scrape.ReasonCycleDeadline},
		"silent":            {scrape.ReasonTimeout, scrape.ReasonCycleDeadline},
	}
	for pod, reasons := range want {
		if n := count(fams, "gpuscale_adapter_scrape_errors_total", attackerNS, pod, reasons...); n == 0 {
			t.Errorf("hostile %s: no scrape error counted under %v: %v", pod, reasons, byReason(fams, "gpuscale_adapter_scrape_errors_total", attackerNS, pod))
		}
	}
	for _, k := range kinds {
		if r, ok := st.LatestRouter(store.Key{Namespace: attackerNS, Name: k.Name}, now, time.Hour); ok && len(r.Held) > 0 {
			t.Errorf("hostile %s: stored held requests %v", k.Name, r.Held)
		}
	}
	if n := count(fams, "gpuscale_adapter_rejected_values_total", attackerNS, "router-out-of-range", "out_of_range", "not_finite"); n == 0 {
		t.Errorf("hostile router-out-of-range: no rejected value counted: %v", byReason(fams, "gpuscale_adapter_rejected_values_total", attackerNS, "router-out-of-range"))
	}
	if n := count(fams, "gpuscale_adapter_rejected_values_total", attackerNS, "out-of-range", "out_of_range", "not_finite"); n == 0 {
		t.Errorf("hostile out-of-range: no rejected value counted: %v", byReason(fams, "gpuscale_adapter_rejected_values_total", attackerNS, "out-of-range"))
	}

	// The genuine exporter speaks for the pods on its node only; the
	// spoofing tenant for none.
	gpu, ok := st.Latest(store.Key{Namespace: tenantNS, Name: "healthy-00"}, signal.SourceGPU, now, time.Hour)
	if v, _ := gpu.Get(signal.GPUUtilization); !ok || v != 70 {
		t.Errorf("healthy-00 GPU utilization %v (ok=%v), want 70 from the genuine exporter", v, ok)
	}
	for _, name := range []string{"healthy-01", "elsewhere"} {
		if s, ok := st.Latest(store.Key{Namespace: tenantNS, Name: name}, signal.SourceGPU, now, time.Hour); ok {
			v, _ := s.Get(signal.GPUUtilization)
			t.Errorf("%s has GPU utilization %v, which no exporter of its node gave", name, v)
		}
	}
	if n := count(fams, "gpuscale_adapter_gpu_attributions_rejected_total", releaseNS, exp.Name, "foreign_pod"); n == 0 {
		t.Errorf("the exporter's claim on a pod of another node was not counted: %v", byReason(fams, "gpuscale_adapter_gpu_attributions_rejected_total", releaseNS, exp.Name))
	}
}

// watchHeap samples the heap's live and unswept objects until the test
// ends, and returns the highest reading so far.
func watchHeap(t testing.TB) *atomic.Uint64 {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	t.Cleanup(func() { close(done); wg.Wait() })
	return &peak
}

// count sums the samples of family name for the target ns/pod whose
// reason is one of reasons.
func count(fams []*dto.MetricFamily, name, ns, pod string, reasons ...string) float64 {
	total := 0.0
	for reason, n := range byReason(fams, name, ns, pod) {
		if slices.Contains(reasons, reason) {
			total += n
		}
	}
	return total
}

// byReason is a target's non-zero counts of family name by reason.
func byReason(fams []*dto.MetricFamily, name, ns, pod string) map[string]float64 {
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["namespace"] == ns && l["pod"] == pod && m.GetCounter().GetValue() > 0 {
				out[l["reason"]] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}
