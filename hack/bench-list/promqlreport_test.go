package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	cmv1beta1 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta1"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
)

// protobufList is a list as an API server answers it in protobuf: the
// magic, then the envelope around the list's own encoding.
func protobufList(t *testing.T, list interface{ Marshal() ([]byte, error) }) []byte {
	t.Helper()
	raw, err := list.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	u := runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeProtobuf}
	env, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]byte{}, protobufMagic...), env...)
}

func jsonList(t *testing.T, list any) []byte {
	t.Helper()
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func v1beta2List(names ...string) *cmv1beta2.MetricValueList {
	l := &cmv1beta2.MetricValueList{}
	l.Kind = "MetricValueList"
	for _, n := range names {
		l.Items = append(l.Items, cmv1beta2.MetricValue{DescribedObject: corev1.ObjectReference{Kind: "Pod", Name: n}})
	}
	return l
}

func v1beta1List(names ...string) *cmv1beta1.MetricValueList {
	l := &cmv1beta1.MetricValueList{}
	l.Kind = "MetricValueList"
	for _, n := range names {
		l.Items = append(l.Items, cmv1beta1.MetricValue{DescribedObject: corev1.ObjectReference{Kind: "Pod", Name: n}})
	}
	return l
}

func TestAnswerPods(t *testing.T) {
	tests := []struct {
		name, version string
		body          func(t *testing.T) []byte
		want          int
		err           string
	}{
		{"v1beta2 protobuf", "v1beta2", func(t *testing.T) []byte { return protobufList(t, v1beta2List("a", "b", "c")) }, 3, ""},
		{"v1beta1 protobuf", "v1beta1", func(t *testing.T) []byte { return protobufList(t, v1beta1List("a", "b")) }, 2, ""},
		{"v1beta2 JSON", "v1beta2", func(t *testing.T) []byte { return jsonList(t, v1beta2List("a", "b", "c", "d")) }, 4, ""},
		{"v1beta1 JSON", "v1beta1", func(t *testing.T) []byte { return jsonList(t, v1beta1List("a")) }, 1, ""},
		{"empty", "v1beta2", func(t *testing.T) []byte { return protobufList(t, v1beta2List()) }, 0, ""},
		{"a pod twice", "v1beta1", func(t *testing.T) []byte { return protobufList(t, v1beta1List("a", "b", "a")) }, 0, `pod "a" named twice`},
		{"a pod twice, JSON", "v1beta2", func(t *testing.T) []byte { return jsonList(t, v1beta2List("a", "a")) }, 0, `pod "a" named twice`},
		{"a Status, not a list", "v1beta2", func(t *testing.T) []byte { return []byte(`{"kind":"Status","code":404}`) }, 0, `kind "Status"`},
		{"no version", "v2", func(t *testing.T) []byte { return protobufList(t, v1beta2List("a")) }, 0, `no custom metrics version "v2"`},
		{"truncated", "v1beta2", func(t *testing.T) []byte { b := protobufList(t, v1beta2List("a", "b")); return b[:len(b)-3] }, 0, "protobuf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := answerPods(tt.version, tt.body(t))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("answerPods = %d, %v; want an error with %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("answerPods = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestCPUMeter(t *testing.T) {
	type window struct {
		before, after cpuTimes
		wall          time.Duration
	}
	tests := []struct {
		name    string
		idle    map[string]float64
		windows []window
		n       int
		want    map[string]time.Duration
	}{
		{"no idle", nil, []window{
			{cpuTimes{procPrometheus: 0}, cpuTimes{procPrometheus: 30 * time.Millisecond}, 50 * time.Millisecond},
			{cpuTimes{procPrometheus: 100 * time.Millisecond}, cpuTimes{procPrometheus: 110 * time.Millisecond}, 50 * time.Millisecond},
		}, 2, map[string]time.Duration{procPrometheus: 20 * time.Millisecond}},
		{"idle subtracted by the window's length", map[string]float64{procAPIServer: 0.1}, []window{
			{cpuTimes{procAPIServer: 0}, cpuTimes{procAPIServer: 200 * time.Millisecond}, time.Second},
		}, 1, map[string]time.Duration{procAPIServer: 100 * time.Millisecond}},
		// A scrape's CPU in one window, none in the next: the
		// shortfall is not clamped away window by window.
		{"negative windows average out", map[string]float64{procPrometheus: 0.2}, []window{
			{cpuTimes{procPrometheus: 0}, cpuTimes{procPrometheus: 0}, 100 * time.Millisecond},
			{cpuTimes{procPrometheus: 0}, cpuTimes{procPrometheus: 80 * time.Millisecond}, 100 * time.Millisecond},
		}, 2, map[string]time.Duration{procPrometheus: 20 * time.Millisecond}},
		{"the total is clamped at 0", map[string]float64{procEtcd: 1}, []window{
			{cpuTimes{procEtcd: 0}, cpuTimes{procEtcd: 10 * time.Millisecond}, 100 * time.Millisecond},
		}, 1, map[string]time.Duration{procEtcd: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newCPUMeter(tt.idle)
			for _, w := range tt.windows {
				m.add(w.before, w.after, w.wall)
			}
			got := m.per(tt.n)
			for p, want := range tt.want {
				if got[p] != want {
					t.Errorf("%s: %v per list, want %v", p, got[p], want)
				}
			}
		})
	}
}

func TestPairRatios(t *testing.T) {
	side := func(median time.Duration, cpu map[string]time.Duration) sideResult {
		return sideResult{Latencies: []time.Duration{median / 2, median, 3 * median}, CPU: cpu}
	}
	tests := []struct {
		name                 string
		gs, pa               sideResult
		median, cpu, all     float64
		medianMet, cpuMet    bool
		medianWord, cpuWords string
	}{
		{
			name: "both goals met",
			gs:   side(50*time.Millisecond, map[string]time.Duration{procAdapter: 10 * time.Millisecond, procPrometheus: 10 * time.Millisecond, procAPIServer: 5 * time.Millisecond}),
			pa: side(2*time.Second, map[string]time.Duration{procAdapter: 1500 * time.Millisecond, procPrometheus: 500 * time.Millisecond,
				procAPIServer: 400 * time.Millisecond, procEtcd: 100 * time.Millisecond}),
			median: 40, cpu: 100, all: 100, medianMet: true, cpuMet: true,
		},
		{
			// The anchors' loaded run: Prometheus's share alike on both
			// sides keeps the CPU ratio under 10.
			name:   "prometheus alike on both sides",
			gs:     side(700*time.Millisecond, map[string]time.Duration{procAdapter: 140 * time.Millisecond, procPrometheus: 200 * time.Millisecond, procAPIServer: 25 * time.Millisecond}),
			pa:     side(7*time.Second, map[string]time.Duration{procAdapter: 1900 * time.Millisecond, procPrometheus: 200 * time.Millisecond, procAPIServer: 440 * time.Millisecond}),
			median: 10, cpu: 2100.0 / 340, all: 2540.0 / 365,
		},
		{
			name: "gpuscale measured nothing",
			gs:   side(0, map[string]time.Duration{}),
			pa:   side(time.Second, map[string]time.Duration{procAdapter: time.Second}),
		},
	}
	const eps = 1e-9
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := pairResult{GPUScale: tt.gs, PA: tt.pa}
			if got := r.medianRatio(); got < tt.median-eps || got > tt.median+eps {
				t.Errorf("median ratio %v, want %v", got, tt.median)
			}
			if got := r.cpuRatio(); got < tt.cpu-eps || got > tt.cpu+eps {
				t.Errorf("CPU ratio %v, want %v", got, tt.cpu)
			}
			if got := r.allCPURatio(); got < tt.all-eps || got > tt.all+eps {
				t.Errorf("all-CPU ratio %v, want %v", got, tt.all)
			}
			if got := strings.HasPrefix(verdict(r.medianRatio(), goalMedian), "met"); got != tt.medianMet {
				t.Errorf("median goal met = %v, want %v", got, tt.medianMet)
			}
			if got := strings.HasPrefix(verdict(r.cpuRatio(), goalCPU), "met"); got != tt.cpuMet {
				t.Errorf("CPU goal met = %v, want %v", got, tt.cpuMet)
			}
		})
	}
}

func TestPromQLMarkdown(t *testing.T) {
	r := pairResult{Pods: 10000, Requests: 3, Metric: "gpu_utilization", Accept: acceptProtobuf,
		Idle: map[string]float64{"gpuscale": 0.001, procPrometheus: 0.05},
		GPUScale: sideResult{Adapter: "gpuscale", Version: "v1beta2", Latencies: []time.Duration{time.Millisecond, 2 * time.Millisecond, 9 * time.Millisecond},
			CPU: map[string]time.Duration{procAdapter: time.Millisecond}},
		PA: sideResult{Adapter: "prometheus-adapter", Version: "v1beta1", Latencies: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second},
			CPU: map[string]time.Duration{procAdapter: time.Second}}}
	md := promqlMarkdown([]pairResult{r}, 5*time.Second, false)
	for _, want := range []string{
		"| 10000 | gpu_utilization | gpuscale | v1beta2 | protobuf | 3 | 2ms | 9ms | 9ms |",
		"| 10000 | gpu_utilization | prometheus-adapter | v1beta1 | protobuf | 3 | 2s | 3s | 3s |",
		"met (1000.0x, goal 20x)", "met (1000.0x, goal 10x)", "gpuscale 0.001, prometheus 0.050",
		"every list is a query",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
