package autoscalebench

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
)

// adapterMetricsText is what the adapter's /metrics serves after one
// estimate of each of two workloads.
func adapterMetricsText(t *testing.T) ([]byte, capacity.Estimate) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := capacity.NewMetrics()
	reg.MustRegister(m.Collectors()...)
	e := capacity.New(capacity.DefaultConfig(), m)
	pod := capacity.Pod{Ready: true, Data: true, Startup: 10 * time.Second, Running: 8, Waiting: 2, KVPercent: 40}
	est, err := e.Estimate(capacity.Key{Namespace: "bench-capacity", Target: "deployment/llm"}, time.Unix(0, 0), []capacity.Pod{pod, pod, {Loading: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Estimate(capacity.Key{Namespace: "other", Target: "deployment/llm"}, time.Unix(0, 0), []capacity.Pod{pod}); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&buf, f); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes(), est
}

func TestParseCapacityParts(t *testing.T) {
	body, est := adapterMetricsText(t)
	got, ok, err := parseCapacityParts(body, "bench-capacity", "deployment/llm")
	if err != nil || !ok {
		t.Fatalf("parse: ok %v, %v", ok, err)
	}
	want := CapacityParts{
		Demand: est.Demand, Forecast: est.Forecast, Trend: est.Trend, TrendStdErr: est.TrendStdErr,
		Slots: est.Slots, PerReplica: est.PerReplica, HorizonSeconds: est.Horizon.Seconds(),
		Ready: float64(est.Replicas), Reporting: float64(est.Reporting), Loading: float64(est.Loading), LoadingCredit: est.LoadingCredit,
		Needed: est.Needed, Utilization: est.Utilization,
		KVNeeded: est.KVNeeded, PrefillNeeded: est.PrefillNeeded, PrefillBusy: est.PrefillBusy,
		PrefillMaxBusy: est.Prefill.MaxBusy, PrefillOver: est.Prefill.OverObjective, PrefillObjective: est.PrefillObjective,
		Dispersion: est.Dispersion, KVDispersion: est.KVDispersion, LateBudget: est.LateBudget, Residence: est.Residence,
		Slack: est.Slack, MeasuredTTFT: est.MeasuredTTFT, Correction: est.Correction,
		ITLNeeded: est.ITLNeeded, ITLQuantile: est.ITL.Quantile, ITLSlots: est.ITL.Slots,
	}
	if got != want {
		t.Errorf("parsed %+v\nwant   %+v", got, want)
	}
	if got.Demand != 20 || got.Loading != 1 || got.HorizonSeconds != 10 {
		t.Errorf("demand %g, loading %g, horizon %g: want 20, 1, 10", got.Demand, got.Loading, got.HorizonSeconds)
	}
	if _, ok, err := parseCapacityParts(body, "bench-queue-depth", "deployment/llm"); ok || err != nil {
		t.Errorf("a workload with no estimate: ok %v, %v", ok, err)
	}
	if _, _, err := parseCapacityParts([]byte("not { metrics"), "a", "b"); err == nil {
		t.Error("garbage parsed")
	}
}

// TestCapacityGaugesCoverTheAdapter guards the recording against a part
// the adapter exports and the replay does not read back.
func TestCapacityGaugesCoverTheAdapter(t *testing.T) {
	body, _ := adapterMetricsText(t)
	for _, line := range strings.Split(string(body), "\n") {
		name, ok := strings.CutPrefix(line, "# TYPE ")
		if !ok || !strings.HasSuffix(name, " gauge") {
			continue
		}
		name = strings.TrimSuffix(name, " gauge")
		if _, ok := capacityGauges[name]; !ok {
			t.Errorf("the adapter exports %s; the replay does not record it", name)
		}
	}
	if len(capacityGauges) < 12 {
		t.Errorf("%d gauges recorded", len(capacityGauges))
	}
}

// TestWriteSignalPlot: a recording with the capacity policy's estimates
// gets capacity-signal.png/.svg, whose SVG names every part; one without
// gets none, and a recording round-trips its estimates through JSON.
func TestWriteSignalPlot(t *testing.T) {
	rec := reportRecording()
	capPolicy := generated(PolicyCapacity, "capacity value 1", rec.Duration, 2)
	for at := time.Duration(0); at < rec.Duration; at += capacitySampleEvery {
		m := at.Minutes()
		capPolicy.Capacity = append(capPolicy.Capacity, CapacityParts{
			At: at, Demand: 10 + 2*m, Forecast: 12 + 2*m, Trend: 0.1, TrendStdErr: 0.05,
			Slots: 23, PerReplica: 16.6, HorizonSeconds: 10, Ready: 1 + float64(int(m)%3), Loading: float64(int(m) % 2),
			LoadingCredit: 16.6 * float64(int(m)%2), Needed: (12 + 2*m) / 16.6, Utilization: 0.9,
		})
	}
	capPolicy.Capacity[3].Trend = math.NaN() // a bad value read back is skipped, not plotted
	rec.Policies = append(rec.Policies, capPolicy)

	dir := t.TempDir()
	if err := WriteReport(dir, rec); err != nil {
		t.Fatalf("WriteReport: %v", err)
	}
	checkPNG(t, filepath.Join(dir, signalPlotName+".png"))
	checkSVG(t, filepath.Join(dir, signalPlotName+".svg"))
	svg := readFile(t, filepath.Join(dir, signalPlotName+".svg"))
	for _, want := range []string{"forecast over the horizon", "loading credit", "start-up horizon", "Erlang C", "needed"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the signal plot lacks %q", want)
		}
	}

	var back Recording
	capPolicy.Capacity[3].Trend = 0 // JSON has no NaN
	rec.Policies[len(rec.Policies)-1] = capPolicy
	raw, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Policies[len(back.Policies)-1].Capacity; len(got) != len(capPolicy.Capacity) || got[5] != capPolicy.Capacity[5] {
		t.Errorf("estimates after a JSON round trip: %d, want %d", len(got), len(capPolicy.Capacity))
	}

	bare := t.TempDir()
	if err := WriteReport(bare, reportRecording()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(bare, signalPlotName+".svg")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a recording without estimates got a signal plot: %v", err)
	}
}
