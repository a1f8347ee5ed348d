package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"sigs.k8s.io/yaml"
)

// The series --source=promql serves for every pod, under the names the
// exporters give them, and the metric each adapter serves from them. Both
// adapters serve them under gpuscale's names, so that one request path
// differs only in the API version: gpuscale's defaults read the series
// (pkg/adapter/promsource/defaults.go), prometheus-adapter a rule of the
// form docs/migrating-from-prometheus-adapter.md gives.
var promqlSeries = map[string]struct {
	// Series is the exporter's name; Agg how a rule aggregates a pod's
	// series, as gpuscale's default query does.
	Series, Agg string
}{
	"gpu_utilization":       {Series: "DCGM_FI_DEV_GPU_UTIL", Agg: "avg"},
	"inference_queue_depth": {Series: "vllm:num_requests_waiting", Agg: "sum"},
}

// expoPod is a pod whose series the exposition carries.
type expoPod struct {
	Namespace, Name, Node string
	// Index makes its values and its GPU's identity its own.
	Index int
}

// The values at second tick of pod i: they differ between pods and from
// one scrape to the next, so no answer is the one before it.
func gpuUtil(i int, tick int64) int64    { return (int64(i)*37 + tick*11) % 101 }
func queueDepth(i int, tick int64) int64 { return (int64(i)*7 + tick*3) % 17 }

// appendExposition appends, in the text format, what dcgm-exporter (its
// GPU utilization, with its labels, the pod's namespace and pod among
// them) and vLLM (its queue) expose for pods at tick, every series
// labelled with its pod's namespace and pod as the adapters' queries
// select them. One exporter carries them all, as in the issue's
// measurement: Prometheus scrapes it with honor_labels.
func appendExposition(b []byte, pods []expoPod, tick int64) []byte {
	b = append(b, "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"...)
	for _, p := range pods {
		b = append(b, `DCGM_FI_DEV_GPU_UTIL{gpu="`...)
		b = strconv.AppendInt(b, int64(p.Index%8), 10)
		b = fmt.Appendf(b, `",UUID="GPU-6f0c7a1e-0000-4000-8000-%012d",pci_bus_id="00000000:%02X:00.0",device="nvidia%d"`, p.Index, 0x18+p.Index%8, p.Index%8)
		b = append(b, `,modelName="NVIDIA H100 80GB HBM3",Hostname="`...)
		b = append(b, p.Node...)
		b = append(b, `",DCGM_FI_DRIVER_VERSION="550.54.15",container="vllm",namespace="`...)
		b = appendPodLabels(b, p)
		b = strconv.AppendInt(b, gpuUtil(p.Index, tick), 10)
		b = append(b, '\n')
	}
	b = append(b, "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n# TYPE vllm:num_requests_waiting gauge\n"...)
	for _, p := range pods {
		b = append(b, `vllm:num_requests_waiting{engine="0",model_name="bench-model",namespace="`...)
		b = appendPodLabels(b, p)
		b = strconv.AppendInt(b, queueDepth(p.Index, tick), 10)
		b = append(b, '\n')
	}
	return b
}

// appendPodLabels closes a series' labels with its pod's: namespace's
// value (its opening quote written), pod, and the space before the value.
// Kubernetes names need no escaping.
func appendPodLabels(b []byte, p expoPod) []byte {
	b = append(b, p.Namespace...)
	b = append(b, `",pod="`...)
	b = append(b, p.Name...)
	return append(b, `"} `...)
}

// exposition serves appendExposition of its pods on one loopback address.
type exposition struct {
	addr string
	srv  *http.Server
	log  *slog.Logger

	mu   sync.Mutex
	pods []expoPod
	buf  []byte
}

func startExposition(log *slog.Logger) (*exposition, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("exposition: %w", err)
	}
	e := &exposition{addr: l.Addr().String(), log: log}
	e.srv = &http.Server{Handler: http.HandlerFunc(e.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := e.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("exposition", "err", err)
		}
	}()
	return e, nil
}

// add makes pods part of every later scrape.
func (e *exposition) add(pods []expoPod) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pods = append(e.pods, pods...)
}

func (e *exposition) serveHTTP(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.buf = appendExposition(e.buf[:0], e.pods, time.Now().Unix())
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(e.buf)))
	_, _ = w.Write(e.buf)
}

func (e *exposition) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
}

// The rules file of prometheus-adapter v0.12.0 (its pkg/config), as much
// of it as the rules here use.
type paConfig struct {
	Rules []paRule `json:"rules"`
}

type paRule struct {
	SeriesQuery  string      `json:"seriesQuery"`
	Resources    paResources `json:"resources"`
	Name         paName      `json:"name"`
	MetricsQuery string      `json:"metricsQuery"`
}

type paResources struct {
	Overrides map[string]paGroupResource `json:"overrides"`
}

type paGroupResource struct {
	Resource string `json:"resource"`
}

type paName struct {
	Matches string `json:"matches"`
	As      string `json:"as"`
}

// paRules renders prometheus-adapter's rules serving metrics, each from
// its series (promqlSeries) per pod, in the usual form: the series'
// namespace and pod labels name the resources, the query aggregates a
// pod's series as gpuscale's default does.
func paRules(metrics []string) ([]byte, error) {
	var cfg paConfig
	for _, m := range metrics {
		s, ok := promqlSeries[m]
		if !ok {
			return nil, fmt.Errorf("no prometheus-adapter rule for %q; --source=promql serves %v", m, promqlMetricNames())
		}
		cfg.Rules = append(cfg.Rules, paRule{
			SeriesQuery: s.Series + `{namespace!="",pod!=""}`,
			Resources: paResources{Overrides: map[string]paGroupResource{
				"namespace": {Resource: "namespace"}, "pod": {Resource: "pod"}}},
			Name:         paName{Matches: "^" + s.Series + "$", As: m},
			MetricsQuery: s.Agg + "(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
		})
	}
	return yaml.Marshal(cfg)
}

// promqlMetricNames are the metrics --source=promql can time, sorted.
func promqlMetricNames() []string { return slices.Sorted(maps.Keys(promqlSeries)) }
