package inference

import (
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// parseText parses the Prometheus text format as the adapter's scraper does.
func parseText(t testing.TB, r io.Reader) (familyMap, error) {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// parseOpenMetrics decodes OpenMetrics 1.0 text.
func parseOpenMetrics(r io.Reader) (familyMap, error) {
	dec := expfmt.NewDecoder(r, expfmt.FmtOpenMetrics_1_0_0)
	out := map[string]*dto.MetricFamily{}
	for {
		mf := &dto.MetricFamily{}
		switch err := dec.Decode(mf); {
		case errors.Is(err, io.EOF):
			return out, nil
		case err != nil:
			return nil, err
		}
		out[mf.GetName()] = mf
	}
}

func fixture(t *testing.T, name string) map[string]*dto.MetricFamily {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var fams map[string]*dto.MetricFamily
	if strings.Contains(name, "openmetrics") {
		fams, err = parseOpenMetrics(f)
	} else {
		fams, err = parseText(t, f)
	}
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return fams
}

func text(t *testing.T, s string) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := parseText(t, strings.NewReader(s))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return fams
}

// ttftWant describes the expected TTFT histogram, in seconds.
type ttftWant struct {
	bounds      int
	count, sum  float64
	le, leCount float64 // one bucket's cumulative count
}

type want struct {
	dialect        Dialect
	model          string
	queue, running *float64
	kv             *float64
	ttft           *ttftWant
	warnings       []string // substrings, in order
	rejected       []string // substrings, in order
}

func ptr(v float64) *float64 { return &v }

const llama = "meta-llama/Llama-3.1-8B-Instruct"

func TestDetectFixtures(t *testing.T) {
	vllm := want{
		dialect: VLLM, model: llama, queue: ptr(7), running: ptr(24), kv: ptr(81.25),
		ttft: &ttftWant{bounds: 23, count: 5120, sum: 711.2938771247864, le: 0.1, leCount: 2541},
	}
	tests := []struct {
		file string
		want want
	}{
		{"vllm.txt", vllm},
		{"vllm_openmetrics.txt", vllm},
		{"vllm_v0.txt", want{
			dialect: VLLM, model: "mistralai/Mistral-7B-Instruct-v0.3", queue: ptr(0), running: ptr(9),
			kv:   ptr(33.67003367003367),
			ttft: &ttftWant{bounds: 17, count: 1546, sum: 216.94231963157654, le: 0.25, leCount: 1402},
		}},
		{"sglang.txt", want{
			dialect: SGLang, model: "Qwen/Qwen2.5-7B-Instruct", queue: ptr(12), running: ptr(31), kv: ptr(42),
			ttft: &ttftWant{bounds: 19, count: 1995, sum: 524.7730529308319, le: 1, leCount: 1971},
		}},
		// TGI: no TTFT (its queue-duration histogram is not one), no KV
		// cache, no model label.
		{"tgi.txt", want{dialect: TGI, queue: ptr(5), running: ptr(16)}},
		// Triton: versions and models summed, no running gauge, TTFT in
		// milliseconds converted and merged over llama3's two versions.
		{"triton.txt", want{
			dialect: Triton, model: "llama3,preprocess", queue: ptr(7),
			ttft: &ttftWant{bounds: 5, count: 2242, sum: 793.13975, le: 0.5, leCount: 1852},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := Detect(fixture(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			check(t, got, tt.want)
		})
	}
}

func TestDetectByModelTriton(t *testing.T) {
	got, err := DetectByModel(fixture(t, "triton.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got models %v, want llama3 and preprocess", keys(got))
	}
	check(t, got["llama3"], want{
		dialect: Triton, model: "llama3", queue: ptr(7),
		ttft: &ttftWant{bounds: 5, count: 2242, sum: 793.13975, le: 0.1, leCount: 510},
	})
	check(t, got["preprocess"], want{dialect: Triton, model: "preprocess", queue: ptr(0)})
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func check(t *testing.T, got *Signals, w want) {
	t.Helper()
	if got == nil {
		t.Fatal("nil Signals")
	}
	if got.Dialect != w.dialect || got.Model != w.model {
		t.Errorf("dialect, model = %q, %q; want %q, %q", got.Dialect, got.Model, w.dialect, w.model)
	}
	checkGauge(t, "QueueDepth", got.QueueDepth, w.queue)
	checkGauge(t, "Running", got.Running, w.running)
	checkGauge(t, "KVCacheUtilization", got.KVCacheUtilization, w.kv)
	checkTTFT(t, got.TTFT, w.ttft)
	if len(got.Warnings) != len(w.warnings) {
		t.Fatalf("warnings %q, want %d matching %q", got.Warnings, len(w.warnings), w.warnings)
	}
	for i, sub := range w.warnings {
		if !strings.Contains(got.Warnings[i], sub) {
			t.Errorf("warning %d = %q, want it to mention %q", i, got.Warnings[i], sub)
		}
	}
	if len(got.Rejected) != len(w.rejected) {
		t.Fatalf("rejected %q, want %d matching %q", got.Rejected, len(w.rejected), w.rejected)
	}
	for i, sub := range w.rejected {
		if !strings.Contains(got.Rejected[i].Error(), sub) {
			t.Errorf("rejection %d = %q, want it to mention %q", i, got.Rejected[i].Error(), sub)
		}
	}
}

func checkGauge(t *testing.T, name string, got, want *float64) {
	t.Helper()
	switch {
	case got == nil && want == nil:
	case got == nil || want == nil:
		t.Errorf("%s = %v, want %v", name, deref(got), deref(want))
	case math.Abs(*got-*want) > 1e-9*math.Abs(*want):
		t.Errorf("%s = %g, want %g", name, *got, *want)
	}
}

func deref(p *float64) any {
	if p == nil {
		return "nil"
	}
	return *p
}

func checkTTFT(t *testing.T, got *histogram.Histogram, w *ttftWant) {
	t.Helper()
	if (got == nil) != (w == nil) {
		t.Fatalf("TTFT = %+v, want %+v", got, w)
	}
	if got == nil {
		return
	}
	if err := got.Validate(); err != nil {
		t.Errorf("TTFT invalid: %v", err)
	}
	if len(got.Bounds) != w.bounds || got.Count != w.count || math.Abs(got.Sum-w.sum) > 1e-9*w.sum {
		t.Errorf("TTFT has %d bounds, count %g, sum %g; want %d, %g, %g", len(got.Bounds), got.Count, got.Sum, w.bounds, w.count, w.sum)
	}
	for i, b := range got.Bounds {
		if math.Abs(b-w.le) <= 1e-12 {
			if got.Counts[i] != w.leCount {
				t.Errorf("TTFT bucket le=%g has %g, want %g", b, got.Counts[i], w.leCount)
			}
			return
		}
	}
	t.Errorf("TTFT has no bucket le=%g: %v", w.le, got.Bounds)
}

type familyMap = map[string]*dto.MetricFamily

// A scraper parses only Families(): every family Detect reads must be
// among them, or its signal silently never arrives (found when a new
// family was read by Detect but skipped by the scraper).
func TestFamiliesNameWhatDetectReads(t *testing.T) {
	names, _ := Families()
	has := map[string]bool{}
	for _, n := range names {
		has[n] = true
	}
	for _, m := range mappings {
		for _, s := range dialect.Signals() {
			for _, n := range m.Families(s) {
				if !has[n] {
					t.Errorf("%s: %s is read but not in Families()", m.Name, n)
				}
			}
		}
	}
}
