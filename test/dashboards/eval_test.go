package dashboards

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"

	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

const (
	scrapeEvery = 15 * time.Second
	scrapes     = 60 // 15 minutes of data
)

// mayBeEmpty are metric names the data below cannot hold, and the queries
// that filter down to a state it does not have: their queries may return
// nothing.
var mayBeEmpty = []string{
	"vllm:gpu_cache_usage_perc", // vLLM before v0.10; the simulator speaks the current name
	"gpuscale_gpu_up{",          // "== 0": every fixture GPU is readable
}

// TestDashboardsReturnData evaluates every query of the GPU fleet and
// inference SLO dashboards in Prometheus's engine over what gpuscale's
// exporter (its golden exposition) and simulated vLLM and SGLang servers
// really expose, with the labels Prometheus's Kubernetes discovery adds.
// Every query must return a series: a renamed or misspelt label, which the
// metric-name check cannot see, empties a panel and fails here.
func TestDashboardsReturnData(t *testing.T) {
	st := teststorage.New(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	appendExporter(t, st, base)
	appendInferenceServer(t, st, base, inferencesim.VLLM, "vllm-0")
	appendInferenceServer(t, st, base, inferencesim.SGLang, "sglang-0")
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	at := base.Add(scrapes * scrapeEvery)
	dashboards := loadDashboards(t)
	for _, file := range []string{"gpu-fleet.json", "inference-slo.json"} {
		t.Run(file, func(t *testing.T) {
			d := dashboards[file]
			for _, p := range flatten(d.Panels) {
				for _, tg := range p.Targets {
					if err := evalNonEmpty(engine, st, tg.Expr, at); err != nil {
						t.Errorf("panel %q target %s: %v", p.Title, tg.RefID, err)
					}
				}
			}
			for _, v := range d.Templating.List {
				if v.Type != "query" {
					continue
				}
				q, err := variableQuery(v.Query)
				if err == nil {
					err = evalNonEmpty(engine, st, q, at)
				}
				if err != nil {
					t.Errorf("variable %s: %v", v.Name, err)
				}
			}
		})
	}
}

func evalNonEmpty(engine *promql.Engine, st storage.Queryable, query string, at time.Time) error {
	// ".+" rather than All's ".*": a filter on a label the series lack must
	// match nothing, as it would once a user picks a value.
	expr, _ := substitute(query, ".+")
	ctx := context.Background()
	q, err := engine.NewInstantQuery(ctx, st, nil, expr, at)
	if err != nil {
		return err
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return res.Err
	}
	empty := false
	switch v := res.Value.(type) {
	case promql.Vector:
		empty = len(v) == 0
	case promql.Matrix:
		empty = len(v) == 0
	}
	if !empty {
		return nil
	}
	for _, name := range mayBeEmpty {
		if strings.Contains(query, name) {
			return nil
		}
	}
	return fmt.Errorf("%s returns nothing over the exporter's and the simulated servers' series", expr)
}

// appendExporter loads the exporter's golden exposition (pkg/metrics keeps
// it equal to what the exporter renders) as series scraped every 15s,
// counters growing.
func appendExporter(t *testing.T, st storage.Appendable, base time.Time) {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "pkg/metrics/testdata/node.golden"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	families := parseExposition(t, f)
	extra := map[string]string{"instance": "10.0.0.1:9400", "job": "gpuscale-exporter", "node": "node-a"}
	for i := range scrapes + 1 {
		appendFamilies(t, st, families, extra, base.Add(time.Duration(i)*scrapeEvery), float64(i))
	}
}

// appendInferenceServer scrapes a simulated server under load on a fake
// clock, as Prometheus would a pod annotated for scraping.
func appendInferenceServer(t *testing.T, st storage.Appendable, base time.Time, d inferencesim.Dialect, pod string) {
	t.Helper()
	now := base
	srv, err := inferencesim.NewServer(inferencesim.Options{Dialect: d, Rate: 30, Seed: 1, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	extra := map[string]string{"namespace": "llm", "pod": pod, "instance": pod + ":8000", "job": "inference"}
	for i := range scrapes + 1 {
		now = base.Add(time.Duration(i) * scrapeEvery)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		appendFamilies(t, st, parseExposition(t, rec.Body), extra, now, 0)
	}
}

func parseExposition(t *testing.T, r io.Reader) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// appendFamilies appends one scrape at ts; counters grow by step per
// scrape on top of their exposed value.
func appendFamilies(t *testing.T, st storage.Appendable, families map[string]*dto.MetricFamily, extra map[string]string, ts time.Time, step float64) {
	t.Helper()
	app := st.Appender(context.Background())
	add := func(name string, m *dto.Metric, more map[string]string, v float64) {
		b := labels.NewScratchBuilder(len(m.GetLabel()) + len(extra) + 2)
		b.Add(labels.MetricName, name)
		for _, l := range m.GetLabel() {
			if l.GetValue() != "" {
				b.Add(l.GetName(), l.GetValue())
			}
		}
		for k, val := range extra {
			if !hasLabel(m, k) { // honor_labels: the target's labels never override the series'
				b.Add(k, val)
			}
		}
		for k, val := range more {
			b.Add(k, val)
		}
		b.Sort()
		if _, err := app.Append(0, b.Labels(), ts.UnixMilli(), v); err != nil {
			t.Fatalf("append %s: %v", name, err)
		}
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m, nil, m.GetCounter().GetValue()+step*1000)
			case dto.MetricType_GAUGE:
				add(name, m, nil, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add(name, m, nil, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					add(name+"_bucket", m, map[string]string{"le": formatLE(b.GetUpperBound())}, float64(b.GetCumulativeCount()))
				}
				add(name+"_bucket", m, map[string]string{"le": "+Inf"}, float64(h.GetSampleCount()))
				add(name+"_sum", m, nil, h.GetSampleSum())
				add(name+"_count", m, nil, float64(h.GetSampleCount()))
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
}

func hasLabel(m *dto.Metric, name string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() != "" {
			return true
		}
	}
	return false
}

func formatLE(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
