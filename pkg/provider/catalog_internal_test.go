package provider

import (
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

// TestEverySignalServed walks pkg/signal's tables: every scalar signal and
// every served quantile of every latency histogram has its catalog entry,
// described as the table says, and the catalog holds nothing else.
func TestEverySignalServed(t *testing.T) {
	entries := 0
	for sig := range signal.NumSignals {
		entries++
		d, ok := podMetricsByName[sig.Served()]
		if !ok {
			t.Errorf("signal %s: no catalog entry for %q", sig, sig.Served())
			continue
		}
		if d.isQuantile() || d.signal != sig || d.source != sig.Source() || d.agg != sig.Aggregation() || d.format != formatOf(sig.Unit()) {
			t.Errorf("signal %s: catalog entry %+v disagrees with the signal table", sig, d)
		}
	}
	for h := range signal.NumHists {
		for _, q := range h.Quantiles() {
			entries++
			d, ok := podMetricsByName[q.Served]
			if !ok {
				t.Errorf("histogram %s: no catalog entry for its quantile %q", h, q.Served)
				continue
			}
			if d.quantile != q.Q || d.hist != h || d.source != h.Source() || d.format != formatOf(h.Unit()) {
				t.Errorf("histogram %s: catalog entry %+v disagrees with the hists table", h, d)
			}
		}
	}
	if len(podMetrics) != entries || len(podMetricsByName) != entries {
		t.Errorf("the catalog has %d entries (%d names), the tables %d", len(podMetrics), len(podMetricsByName), entries)
	}
}

// TestServedNamesInCatalog: the served names this package exports, and
// those it serves for nodes and models, are catalog entries, of the kind
// and format they were before the catalog came from pkg/signal.
func TestServedNamesInCatalog(t *testing.T) {
	tests := []struct {
		name   string
		source signal.Source
		sum    bool
		format resource.Format
	}{
		{GPUUtilization, signal.SourceGPU, false, resource.DecimalSI},
		{GPUMemoryUtilization, signal.SourceGPU, false, resource.DecimalSI},
		{GPUMemoryUsedBytes, signal.SourceGPU, true, resource.BinarySI},
		{GPUPowerWatts, signal.SourceGPU, true, resource.DecimalSI},
		{QueueDepth, signal.SourceInference, true, resource.DecimalSI},
		{RequestsRunning, signal.SourceInference, true, resource.DecimalSI},
		{KVCacheUtilization, signal.SourceInference, false, resource.DecimalSI},
		{GPUSMActive, signal.SourceGPU, false, resource.DecimalSI},
		{GPUTensorActive, signal.SourceGPU, false, resource.DecimalSI},
		{TTFTP50, signal.SourceInference, false, resource.DecimalSI},
		{TTFTP90, signal.SourceInference, false, resource.DecimalSI},
		{TTFTP99, signal.SourceInference, false, resource.DecimalSI},
		{ITLP50, signal.SourceInference, false, resource.DecimalSI},
		{ITLP90, signal.SourceInference, false, resource.DecimalSI},
		{ITLP99, signal.SourceInference, false, resource.DecimalSI},
	}
	for _, tt := range tests {
		d, ok := podMetricsByName[tt.name]
		if !ok {
			t.Errorf("%s: not in the catalog", tt.name)
			continue
		}
		if m := d.metric(); m.Source != tt.source || m.Sum != tt.sum || d.format != tt.format {
			t.Errorf("%s: %+v, format %v; want source %d, sum %v, format %v", tt.name, m, d.format, tt.source, tt.sum, tt.format)
		}
	}
	for _, name := range []string{GPUUtilization, GPUMemoryUtilization, GPUSMActive, GPUTensorActive} {
		if !nodeMetrics[name] {
			t.Errorf("%s: not served for nodes", name)
		}
	}
	for _, name := range []string{GPUMemoryUsedBytes, GPUPowerWatts, QueueDepth, TTFTP90} {
		if nodeMetrics[name] {
			t.Errorf("%s: served for nodes", name)
		}
	}
	for what, names := range map[string]map[string]bool{"node": nodeMetrics, "external": externalMetrics} {
		for name := range names {
			if _, ok := podMetricsByName[name]; !ok {
				t.Errorf("%s metric %s: not in the catalog", what, name)
			}
		}
	}
}

// TestEveryServedMetricDocumented walks the catalog: docs/metrics.md, the
// users' list of what HPAs can name, names every served metric (a
// histogram's quantiles by their first, "`..._p50`, `_p90`, `_p99`").
func TestEveryServedMetricDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, d := range podMetrics {
		name := d.name
		if d.isQuantile() {
			name = d.hist.Quantiles()[0].Served
		}
		if !strings.Contains(doc, "| `"+name+"`") {
			t.Errorf("metric %s: docs/metrics.md has no line for %s", d.name, name)
		}
	}
}
