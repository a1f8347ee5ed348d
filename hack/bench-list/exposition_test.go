package main

import (
	"bytes"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

func TestAppendExposition(t *testing.T) {
	tests := []struct {
		name string
		pods []expoPod
	}{
		{"no pods", nil},
		{"one pod", []expoPod{{Namespace: "ns", Name: "llm-00000", Node: "gpu-node-1", Index: 0}}},
		{"two namespaces", []expoPod{
			{Namespace: "promql-1000", Name: "llm-00000", Node: "gpu-node-1", Index: 0},
			{Namespace: "promql-1000", Name: "llm-00001", Node: "gpu-node-1", Index: 1},
			{Namespace: "promql-10000", Name: "llm-00000", Node: "gpu-node-2", Index: 9},
		}},
	}
	const tick = 1_700_000_000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := appendExposition(nil, tt.pods, tick)
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(bytes.NewReader(text))
			if err != nil {
				t.Fatalf("the exposition does not parse: %v\n%s", err, text)
			}
			// Every rule's and query's series is there, a gauge per pod.
			for _, m := range promqlMetricNames() {
				fam := fams[promqlSeries[m].Series]
				// (A family of no samples is no family to the parser.)
				if len(tt.pods) > 0 && fam.GetType() != dto.MetricType_GAUGE {
					t.Fatalf("%s: type %v, want a gauge", promqlSeries[m].Series, fam.GetType())
				}
				if got := len(fam.GetMetric()); got != len(tt.pods) {
					t.Fatalf("%s: %d series, want one per pod, %d", promqlSeries[m].Series, got, len(tt.pods))
				}
			}
			uuids := map[string]bool{}
			for i, p := range tt.pods {
				gpu := fams["DCGM_FI_DEV_GPU_UTIL"].GetMetric()[i]
				queue := fams["vllm:num_requests_waiting"].GetMetric()[i]
				for _, m := range []*dto.Metric{gpu, queue} {
					if l := labelsOf(m); l["namespace"] != p.Namespace || l["pod"] != p.Name {
						t.Errorf("pod %d: labels %v, want namespace %q and pod %q", i, l, p.Namespace, p.Name)
					}
				}
				l := labelsOf(gpu)
				if l["Hostname"] != p.Node || l["modelName"] == "" || l["gpu"] == "" || !strings.HasPrefix(l["UUID"], "GPU-") {
					t.Errorf("pod %d: dcgm-exporter's labels %v", i, l)
				}
				uuids[l["UUID"]] = true
				if got, want := gpu.GetGauge().GetValue(), float64(gpuUtil(p.Index, tick)); got != want {
					t.Errorf("pod %d: utilization %v, want %v", i, got, want)
				}
				if got, want := queue.GetGauge().GetValue(), float64(queueDepth(p.Index, tick)); got != want {
					t.Errorf("pod %d: queue %v, want %v", i, got, want)
				}
			}
			if len(uuids) != len(tt.pods) {
				t.Errorf("%d GPU UUIDs for %d pods: each pod has a GPU of its own", len(uuids), len(tt.pods))
			}
		})
	}
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// TestValuesChange: at the 5 s scrape, or any interval up to 16 s, a
// pod's values change from one scrape to the next (nothing may answer
// from a stale copy and look right), and neighbours differ.
func TestValuesChange(t *testing.T) {
	for _, step := range []int64{1, 5, 15, 16} {
		for i := range 1000 {
			const tick = 1_700_000_000
			if gpuUtil(i, tick) == gpuUtil(i, tick+step) || queueDepth(i, tick) == queueDepth(i, tick+step) {
				t.Fatalf("pod %d: a value is the same %d s later", i, step)
			}
			if gpuUtil(i, tick) == gpuUtil(i+1, tick) || queueDepth(i, tick) == queueDepth(i+1, tick) {
				t.Fatalf("pods %d and %d have a value in common", i, i+1)
			}
		}
	}
}

func TestPARules(t *testing.T) {
	overrides := map[string]paGroupResource{"namespace": {Resource: "namespace"}, "pod": {Resource: "pod"}}
	tests := []struct {
		metrics []string
		want    []paRule
		err     string
	}{
		{metrics: []string{"gpu_utilization"}, want: []paRule{{
			SeriesQuery: `DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}`, Resources: paResources{Overrides: overrides},
			Name:         paName{Matches: "^DCGM_FI_DEV_GPU_UTIL$", As: "gpu_utilization"},
			MetricsQuery: "avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
		}}},
		{metrics: []string{"inference_queue_depth", "gpu_utilization"}, want: []paRule{{
			SeriesQuery: `vllm:num_requests_waiting{namespace!="",pod!=""}`, Resources: paResources{Overrides: overrides},
			Name:         paName{Matches: "^vllm:num_requests_waiting$", As: "inference_queue_depth"},
			MetricsQuery: "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
		}, {
			SeriesQuery: `DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}`, Resources: paResources{Overrides: overrides},
			Name:         paName{Matches: "^DCGM_FI_DEV_GPU_UTIL$", As: "gpu_utilization"},
			MetricsQuery: "avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
		}}},
		{metrics: []string{"gpu_utilization", "inference_ttft_seconds_p90"}, err: `no prometheus-adapter rule for "inference_ttft_seconds_p90"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.metrics, ","), func(t *testing.T) {
			raw, err := paRules(tt.metrics)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The file as prometheus-adapter reads it: its keys, strictly.
			var got paConfig
			if err := yaml.UnmarshalStrict(raw, &got); err != nil {
				t.Fatalf("%v\n%s", err, raw)
			}
			if len(got.Rules) != len(tt.want) {
				t.Fatalf("%d rules, want %d:\n%s", len(got.Rules), len(tt.want), raw)
			}
			for i := range tt.want {
				g, w := got.Rules[i], tt.want[i]
				if g.SeriesQuery != w.SeriesQuery || g.Name != w.Name || g.MetricsQuery != w.MetricsQuery ||
					len(g.Resources.Overrides) != 2 || g.Resources.Overrides["namespace"] != overrides["namespace"] || g.Resources.Overrides["pod"] != overrides["pod"] {
					t.Errorf("rule %d:\n got %+v\nwant %+v", i, g, w)
				}
			}
			for _, key := range []string{"seriesQuery:", "resources:", "overrides:", "metricsQuery:", "matches:", "as:"} {
				if !bytes.Contains(raw, []byte(key)) {
					t.Errorf("no %s in\n%s", key, raw)
				}
			}
		})
	}
}
