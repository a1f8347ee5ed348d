package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	cmv1beta1 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta1"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
)

// Issue #28's goals for the PromQL source at 10,000 pods, against
// prometheus-adapter on the same Prometheus.
const (
	// goalMedian is how many times prometheus-adapter's median list
	// latency gpuscale's must beat.
	goalMedian = 20
	// goalCPU is how many times less CPU, the adapter's and Prometheus's
	// together, gpuscale's list must cost.
	goalCPU = 10
)

// The processes a list costs CPU in, as the report names them. procAdapter
// is the side's own adapter.
const (
	procAdapter    = "adapter"
	procPrometheus = "prometheus"
	procAPIServer  = "kube-apiserver"
	procEtcd       = "etcd"
)

// sharedProcs are the processes both sides' lists cost CPU in: each
// request's share is what they spent while it ran.
var sharedProcs = []string{procPrometheus, procAPIServer, procEtcd}

// cpuTimes are processes' CPU times so far, by name.
type cpuTimes map[string]time.Duration

// cpuMeter adds up processes' CPU time beyond their idle rate (cores) over
// the windows it is given. A window's excess may be negative (an idle
// process's periodic work fell outside it): only the total is clamped, so
// that many windows average out instead of adding up their noise.
type cpuMeter struct {
	idle map[string]float64
	busy map[string]time.Duration
}

func newCPUMeter(idle map[string]float64) *cpuMeter {
	return &cpuMeter{idle: idle, busy: map[string]time.Duration{}}
}

// add counts the window from before to after, wall long.
func (m *cpuMeter) add(before, after cpuTimes, wall time.Duration) {
	for p, a := range after {
		m.busy[p] += a - before[p] - time.Duration(m.idle[p]*float64(wall))
	}
}

// per is each process's busy CPU over n lists, at least 0.
func (m *cpuMeter) per(n int) map[string]time.Duration {
	out := make(map[string]time.Duration, len(m.busy))
	for p, d := range m.busy {
		out[p] = max(0, d/time.Duration(max(n, 1)))
	}
	return out
}

// sideResult is what one adapter's lists measured.
type sideResult struct {
	// Adapter is gpuscale or prometheus-adapter, Version the
	// custom.metrics.k8s.io version it serves here.
	Adapter, Version string
	Latencies        []time.Duration // sorted
	AnswerBytes      int
	// Items is how many pods every answer named (checked equal to the
	// namespace's pods).
	Items int
	// CPU is each process's CPU per list beyond its idle rate, by the
	// proc* names.
	CPU           map[string]time.Duration
	AdapterRSSMiB float64
}

func (s sideResult) median() time.Duration { return quantile(s.Latencies, 0.5) }

// adapterAndPrometheus is the CPU of a list the goal counts.
func (s sideResult) adapterAndPrometheus() time.Duration {
	return s.CPU[procAdapter] + s.CPU[procPrometheus]
}

// allCPU is a list's CPU in every measured process.
func (s sideResult) allCPU() time.Duration {
	return s.adapterAndPrometheus() + s.CPU[procAPIServer] + s.CPU[procEtcd]
}

// pairResult is one metric of one namespace size, timed on both adapters
// in alternation.
type pairResult struct {
	Pods, Requests int
	Metric, Accept string
	// Idle is each process's CPU, in cores, before the timed lists.
	Idle             map[string]float64
	GPUScale, PA     sideResult
	PrometheusRSSMiB float64
}

// quantile of sorted latencies.
func quantile(ls []time.Duration, q float64) time.Duration {
	if len(ls) == 0 {
		return 0
	}
	return ls[min(len(ls)-1, int(q*float64(len(ls))))]
}

// ratio is a/b, 0 when b is not positive.
func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func (r pairResult) medianRatio() float64 { return ratio(r.PA.median(), r.GPUScale.median()) }
func (r pairResult) cpuRatio() float64 {
	return ratio(r.PA.adapterAndPrometheus(), r.GPUScale.adapterAndPrometheus())
}
func (r pairResult) allCPURatio() float64 { return ratio(r.PA.allCPU(), r.GPUScale.allCPU()) }

// verdict says whether a ratio meets its goal.
func verdict(got float64, goal int) string {
	if got >= float64(goal) {
		return fmt.Sprintf("met (%.1fx, goal %dx)", got, goal)
	}
	return fmt.Sprintf("NOT met (%.1fx, goal %dx)", got, goal)
}

const ms = time.Millisecond / 10 // report rounding

func (s sideResult) line(r pairResult) string {
	return fmt.Sprintf("%d pods %s %s (%s %s): median %v p90 %v p99 %v; %d bytes, %d pods; CPU per list: adapter %v, prometheus %v, kube-apiserver %v, etcd %v; adapter RSS %.0f MiB",
		r.Pods, r.Metric, s.Adapter, s.Version, encodingName(r.Accept), s.median().Round(ms), quantile(s.Latencies, 0.9).Round(ms),
		quantile(s.Latencies, 0.99).Round(ms), s.AnswerBytes, s.Items, s.CPU[procAdapter].Round(ms), s.CPU[procPrometheus].Round(ms),
		s.CPU[procAPIServer].Round(ms), s.CPU[procEtcd].Round(ms), s.AdapterRSSMiB)
}

// lines are the console's summary of r.
func (r pairResult) lines() []string {
	return []string{r.GPUScale.line(r), r.PA.line(r),
		fmt.Sprintf("%d pods %s: prometheus-adapter/gpuscale median %.1fx: %s; CPU (adapter + Prometheus) %.1fx: %s; CPU with kube-apiserver and etcd %.1fx",
			r.Pods, r.Metric, r.medianRatio(), verdict(r.medianRatio(), goalMedian), r.cpuRatio(), verdict(r.cpuRatio(), goalCPU), r.allCPURatio())}
}

// promqlMarkdown is --source=promql's report.
func promqlMarkdown(rs []pairResult, interval time.Duration, reuse bool) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# PromQL source beside prometheus-adapter\n\n`GET /apis/custom.metrics.k8s.io/{v1beta2,v1beta1}/namespaces/NS/pods/*/METRIC?labelSelector=app=%s`, through one kube-apiserver's aggregation layer: v1beta2 to gpuscale (`--source=prometheus`), v1beta1 to prometheus-adapter v0.12.0, both reading one Prometheus that scrapes one exposition of every pod's series every %v. Requests alternate gpuscale, prometheus-adapter, over kept-alive connections; every answer names every pod. ", appLabel, interval)
	if reuse {
		sb.WriteString("gpuscale reuses an answer for a quarter of the scrape interval (`--prometheus-scrape-interval`).\n\n")
	} else {
		sb.WriteString("gpuscale's reuse of answers is off (`--prometheus-scrape-interval=0`): every list is a query.\n\n")
	}
	sb.WriteString("CPU per list is each process's CPU while the lists ran less its idle rate: the adapters' over the whole run, Prometheus's, kube-apiserver's and etcd's over each side's own requests.\n\n")
	sb.WriteString("| pods | metric | adapter | version | encoding | requests | median | p90 | p99 | answer | adapter CPU per list | Prometheus CPU per list | kube-apiserver CPU per list | etcd CPU per list | adapter RSS |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		for _, s := range []sideResult{r.GPUScale, r.PA} {
			fmt.Fprintf(&sb, "| %d | %s | %s | %s | %s | %d | %v | %v | %v | %.2f MB | %v | %v | %v | %v | %.0f MiB |\n", r.Pods, r.Metric, s.Adapter, s.Version,
				encodingName(r.Accept), r.Requests, s.median().Round(ms), quantile(s.Latencies, 0.9).Round(ms), quantile(s.Latencies, 0.99).Round(ms),
				float64(s.AnswerBytes)/1e6, s.CPU[procAdapter].Round(ms), s.CPU[procPrometheus].Round(ms), s.CPU[procAPIServer].Round(ms), s.CPU[procEtcd].Round(ms), s.AdapterRSSMiB)
		}
	}
	sb.WriteString("\n| pods | metric | median, prometheus-adapter / gpuscale | CPU (adapter + Prometheus), prometheus-adapter / gpuscale | CPU with kube-apiserver and etcd | idle CPU before (cores) | Prometheus RSS |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&sb, "| %d | %s | %s | %s | %.1fx | %s | %.0f MiB |\n", r.Pods, r.Metric, verdict(r.medianRatio(), goalMedian),
			verdict(r.cpuRatio(), goalCPU), r.allCPURatio(), idleCores(r.Idle), r.PrometheusRSSMiB)
	}
	return sb.String()
}

// idleCores lists idle rates in a fixed order.
func idleCores(idle map[string]float64) string {
	var parts []string
	for _, p := range []string{"gpuscale", "prometheus-adapter", procPrometheus, procAPIServer, procEtcd} {
		if v, ok := idle[p]; ok {
			parts = append(parts, fmt.Sprintf("%s %.3f", p, v))
		}
	}
	return strings.Join(parts, ", ")
}

// answerPods is how many pods a list's answer names, in either encoding
// and either API version; a pod named twice is an error.
func answerPods(version string, body []byte) (int, error) {
	var names []string
	var err error
	if raw, ok := bytes.CutPrefix(body, protobufMagic); ok {
		names, err = protobufPodNames(version, raw)
	} else {
		names, err = jsonPodNames(body)
	}
	if err != nil {
		return 0, err
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			return 0, fmt.Errorf("pod %q named twice", n)
		}
		seen[n] = true
	}
	return len(names), nil
}

// protobufPodNames are the pods a protobuf MetricValueList of version
// names, raw being the answer after the magic.
func protobufPodNames(version string, raw []byte) ([]string, error) {
	var u runtime.Unknown
	if err := u.Unmarshal(raw); err != nil {
		return nil, fmt.Errorf("protobuf envelope: %w", err)
	}
	var names []string
	switch version {
	case "v1beta2":
		var l cmv1beta2.MetricValueList
		if err := l.Unmarshal(u.Raw); err != nil {
			return nil, fmt.Errorf("v1beta2 MetricValueList: %w", err)
		}
		for _, it := range l.Items {
			names = append(names, it.DescribedObject.Name)
		}
	case "v1beta1":
		var l cmv1beta1.MetricValueList
		if err := l.Unmarshal(u.Raw); err != nil {
			return nil, fmt.Errorf("v1beta1 MetricValueList: %w", err)
		}
		for _, it := range l.Items {
			names = append(names, it.DescribedObject.Name)
		}
	default:
		return nil, fmt.Errorf("no custom metrics version %q", version)
	}
	return names, nil
}

// jsonPodNames are the pods a JSON MetricValueList names: both versions
// name them at items[].describedObject.name.
func jsonPodNames(body []byte) ([]string, error) {
	var l struct {
		Kind  string `json:"kind"`
		Items []struct {
			DescribedObject struct {
				Name string `json:"name"`
			} `json:"describedObject"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("JSON: %w", err)
	}
	if l.Kind != "MetricValueList" {
		return nil, fmt.Errorf("JSON: kind %q, want MetricValueList", l.Kind)
	}
	names := make([]string, len(l.Items))
	for i, it := range l.Items {
		names[i] = it.DescribedObject.Name
	}
	return names, nil
}
