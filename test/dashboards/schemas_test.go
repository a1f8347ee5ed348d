package dashboards

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"

	"go.yaml.in/yaml/v3"

	"github.com/gpuscale/gpuscale/pkg/adapter/ingest"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// queryParams are the adapter's PromQL template parameters
// (pkg/adapter/promsource.Params), for the GPU queries.
type queryParams struct{ Namespace, PodRegex, NodeRegex, Window, Quantile string }

func (queryParams) ModelMatch(string) string { return "" }

// defaultQueries reads the adapter's default PromQL templates from
// docs/metrics.md, which pkg/adapter/promsource's TestDocsListDefaults keeps equal
// to the compiled-in ones (this module does without the adapter's
// dependencies).
func defaultQueries(t *testing.T) map[string]map[string]*template.Template {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, "### Default queries")
	start := strings.Index(doc[i:], "```yaml\n") + i + len("```yaml\n")
	end := strings.Index(doc[start:], "```") + start
	var shapes map[string]map[string]string
	if err := yaml.Unmarshal([]byte(doc[start:end]), &shapes); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]*template.Template{}
	for shape, byMetric := range shapes {
		out[shape] = map[string]*template.Template{}
		for metric, text := range byMetric {
			out[shape][metric] = template.Must(template.New(shape + "/" + metric).Parse(text))
		}
	}
	return out
}

func renderQuery(t *testing.T, tmpl *template.Template, p queryParams) string {
	t.Helper()
	var b strings.Builder
	if err := tmpl.Execute(&b, p); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// gpuSources are one GPU node's state (pkg/adapter/ingest/fixtures_test.go) as each
// exporter serves it: gpuscale's in both --dcgm-schema modes, and
// dcgm-exporter 4.8.2 (Hostname), 4.8.4 (hostname, no driver label) and
// 4.10.0 (DCGM 4.7's names and units).
var gpuSources = []struct{ name, file string }{
	{"gpuscale 4.8", "gpuscale-4.8.prom"},
	{"gpuscale 4.10", "gpuscale-4.10.prom"},
	{"dcgm-exporter 4.8.2", "dcgm-exporter-4.8.2.prom"},
	{"dcgm-exporter 4.8.4", "dcgm-exporter-4.8.4.prom"},
	{"dcgm-exporter 4.10.0", "dcgm-exporter-4.10.0.prom"},
}

// loadGPUSource scrapes a source into a fresh storage as Prometheus would,
// every 15 s for 15 minutes, with honor_labels.
func loadGPUSource(t *testing.T, file string, base time.Time) (storage.Storage, *os.File) {
	t.Helper()
	st := teststorage.New(t)
	f, err := os.Open(filepath.Join(repoRoot, "pkg/adapter/ingest/testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	families := parseExposition(t, f)
	extra := map[string]string{"instance": "10.0.0.1:9400", "job": "gpu-exporter"}
	for i := range scrapes + 1 {
		appendFamilies(t, st, families, extra, base.Add(time.Duration(i)*scrapeEvery), float64(i))
	}
	return st, f
}

// evalVector evaluates query at at, as a map from its result's labels
// (metric name dropped) to values.
func evalVector(t *testing.T, engine *promql.Engine, st storage.Queryable, query string, at time.Time) map[string]float64 {
	t.Helper()
	q, err := engine.NewInstantQuery(context.Background(), st, nil, query, at)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatalf("%s: %v", query, res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	out := map[string]float64{}
	for _, s := range v {
		out[s.Metric.DropReserved(func(n string) bool { return n == labels.MetricName }).String()] = s.F
	}
	return out
}

// TestDefaultQueriesEqualAcrossSchemas: the adapter's PromQL defaults give
// every pod and the node the same GPU signals, to 1e-9, whichever exporter
// Prometheus scraped, and the same as the embedded source's ingest of that
// exporter.
func TestDefaultQueriesEqualAcrossSchemas(t *testing.T) {
	queries := defaultQueries(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := base.Add(scrapes * scrapeEvery)
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	type ask struct {
		shape, metric string
		p             queryParams
		pod           store.Key // of the embedded ingest's answer; node when empty
	}
	var asks []ask
	gpuSignals := map[string]signal.Signal{
		"gpu_utilization": signal.GPUUtilization, "gpu_memory_utilization": signal.GPUMemoryUtilization,
		"gpu_memory_used_bytes": signal.GPUMemoryUsedBytes, "gpu_power_watts": signal.GPUPowerWatts,
		"gpu_sm_active": signal.GPUSMActive, "gpu_tensor_active": signal.GPUTensorActive,
	}
	for _, metric := range slices.Sorted(func(yield func(string) bool) {
		for m := range gpuSignals {
			if !yield(m) {
				return
			}
		}
	}) {
		for _, pod := range []store.Key{{Namespace: "llm", Name: "vllm-0"}, {Namespace: "team-a", Name: "nb-a"}, {Namespace: "team-b", Name: "nb-b"}} {
			asks = append(asks, ask{"pods", metric, queryParams{Namespace: pod.Namespace, PodRegex: pod.Name}, pod})
		}
		if queries["nodes"][metric] != nil {
			asks = append(asks, ask{shape: "nodes", metric: metric, p: queryParams{NodeRegex: "gpu-node-1"}})
		}
	}
	reference := map[int]map[string]float64{}
	for _, src := range gpuSources {
		t.Run(src.name, func(t *testing.T) {
			st, f := loadGPUSource(t, src.file, base)
			if _, err := f.Seek(0, 0); err != nil {
				t.Fatal(err)
			}
			pods, node, _, err := ingest.GPU(parseExposition(t, f))
			if err != nil {
				t.Fatal(err)
			}
			for i, a := range asks {
				query := renderQuery(t, queries[a.shape][a.metric], a.p)
				got := evalVector(t, engine, st, query, at)
				if len(got) != 1 {
					t.Errorf("%s %s %v: %d results, want 1: %v", a.shape, a.metric, a.p, len(got), got)
					continue
				}
				var v float64
				for _, x := range got {
					v = x
				}
				sample := node
				if a.pod.Name != "" {
					sample = pods[a.pod]
				}
				want, ok := sample.Get(gpuSignals[a.metric])
				if !ok || !close(v, want) {
					t.Errorf("%s %s %v = %v over PromQL, %v (%v) by the embedded source", a.shape, a.metric, a.p, v, want, ok)
				}
				if ref, ok := reference[i]; ok {
					if !maps1Equal(ref, got) {
						t.Errorf("%s %s %v = %v, %s gives %v", a.shape, a.metric, a.p, got, gpuSources[0].name, ref)
					}
				} else {
					reference[i] = got
				}
			}
		})
	}
}

func close(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// maps1Equal compares results by their labels' node or pod, to 1e-9.
func maps1Equal(want, got map[string]float64) bool {
	key := func(m map[string]float64) (string, float64) {
		for k, v := range m {
			return k, v
		}
		return "", 0
	}
	wk, wv := key(want)
	gk, gv := key(got)
	return wk == gk && close(wv, gv)
}

// TestFleetDashboardOnEverySchema evaluates every panel and variable of
// the GPU fleet dashboard over each exporter's series: every one returns
// data, but for the panels of gpuscale's own series and fields outside
// dcgm-exporter's default collector, which dcgm-exporter does not serve.
func TestFleetDashboardOnEverySchema(t *testing.T) {
	d := loadDashboards(t)["gpu-fleet.json"]
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := base.Add(scrapes * scrapeEvery)
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	// gpuscale's own series, and a field outside dcgm-exporter's
	// default collector.
	notServedByDCGMExporter := []string{"gpuscale_gpu_xid_errors_total", "gpuscale_gpu_up", "DCGM_FI_DEV_POWER_MGMT_LIMIT"}
	for _, src := range gpuSources {
		t.Run(src.name, func(t *testing.T) {
			st, _ := loadGPUSource(t, src.file, base)
			check := func(what, query string) {
				expr, _ := substitute(query, ".+")
				got := evalVector(t, engine, st, expr, at)
				if len(got) > 0 {
					return
				}
				allowed := mayBeEmpty
				if strings.HasPrefix(src.name, "dcgm-exporter") {
					allowed = append(slices.Clone(mayBeEmpty), notServedByDCGMExporter...)
				}
				for _, name := range allowed {
					if strings.Contains(query, name) {
						return
					}
				}
				t.Errorf("%s returns nothing over %s: %s", what, src.name, expr)
			}
			for _, p := range flatten(d.Panels) {
				for _, tg := range p.Targets {
					check(fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr)
				}
			}
			for _, v := range d.Templating.List {
				if v.Type != "query" {
					continue
				}
				q, err := variableQuery(v.Query)
				if err != nil {
					t.Fatal(err)
				}
				check("variable "+v.Name, q)
			}
		})
	}
}
