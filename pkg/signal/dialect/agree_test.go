package dialect_test

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuscale/gpuscale/pkg/adapter/inference"
	"github.com/gpuscale/gpuscale/pkg/adapter/promsource"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// TestSimulatorIsDetectedAndParsed: for every dialect, the simulator's
// exposition is detected as that dialect by pkg/adapter/inference and parsed to the
// values the simulator set: its gauges to the engine's state, its
// histograms to the observations it made (TTFTs as their requests heard
// them; one ITL observation per token gap, or per request where the table
// says so). A signal the table does not give the dialect is nil.
func TestSimulatorIsDetectedAndParsed(t *testing.T) {
	for _, e := range dialect.Engines {
		t.Run(string(e.Name), func(t *testing.T) {
			run := simulate(t, e.Name)
			s, err := inference.Detect(run.families)
			if err != nil {
				t.Fatalf("%s: the simulator's exposition is not detected: %v", e.Name, err)
			}
			if s.Dialect != e.Name {
				t.Fatalf("%s: the simulator's exposition is detected as %s", e.Name, s.Dialect)
			}
			if len(s.Warnings) > 0 || len(s.Rejected) > 0 {
				t.Errorf("%s: warnings %q, rejected %v", e.Name, s.Warnings, s.Rejected)
			}
			st := run.stats
			gauges := map[dialect.Signal]struct {
				got  *float64
				want float64
			}{
				dialect.Queue:   {s.QueueDepth, float64(st.Waiting)},
				dialect.Running: {s.Running, float64(st.Running)},
				dialect.KVCache: {s.KVCacheUtilization, 100 * st.KVCacheUsage},
			}
			hists := map[dialect.Signal]*histogram.Histogram{dialect.TTFT: s.TTFT, dialect.Prefill: s.Prefill, dialect.ITL: s.ITL}
			for _, sig := range dialect.Signals() {
				if sig.Histogram() {
					checkHistogram(t, &e, sig, hists[sig], run)
					continue
				}
				g, ok := gauges[sig]
				if !ok {
					t.Fatalf("signal %s: the test does not know where Detect puts it", sig)
				}
				switch {
				case !e.Has(sig) && g.got != nil:
					t.Errorf("%s %s: the table has no family for it, yet Detect read %g", e.Name, sig, *g.got)
				case e.Has(sig) && g.got == nil:
					t.Errorf("%s %s: Detect read nothing of the simulator's %s", e.Name, sig, e.Families(sig)[0])
				case e.Has(sig) && !close(*g.got, g.want):
					t.Errorf("%s %s: Detect read %g, the simulator set %g", e.Name, sig, *g.got, g.want)
				}
			}
		})
	}
}

func checkHistogram(t *testing.T, e *dialect.Engine, sig dialect.Signal, h *histogram.Histogram, run *simRun) {
	t.Helper()
	if !e.Has(sig) {
		if h != nil {
			t.Errorf("%s %s: the table has no family for it, yet Detect read a histogram", e.Name, sig)
		}
		return
	}
	if h == nil {
		t.Errorf("%s %s: Detect read nothing of the simulator's %s", e.Name, sig, e.Families(sig)[0])
		return
	}
	st := run.stats
	var wantCount float64
	switch sig {
	case dialect.TTFT:
		wantCount = float64(len(run.ttfts))
		var sum float64
		for _, d := range run.ttfts {
			sum += d.Seconds()
		}
		if !close(h.Sum, sum) {
			t.Errorf("%s %s: sum %gs, the simulator's requests heard %gs", e.Name, sig, h.Sum, sum)
		}
	case dialect.Prefill:
		// Observed as each request finishes.
		wantCount = float64(st.Completed)
	case dialect.ITL:
		wantCount = float64(st.GenerationTokens) - float64(len(run.ttfts))
		if e.Reads[sig].PerRequestMean {
			wantCount = float64(st.Completed)
		}
	default:
		t.Fatalf("signal %s: the test does not know what the simulator observes", sig)
	}
	if h.Count != wantCount {
		t.Errorf("%s %s: %g observations, the simulator made %g", e.Name, sig, h.Count, wantCount)
	}
	// Whatever the family's unit, Detect's are seconds: the mean of any
	// of these lies between a simulated step and the run's length.
	if mean := h.Sum / h.Count; !(mean > 1e-4 && mean < run.length.Seconds()) {
		t.Errorf("%s %s: mean %gs, not a time this run could take (unit?)", e.Name, sig, mean)
	}
}

func close(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

type simRun struct {
	families map[string]*dto.MetricFamily
	stats    inferencesim.Stats
	ttfts    []time.Duration
	length   time.Duration
}

// simulate runs a server of dialect d: short requests that finish (filling
// the histograms), then a burst that leaves requests both running and
// queued (the gauges), and scrapes it.
func simulate(t *testing.T, d dialect.Name) *simRun {
	t.Helper()
	now := time.Unix(1_700_000_000, 0)
	srv, err := inferencesim.NewServer(inferencesim.Options{Dialect: d, Model: "m", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatalf("%s: %v", d, err)
	}
	run := &simRun{}
	submit := func(n int, r inferencesim.Request) {
		for range n {
			if err := srv.SubmitNotify(r, func(ttft time.Duration) { run.ttfts = append(run.ttfts, ttft) }); err != nil {
				t.Fatal(err)
			}
		}
	}
	submit(20, inferencesim.Request{ContextTokens: 300, GeneratedTokens: 30})
	now = now.Add(30 * time.Second)
	submit(600, inferencesim.Request{ContextTokens: 2000, GeneratedTokens: 200})
	now = now.Add(2 * time.Second)
	run.length = 32 * time.Second

	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	srv.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: /metrics answered %d", d, rec.Code)
	}
	run.stats = srv.Stats()
	if st := run.stats; st.Waiting == 0 || st.Running == 0 || st.Completed == 0 || st.Preemptions != 0 {
		t.Fatalf("%s: the run should end with requests queued, running and completed, and none preempted: %+v", d, st)
	}
	run.families, err = parse(rec.Body.Bytes())
	if err != nil {
		t.Fatalf("%s: %v", d, err)
	}
	return run
}

// TestPromQLDefaultsSelectTheTable: every signal the PromQL source serves
// has, for every dialect the table gives it, a default query per shape that
// selects exactly the dialect's families (histograms' _bucket series), in
// the table's order (the first present wins), matched on the dialect's model
// label, scaled to the signal's unit; and no family of the dialect's that
// the table does not name.
func TestPromQLDefaultsSelectTheTable(t *testing.T) {
	defaults := promsource.DefaultQueries()
	// The defaults that read each signal, by shape and metric. Prefill
	// has none: only the embedded source serves it (the capacity
	// estimate's prefill histograms), the PromQL source has no such read.
	served := map[dialect.Signal]map[string]map[string]string{
		dialect.Queue:   {promsource.ShapePods: pick(defaults.Pods, provider.QueueDepth), promsource.ShapeModels: pick(defaults.Models, provider.QueueDepth)},
		dialect.Running: {promsource.ShapePods: pick(defaults.Pods, provider.RequestsRunning)},
		dialect.KVCache: {promsource.ShapePods: pick(defaults.Pods, provider.KVCacheUtilization)},
		dialect.TTFT: {
			promsource.ShapePods:     pick(defaults.Pods, provider.TTFTP50, provider.TTFTP90, provider.TTFTP99),
			promsource.ShapeWorkload: pick(defaults.Workload, provider.TTFTP50, provider.TTFTP90, provider.TTFTP99),
			promsource.ShapeModels:   pick(defaults.Models, provider.TTFTP90),
		},
		dialect.Prefill: nil,
		dialect.ITL: {
			promsource.ShapePods:     pick(defaults.Pods, provider.ITLP50, provider.ITLP90, provider.ITLP99),
			promsource.ShapeWorkload: pick(defaults.Workload, provider.ITLP50, provider.ITLP90, provider.ITLP99),
			promsource.ShapeModels:   pick(defaults.Models, provider.ITLP90),
		},
	}
	for _, sig := range dialect.Signals() {
		shapes, ok := served[sig]
		if !ok {
			t.Errorf("signal %s: say which PromQL defaults read it (or that none does)", sig)
			continue
		}
		for _, e := range dialect.Engines {
			if !e.Has(sig) {
				continue
			}
			for _, shape := range slices.Sorted(maps.Keys(shapes)) {
				for metric, text := range shapes[shape] {
					if text == "" {
						t.Errorf("%s %s: no default %s query for %s", e.Name, sig, shape, metric)
						continue
					}
					if shape == promsource.ShapeModels && len(e.ModelLabels) == 0 && !sig.Histogram() {
						// A server that names no model is left out
						// of per-model sums: the embedded source
						// ignores it there too.
						continue
					}
					checkQuery(t, &e, sig, shape, metric, render(t, text))
				}
			}
		}
	}
}

// checkQuery checks one rendered default query against one dialect's entry.
func checkQuery(t *testing.T, e *dialect.Engine, sig dialect.Signal, shape, metric, query string) {
	t.Helper()
	where := fmt.Sprintf("%s %s: %s %s", e.Name, sig, shape, metric)
	var want []string
	for _, f := range e.Families(sig) {
		if sig.Histogram() {
			f += "_bucket"
		}
		want = append(want, f)
	}
	var got []string
	for _, part := range topLevelOr(query) {
		for _, m := range selector.FindAllStringSubmatch(part.expr, -1) {
			name, matchers := m[1], m[2]
			if !strings.HasPrefix(name, e.Prefix) {
				continue
			}
			got = append(got, name)
			if !strings.Contains(matchers, e.ModelLabel()+`="M"`) {
				t.Errorf("%s: %s{%s} does not match the model on %s", where, name, matchers, e.ModelLabel())
			}
			if scale := e.Reads[sig].Scale; !close(part.scale, scale) {
				t.Errorf("%s: %s is scaled by %g, the table says %g", where, name, part.scale, scale)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: the query selects %q of the dialect, the table names %q\n%s", where, got, want, query)
	}
	if shape == promsource.ShapeModels && e.ModelLabel() != provider.ModelLabel {
		relabel := fmt.Sprintf(`"%s", "$1", "%s", "(.+)")`, provider.ModelLabel, e.ModelLabel())
		if !strings.Contains(query, relabel) {
			t.Errorf("%s: the dialect's model label %s is not copied to %s", where, e.ModelLabel(), provider.ModelLabel)
		}
	}
}

// selector matches a rendered series selector: a metric name and its
// matchers.
var selector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}`)

type scaledPart struct {
	expr  string
	scale float64
}

var (
	leadingFactor  = regexp.MustCompile(`^([0-9.]+) \* `)
	trailingFactor = regexp.MustCompile(` / ([0-9.]+)$`)
)

// topLevelOr splits a query at its outermost "or"s, each part with the
// factor it is multiplied by ("100 * ..." or "... / 1000").
func topLevelOr(q string) []scaledPart {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case '(', '{', '[':
			depth++
		case ')', '}', ']':
			depth--
		case ' ':
			if depth == 0 && strings.HasPrefix(q[i:], " or ") {
				parts = append(parts, q[start:i])
				start = i + len(" or ")
			}
		}
	}
	parts = append(parts, q[start:])
	out := make([]scaledPart, len(parts))
	for i, p := range parts {
		out[i] = scaledPart{expr: p, scale: 1}
		if m := leadingFactor.FindStringSubmatch(p); m != nil {
			f, _ := strconv.ParseFloat(m[1], 64)
			out[i].scale *= f
		}
		if m := trailingFactor.FindStringSubmatch(p); m != nil {
			f, _ := strconv.ParseFloat(m[1], 64)
			out[i].scale /= f
		}
	}
	return out
}

// render executes a default template with a model selector on "M".
func render(t *testing.T, text string) string {
	t.Helper()
	tpl, err := template.New("q").Option("missingkey=error").Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := tpl.Execute(&b, params{Namespace: "ns", PodRegex: "p", NodeRegex: "n", Window: "1m", Quantile: "0.9"}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

type params struct{ Namespace, PodRegex, NodeRegex, Window, Quantile string }

func (params) ModelMatch(label string) string { return fmt.Sprintf(`, %s="M"`, label) }

func pick(m map[string]string, metrics ...string) map[string]string {
	out := map[string]string{}
	for _, name := range metrics {
		out[name] = m[name]
	}
	return out
}

// parse reads the simulator's exposition in the classic text format, as
// the adapter's scraper asks for it.
func parse(body []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(body))
}
