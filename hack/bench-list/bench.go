package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
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
