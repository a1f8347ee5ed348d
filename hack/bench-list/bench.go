package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/localcluster"
	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

const (
	// metricsPort is where every bench pod serves its metrics, on its own
	// loopback pod IP.
	metricsPort = 8000
	// image is none the simulated world runs, so it leaves the pods to
	// this program.
	image    = "gpuscale.io/bench-static-metrics"
	node     = "gpu-node-1"
	appLabel = "bench-llm"
)

// bench creates namespaces of Ready pods, serves their metrics and times
// the API's answer about them.
type bench struct {
	env    *devenv.Env
	client kubernetes.Interface
	log    *slog.Logger
	start  time.Time
	// window is the adapter's history: memory is measured once it is full.
	window time.Duration
	// dir receives the adapter's heap profiles.
	dir string

	// servers serve the pods' metrics (podserver.go).
	servers []*podServer
	// memLimit is the adapter's memory cgroup's limit, 0 if it has none
	// (--adapter-memory-limit).
	memLimit int64
	// accept is the timed lists' Accept header (--accept).
	accept string
	// gap is the time between two timed lists (--list-gap).
	gap time.Duration
	// unscraped creates pods without the scrape annotations: with
	// --source=promql one exposition carries their series, and no one
	// scrapes the pods.
	unscraped bool
}

func newBench(env *devenv.Env, log *slog.Logger, window time.Duration, dir string) (*bench, error) {
	cfg := env.Cluster.RESTConfig()
	// The harness, not the client, decides the pace: creating thousands
	// of pods and timing back-to-back requests.
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &bench{env: env, client: client, log: log, start: time.Now(), window: window, dir: dir}, nil
}

func (b *bench) close() {
	for _, s := range b.servers {
		s.stop()
	}
	b.servers = nil
}

// result is what one namespace size measured.
type result struct {
	Pods, Requests int
	Metric         string
	// Accept is the lists' encoding, as the client asked for it.
	Accept string
	// Gap is the time between two timed lists (0: back to back).
	Gap       time.Duration
	Latencies []time.Duration // sorted
	// FloorLatencies time the same requests with a selector matching no
	// pod, after the lists: the path's own latency on this machine, under
	// the same scraping, with nothing to read or encode. Sorted.
	FloorLatencies    []time.Duration
	AnswerBytes       int
	AdapterCPUPerList time.Duration
	// APIServerCPUPerList is the kube-apiserver's CPU a list beyond its
	// rate in the 10 s before (APIServerIdleCPU, cores): the aggregator's
	// relay of the answer, its filters and its collector.
	APIServerCPUPerList time.Duration
	APIServerIdleCPU    float64
	// PodServersCPU is the pod servers' CPU, in cores, in the same 10 s.
	PodServersCPU float64
	// DuringScrapes and BetweenScrapes are the timed lists' latencies,
	// sorted, split by whether the pod servers used any CPU while the list
	// ran (their /proc/PID/stat times, in 10 ms ticks): whether it met the
	// scrape cycle's burst.
	DuringScrapes, BetweenScrapes []time.Duration
	// MachineBusy is the share of the machine's CPU time that was busy
	// while the timed lists ran (/proc/stat): near 1, a list waits for a
	// core.
	MachineBusy float64
	// AdapterIdleCPU is the adapter's CPU, in cores, while it only scrapes.
	AdapterIdleCPU float64
	// ScrapesPerSec is how many scrapes the adapter finished a second in
	// the same 10 s, and CPUPerScrape its CPU over them: a starved adapter
	// scrapes less often than asked, and its cores then understate what
	// the interval costs.
	ScrapesPerSec float64
	CPUPerScrape  time.Duration
	AdapterRSSMiB float64
	// AdapterRSSFileMiB is the part of RSS that is the binary's pages.
	AdapterRSSFileMiB float64
	// AdapterRSSProfiledMiB and its file-backed part are the same after the
	// bench's CPU and heap profiles of the adapter.
	AdapterRSSProfiledMiB, AdapterRSSProfiledFileMiB float64
	// ProfiledLists is how many lists the CPU profile covers: a
	// function's seconds in it over this are its CPU per list.
	ProfiledLists int
	// AdapterHeapMiB is the Go heap in use, from the adapter's /metrics.
	AdapterHeapMiB float64
	// ClientSlow and AdapterSlow count the timed lists over each of
	// slowBounds: the client's from Latencies, the adapter's from its own
	// apiserver_request_duration_seconds, the time in its handler chain
	// without the aggregator's relay or the client's read. A tail the
	// client sees and the adapter does not is outside the adapter.
	ClientSlow, AdapterSlow [len(slowBounds)]int
	PodsReady, FirstFull    time.Duration
}

// slowBounds are bounds of the API server's request-duration buckets
// (k8s.io/apiserver's apiserver_request_duration_seconds): lists over them
// are counted on both sides.
var slowBounds = [...]float64{0.025, 0.05, 0.1}

// countOver is how many of latencies exceed each of slowBounds.
func countOver(latencies []time.Duration) (n [len(slowBounds)]int) {
	for _, l := range latencies {
		for i, b := range slowBounds {
			if l.Seconds() > b {
				n[i]++
			}
		}
	}
	return n
}

// histogramOver is how many of h's observations exceed each of
// slowBounds, each of which must be one of h's bounds.
func histogramOver(h *histogram.Histogram) (n [len(slowBounds)]int, err error) {
	for i, b := range slowBounds {
		j := slices.Index(h.Bounds, b)
		if j < 0 {
			return n, fmt.Errorf("no bucket bound %v in %v", b, h.Bounds)
		}
		n[i] = int(math.Round(h.Count - h.Counts[j]))
	}
	return n, nil
}

func (r result) quantile(q float64) time.Duration {
	return quantileOf(r.Latencies, q)
}

// quantileOf is the q-quantile of sorted latencies, 0 of none.
func quantileOf(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func (r result) line() string {
	return fmt.Sprintf("%d pods %s (%s, %s lists): median %v p90 %v p99 %v max %v; %d bytes; adapter CPU %v per list, kube-apiserver's %v (%.2f cores scraping: %.0f scrapes/s, %v CPU each), RSS %.0f MiB (%.0f MiB file; %.0f and %.0f after profiling), heap %.0f MiB; %d lists in the CPU profile; floor (no pod selected) median %v p99 %v; lists over %s, client/adapter: %s; machine busy %.0f%% during the lists, pod servers %.2f cores; %s; pods Ready after %v, full list after %v",
		r.Pods, r.Metric, encodingName(r.Accept), requestsText(r), r.quantile(0.5).Round(time.Microsecond*100), r.quantile(0.9).Round(time.Microsecond*100),
		r.quantile(0.99).Round(time.Microsecond*100), r.Latencies[len(r.Latencies)-1].Round(time.Microsecond*100),
		r.AnswerBytes, r.AdapterCPUPerList.Round(time.Microsecond*100), r.APIServerCPUPerList.Round(time.Microsecond*100), r.AdapterIdleCPU, r.ScrapesPerSec, r.CPUPerScrape.Round(time.Microsecond), r.AdapterRSSMiB, r.AdapterRSSFileMiB, r.AdapterRSSProfiledMiB, r.AdapterRSSProfiledFileMiB, r.AdapterHeapMiB, r.ProfiledLists,
		quantileOf(r.FloorLatencies, 0.5).Round(time.Microsecond*100), quantileOf(r.FloorLatencies, 0.99).Round(time.Microsecond*100), boundsText(), slowText(r), 100*r.MachineBusy, r.PodServersCPU, burstText(r), r.PodsReady.Round(time.Second), r.FirstFull.Round(time.Second))
}

// burstText is the lists that met a scrape burst against those that did
// not: how many, their median and p90.
func burstText(r result) string {
	group := func(l []time.Duration) string {
		return fmt.Sprintf("%d, %v / %v", len(l), quantileOf(l, 0.5).Round(100*time.Microsecond), quantileOf(l, 0.9).Round(100*time.Microsecond))
	}
	return "during scrapes " + group(r.DuringScrapes) + ", between " + group(r.BetweenScrapes)
}

// measure creates a namespace of n Ready pods, serves their metrics, and
// times requests lists of each metric.
func (b *bench) measure(ctx context.Context, n int, metrics []string, requests int) ([]result, error) {
	ns := fmt.Sprintf("list-%d", n)
	if _, err := b.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	created := time.Now()
	if err := b.createPods(ctx, ns, n); err != nil {
		return nil, err
	}
	pods, err := b.waitReady(ctx, ns, n)
	if err != nil {
		return nil, err
	}
	ready := time.Since(created)
	b.log.Info("pods Ready", "namespace", ns, "pods", n, "after", ready)
	if err := b.serve(ctx, pods); err != nil {
		return nil, err
	}
	serving := time.Now()
	full := map[string]time.Duration{}
	for _, metric := range metrics {
		if err := b.waitFull(ctx, ns, metric, "app="+appLabel, n); err != nil {
			return nil, err
		}
		full[metric] = time.Since(serving)
		b.log.Info("full list served", "namespace", ns, "metric", metric, "after", full[metric])
	}
	// Steady state: every pod's window full of samples.
	b.log.Info("waiting for the adapter's window to fill", "window", b.window)
	select {
	case <-time.After(time.Until(serving.Add(b.window))):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var out []result
	for _, metric := range metrics {
		r := result{Pods: n, Requests: requests, Metric: metric, Accept: b.accept, PodsReady: ready, FirstFull: full[metric]}
		if err := b.time(ctx, ns, &r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// time runs r.Requests sequential lists after 5 untimed ones (the
// connection, the adapter's caches), recording their latencies and the
// adapter's CPU time and memory.
func (b *bench) time(ctx context.Context, ns string, r *result) error {
	for range 5 {
		if _, err := b.listAs(ctx, r.Accept, ns, r.Metric, "app="+appLabel); err != nil {
			return err
		}
	}
	pid, apiPID := b.env.AdapterPID(), b.env.Cluster.PID("kube-apiserver")
	idle, err := b.measureIdle(ctx, r, pid, apiPID)
	if err != nil {
		return err
	}
	// The adapter's /metrics are read outside the CPU window, so that
	// serving them is not counted as the lists'.
	beforeMetrics, err := b.adapterMetrics(ctx)
	if err != nil {
		return err
	}
	before, err := readCounters(pid, apiPID)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := b.timeLists(ctx, ns, r); err != nil {
		return err
	}
	after, err := readCounters(pid, apiPID)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	afterMetrics, err := b.adapterMetrics(ctx)
	if err != nil {
		return err
	}
	r.MachineBusy = after.machine.since(before.machine)
	scraping := time.Duration(idle * float64(elapsed))
	r.AdapterCPUPerList = max(0, after.adapterCPU-before.adapterCPU-scraping) / time.Duration(r.Requests)
	r.APIServerCPUPerList = max(0, after.apiCPU-before.apiCPU-time.Duration(r.APIServerIdleCPU*float64(elapsed))) / time.Duration(r.Requests)
	if err := countSlow(beforeMetrics, afterMetrics, r); err != nil {
		return err
	}
	if err := b.timeFloor(ctx, ns, r); err != nil {
		return err
	}
	// Resident memory is read before the bench profiles the adapter: writing
	// a profile symbolizes every function it saw, which pages in much of the
	// binary's line tables, as nothing in service does. The figure after the
	// profiles is kept beside it.
	if r.AdapterRSSMiB, r.AdapterRSSFileMiB, err = rssMiB(pid); err != nil {
		return err
	}
	if err := b.profileLists(ctx, ns, r); err != nil {
		return err
	}
	slices.Sort(r.Latencies)
	if r.AdapterRSSProfiledMiB, r.AdapterRSSProfiledFileMiB, err = rssMiB(pid); err != nil {
		return err
	}
	if r.AdapterHeapMiB, err = b.adapterHeapMiB(ctx); err != nil {
		return err
	}
	return b.saveHeapProfile(ctx, fmt.Sprintf("heap-%d-%s.pb.gz", r.Pods, r.Metric))
}

// measureIdle measures, over 10 s while the adapter only scrapes, the
// rates to subtract from the timed lists' CPU: the adapter's (returned; at
// a short scrape interval the scraping is most of its CPU) and the
// kube-apiserver's, which relays every answer. It also measures the pod
// servers' CPU (they stand for the targets, which a cluster runs on other
// machines, and share this one's cores with the lists) and the scrapes
// finished, and saves a CPU profile of the same 10 s: where the scraping
// goes.
func (b *bench) measureIdle(ctx context.Context, r *result, pid, apiPID int) (float64, error) {
	const d = 10 * time.Second
	profile := make(chan error, 1)
	go func() {
		profile <- b.saveProfile(ctx, fmt.Sprintf("cpu-scraping-%d-%s.pb.gz", r.Pods, r.Metric), d)
	}()
	scrapes0, err := b.adapterScrapes(ctx)
	if err != nil {
		return 0, errors.Join(err, <-profile)
	}
	apiIdle, serversIdle := make(chan error, 1), make(chan error, 1)
	go func() {
		var err error
		r.APIServerIdleCPU, err = cpuRate(ctx, apiPID, d)
		apiIdle <- err
	}()
	go func() {
		var err error
		r.PodServersCPU, err = b.podServersCPU(ctx, d)
		serversIdle <- err
	}()
	t0 := time.Now()
	idle, err := cpuRate(ctx, pid, d)
	if err := errors.Join(err, <-profile, <-apiIdle, <-serversIdle); err != nil {
		return 0, err
	}
	scrapes1, err := b.adapterScrapes(ctx)
	if err != nil {
		return 0, err
	}
	r.AdapterIdleCPU = idle
	if scrapes := scrapes1 - scrapes0; scrapes > 0 {
		wall := time.Since(t0)
		r.ScrapesPerSec = scrapes / wall.Seconds()
		r.CPUPerScrape = time.Duration(idle * float64(wall) / scrapes)
	}
	return idle, nil
}

// counters are the CPU times the bench reads just before and just after
// the timed lists.
type counters struct {
	adapterCPU, apiCPU time.Duration
	machine            machineTicks
}

func readCounters(pid, apiPID int) (c counters, err error) {
	if c.adapterCPU, err = processCPU(pid); err != nil {
		return c, err
	}
	if c.apiCPU, err = processCPU(apiPID); err != nil {
		return c, err
	}
	c.machine, err = machineBusy()
	return c, err
}

// timeLists runs the timed lists, b.gap apart, recording each one's
// latency, and whether it met a scrape cycle's burst.
func (b *bench) timeLists(ctx context.Context, ns string, r *result) error {
	for i := range r.Requests {
		if i > 0 {
			if err := sleep(ctx, b.gap); err != nil {
				return err
			}
		}
		served0, err := b.podServersTime()
		if err != nil {
			return err
		}
		t := time.Now()
		body, err := b.listAs(ctx, r.Accept, ns, r.Metric, "app="+appLabel)
		latency := time.Since(t)
		r.Latencies = append(r.Latencies, latency)
		if err != nil {
			return err
		}
		r.AnswerBytes = len(body)
		served1, err := b.podServersTime()
		if err != nil {
			return err
		}
		// The pod servers work only while they are scraped: CPU time they
		// gained during a list puts it inside a scrape cycle's burst.
		if served1 > served0 {
			r.DuringScrapes = append(r.DuringScrapes, latency)
		} else {
			r.BetweenScrapes = append(r.BetweenScrapes, latency)
		}
	}
	slices.Sort(r.DuringScrapes)
	slices.Sort(r.BetweenScrapes)
	r.Gap = b.gap
	return nil
}

// countSlow counts the timed lists over slowBounds at the client and in
// the adapter's own request durations between two of its /metrics.
func countSlow(before, after map[string]*dto.MetricFamily, r *result) error {
	lists, err := windowOf(before, after, "apiserver_request_duration_seconds", map[string]string{"group": "custom.metrics.k8s.io", "component": "custom-metrics"})
	if err != nil {
		return fmt.Errorf("adapter /metrics: the lists' durations: %w", err)
	}
	if lists == nil {
		return fmt.Errorf("adapter /metrics: no custom.metrics.k8s.io request in apiserver_request_duration_seconds: %s", labelSets(after["apiserver_request_duration_seconds"]))
	}
	if lists.Count != float64(r.Requests) {
		return fmt.Errorf("adapter /metrics: %v lists timed, %d sent", lists.Count, r.Requests)
	}
	if r.AdapterSlow, err = histogramOver(lists); err != nil {
		return fmt.Errorf("adapter /metrics: apiserver_request_duration_seconds: %w", err)
	}
	r.ClientSlow = countOver(r.Latencies)
	return nil
}

// timeFloor times as many requests down the same path, through the
// aggregator and the adapter's filters, whose selector matches no pod (the
// adapter answers NotFound: no pod has the metric).
func (b *bench) timeFloor(ctx context.Context, ns string, r *result) error {
	for range r.Requests {
		t := time.Now()
		if _, err := b.listAs(ctx, r.Accept, ns, r.Metric, "app="+appLabel+"-none"); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("floor: %w", err)
		}
		r.FloorLatencies = append(r.FloorLatencies, time.Since(t))
	}
	slices.Sort(r.FloorLatencies)
	return nil
}

// profileLists saves a CPU profile of the adapter over 10 s of back-to-back
// untimed lists, after the timed ones (profiling would slow those): where a
// list's CPU goes. Scraping runs beside them and is in the profile too.
func (b *bench) profileLists(ctx context.Context, ns string, r *result) error {
	const d = 10 * time.Second
	profile := make(chan error, 1)
	go func() {
		profile <- b.saveProfile(ctx, fmt.Sprintf("cpu-lists-%d-%s.pb.gz", r.Pods, r.Metric), d)
	}()
	for end := time.Now().Add(d); time.Now().Before(end); r.ProfiledLists++ {
		if _, err := b.listAs(ctx, r.Accept, ns, r.Metric, "app="+appLabel); err != nil {
			return errors.Join(err, <-profile)
		}
	}
	return <-profile
}

// saveHeapProfile writes what holds the adapter's heap, for `go tool
// pprof`, to name in the output directory, and where the rest of its
// resident memory is (the MemStats that close the text profile) beside it.
func (b *bench) saveHeapProfile(ctx context.Context, name string) error {
	prof, err := b.adapterGet(ctx, "/debug/pprof/heap")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.dir, name), prof, 0o644); err != nil {
		return err
	}
	text, err := b.adapterGet(ctx, "/debug/pprof/heap?debug=1")
	if err != nil {
		return err
	}
	_, stats, _ := bytes.Cut(text, []byte("\n# runtime.MemStats\n"))
	return os.WriteFile(filepath.Join(b.dir, strings.TrimSuffix(name, ".pb.gz")+".memstats.txt"), stats, 0o644)
}

// adapterGet fetches a path of the adapter's own server as the cluster's
// admin (the adapter delegates the check to the kube-apiserver).
func (b *bench) adapterGet(ctx context.Context, path string) ([]byte, error) {
	cfg := b.env.Cluster.RESTConfig()
	cfg.Host = b.env.AdapterURL()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("adapter %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("adapter %s: %s: %w", path, resp.Status, err)
	}
	return body, nil
}

// saveProfile writes a CPU profile of the adapter over d to the output
// directory.
func (b *bench) saveProfile(ctx context.Context, name string, d time.Duration) error {
	prof, err := b.adapterGet(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.dir, name), prof, 0o644)
}

// adapterScrapes is how many scrapes the adapter has finished, from its
// own /metrics.
func (b *bench) adapterScrapes(ctx context.Context) (float64, error) {
	fams, err := b.adapterMetrics(ctx)
	if err != nil {
		return 0, err
	}
	h, err := histogramOf(fams, "gpuscale_adapter_scrape_duration_seconds", nil)
	if err != nil || h == nil {
		return 0, fmt.Errorf("adapter /metrics: no gpuscale_adapter_scrape_duration_seconds: %w", err)
	}
	return h.Count, nil
}

// labelSets is f's label sets, for an error.
func labelSets(f *dto.MetricFamily) string {
	var sets []string
	for _, m := range f.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		sets = append(sets, "{"+strings.Join(ls, ",")+"}")
	}
	return strings.Join(sets, " ")
}

// adapterMetrics is the adapter's own /metrics, parsed.
func (b *bench) adapterMetrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	raw, err := b.adapterGet(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	fams, err := parseMetrics(raw)
	if err != nil {
		return nil, fmt.Errorf("adapter /metrics: %w", err)
	}
	return fams, nil
}

// adapterHeapMiB reads go_memstats_heap_inuse_bytes from the adapter's own
// /metrics.
func (b *bench) adapterHeapMiB(ctx context.Context) (float64, error) {
	body, err := b.adapterGet(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_inuse_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f / (1 << 20), err
		}
	}
	return 0, errors.New("adapter /metrics: no go_memstats_heap_inuse_bytes")
}

func (b *bench) createPods(ctx context.Context, ns string, n int) error {
	names := make(chan int)
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range names {
				pod := benchPod(ns, i)
				if b.unscraped {
					pod.Annotations = nil
				}
				if _, err := b.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
	for i := 0; i < n && err == nil; i++ {
		select {
		case names <- i:
		case err = <-errs:
		}
	}
	close(names)
	wg.Wait()
	close(errs)
	return errors.Join(err, <-errs)
}

func benchPod(ns string, i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("llm-%05d", i), Namespace: ns,
			Labels: map[string]string{"app": appLabel},
			Annotations: map[string]string{discovery.AnnotationScrape: "true",
				discovery.AnnotationPort: strconv.Itoa(metricsPort)},
		},
		Spec: corev1.PodSpec{
			// Placed directly, as the scheduler would: kwok does not limit
			// a node's pods.
			NodeName:    node,
			Tolerations: []corev1.Toleration{localcluster.GPUToleration()},
			Containers:  []corev1.Container{{Name: "server", Image: image}},
		},
	}
}

// waitReady waits until n pods of ns are Ready with an IP and returns them.
func (b *bench) waitReady(ctx context.Context, ns string, n int) ([]corev1.Pod, error) {
	var ready []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := b.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready = ready[:0]
		for _, p := range list.Items {
			if p.Status.PodIP != "" && isReady(&p) {
				ready = append(ready, p)
			}
		}
		return len(ready) == n, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%d of %d pods Ready: %w", len(ready), n, err)
	}
	return ready, nil
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// serve answers every pod's scrapes with a vLLM exposition: gauges fixed
// per pod, a TTFT histogram whose counts grow with time, so that TTFT
// quantiles have an increase to work on, and the rest of a real vLLM's
// families (inferencesim.BenchPodHandler), from pod servers.
func (b *bench) serve(ctx context.Context, pods []corev1.Pod) error {
	served := make([]servedPod, len(pods))
	for i := range pods {
		served[i] = servedPod{Addr: podAddr(pods[i].Status.PodIP), Index: i}
	}
	return b.servePods(ctx, served)
}

// waitFull waits until the list of the pods sel selects names all n.
func (b *bench) waitFull(ctx context.Context, ns, metric, sel string, n int) error {
	got := 0
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err := b.list(ctx, ns, metric, sel)
		if err != nil {
			return false, nil // NotFound until the first scrape lands
		}
		var l struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			return false, err
		}
		got = len(l.Items)
		return got == n, nil
	})
	if err != nil {
		return fmt.Errorf("list of %s names %d of %d pods: %w", metric, got, n, err)
	}
	return nil
}

// list is the HPA's request for a Pods metric of the pods sel selects.
func (b *bench) list(ctx context.Context, ns, metric, sel string) ([]byte, error) {
	return b.listAs(ctx, acceptJSON, ns, metric, sel)
}

// The encodings a metrics API client may ask for. kube-controller-manager's
// clients, the HPA controller's among them, ask for protobuf
// (--kube-api-content-type's default); kubectl get --raw and most other
// clients for JSON.
const (
	acceptProtobuf = "application/vnd.kubernetes.protobuf"
	acceptJSON     = "application/json"
)

// protobufMagic opens every object in Kubernetes' protobuf encoding.
var protobufMagic = []byte("k8s\x00")

// listAs lists in the encoding accept names, and checks that the answer
// is in it: a server that fell back to another would time the wrong thing.
func (b *bench) listAs(ctx context.Context, accept, ns, metric, sel string) ([]byte, error) {
	return b.listAt(ctx, "v1beta2", accept, ns, metric, sel)
}

// errWrongEncoding is an answer in another encoding than the one asked for.
var errWrongEncoding = errors.New("answered in another encoding")

// listAt is listAs at a version of custom.metrics.k8s.io: with
// --source=promql, v1beta1 is prometheus-adapter's.
func (b *bench) listAt(ctx context.Context, version, accept, ns, metric, sel string) ([]byte, error) {
	body, err := b.client.CoreV1().RESTClient().Get().
		AbsPath("/apis/custom.metrics.k8s.io", version, "namespaces", ns, "pods", "*", metric).
		Param("labelSelector", sel).SetHeader("Accept", accept).DoRaw(ctx)
	if err != nil {
		return body, err
	}
	if isProto := bytes.HasPrefix(body, protobufMagic); isProto != (accept == acceptProtobuf) {
		return nil, fmt.Errorf("%s: asked for %s, %w: %q at the start", version, accept, errWrongEncoding, body[:min(len(body), 8)])
	}
	return body, nil
}

// processCPU is a process's user and system CPU time so far.
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command name; utime and stime are
	// the 14th and 15th fields of the whole line, in clock ticks (100/s).
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(u+s) * 10 * time.Millisecond, nil
}

// cpuRate is the CPU, in cores, a process uses over d.
func cpuRate(ctx context.Context, pid int, d time.Duration) (float64, error) {
	return rateOf(ctx, d, func() (time.Duration, error) { return processCPU(pid) })
}

// podServersCPU is the pod servers' CPU together, in cores, over d.
func (b *bench) podServersCPU(ctx context.Context, d time.Duration) (float64, error) {
	return rateOf(ctx, d, b.podServersTime)
}

// podServersTime is the pod servers' CPU time together so far.
func (b *bench) podServersTime() (time.Duration, error) {
	var sum time.Duration
	for _, s := range b.servers {
		c, err := processCPU(s.cmd.Process.Pid)
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// rateOf is how fast cpu, a CPU time so far, grows over d, in cores.
func rateOf(ctx context.Context, d time.Duration, cpu func() (time.Duration, error)) (float64, error) {
	c0, err := cpu()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := sleep(ctx, d); err != nil {
		return 0, err
	}
	c1, err := cpu()
	return float64(c1-c0) / float64(time.Since(t0)), err
}

// machineTicks are the machine's CPU times so far, in clock ticks, from the
// first line of /proc/stat.
type machineTicks struct{ busy, total uint64 }

// since is the busy share of the CPU time between t0 and t.
func (t machineTicks) since(t0 machineTicks) float64 {
	if t.total <= t0.total {
		return 0
	}
	return float64(t.busy-t0.busy) / float64(t.total-t0.total)
}

func machineBusy() (machineTicks, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTicks{}, err
	}
	return parseMachineTicks(raw)
}

// parseMachineTicks reads /proc/stat's "cpu" line: user nice system idle
// iowait irq softirq steal ...; idle and iowait are not busy.
func parseMachineTicks(raw []byte) (machineTicks, error) {
	line, _, _ := bytes.Cut(raw, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 9 || fields[0] != "cpu" {
		return machineTicks{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var t machineTicks
	for i, f := range fields[1:9] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return machineTicks{}, fmt.Errorf("/proc/stat: %w", err)
		}
		t.total += v
		if i != 3 && i != 4 {
			t.busy += v
		}
	}
	return t, nil
}

// rssMiB is a process's resident memory, and the part of it that is the
// binary's pages.
func rssMiB(pid int) (total, file float64, err error) {
	if total, err = statusMiB(pid, "VmRSS"); err != nil {
		return 0, 0, err
	}
	file, err = statusMiB(pid, "RssFile")
	return total, file, err
}

// statusMiB reads a size field of /proc/PID/status: VmRSS, or its parts
// RssAnon (what the Go runtime holds) and RssFile (the binary's pages).
func statusMiB(pid int, field string) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// encodingName is an Accept header's short name in the report.
func encodingName(accept string) string {
	if accept == acceptProtobuf {
		return "protobuf"
	}
	return "JSON"
}

// markdown is the report: one row per size.
func markdown(rs []result, interval time.Duration) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# List latency through the aggregation layer\n\n`GET .../namespaces/NS/pods/*/METRIC?labelSelector=app=%s`, sequential, one kept-alive HTTP/2 connection to a real kube-apiserver; the adapter scrapes every pod itself every %v.\n\n", appLabel, interval)
	fmt.Fprintf(&sb, "| pods | metric | encoding | requests | median | p90 | p99 | max | answer | adapter CPU per list | kube-apiserver CPU per list | adapter CPU scraping | scrapes/s, CPU each | adapter RSS (file-backed) | RSS after profiling (file-backed) | adapter heap in use | floor: no pod selected, median / p99 | lists over %s: client / adapter | machine busy during the lists | pod servers' CPU | lists during scrapes / between: how many, median / p90 | pods Ready after | full list after |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", boundsText())
	for _, r := range rs {
		fmt.Fprintf(&sb, "| %d | %s | %s | %s | %v | %v | %v | %v | %.2f MB | %v | %v | %.2f cores | %.0f, %v | %.0f MiB (%.0f) | %.0f MiB (%.0f) | %.0f MiB | %v / %v | %s | %.0f%% | %.2f cores | %s | %v | %v |\n", r.Pods, r.Metric, encodingName(r.Accept), requestsText(r),
			r.quantile(0.5).Round(100*time.Microsecond), r.quantile(0.9).Round(100*time.Microsecond), r.quantile(0.99).Round(100*time.Microsecond),
			r.Latencies[len(r.Latencies)-1].Round(100*time.Microsecond), float64(r.AnswerBytes)/1e6, r.AdapterCPUPerList.Round(100*time.Microsecond), r.APIServerCPUPerList.Round(100*time.Microsecond), r.AdapterIdleCPU,
			r.ScrapesPerSec, r.CPUPerScrape.Round(time.Microsecond), r.AdapterRSSMiB, r.AdapterRSSFileMiB, r.AdapterRSSProfiledMiB, r.AdapterRSSProfiledFileMiB, r.AdapterHeapMiB,
			quantileOf(r.FloorLatencies, 0.5).Round(100*time.Microsecond), quantileOf(r.FloorLatencies, 0.99).Round(100*time.Microsecond), slowText(r), 100*r.MachineBusy, r.PodServersCPU, burstText(r), r.PodsReady.Round(time.Second), r.FirstFull.Round(time.Second))
	}
	return sb.String()
}

// requestsText is how many lists were timed, and how far apart if not
// back to back.
func requestsText(r result) string {
	if r.Gap <= 0 {
		return strconv.Itoa(r.Requests)
	}
	return fmt.Sprintf("%d, %v apart", r.Requests, r.Gap)
}

// boundsText is slowBounds for a column's title: "25 / 50 / 100 ms".
func boundsText() string {
	parts := make([]string, len(slowBounds))
	for i, b := range slowBounds {
		parts[i] = strconv.FormatFloat(b*1000, 'f', -1, 64)
	}
	return strings.Join(parts, " / ") + " ms"
}

// slowText is r's counts over slowBounds, the client's then the adapter's
// at each bound: "40/31, 12/3, 2/0".
func slowText(r result) string {
	parts := make([]string, len(slowBounds))
	for i := range slowBounds {
		parts[i] = fmt.Sprintf("%d/%d", r.ClientSlow[i], r.AdapterSlow[i])
	}
	return strings.Join(parts, ", ")
}
