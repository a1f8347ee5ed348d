package ingest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

func parse(t testing.TB, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return fams
}

// dcgmSeries renders one series of a DCGM field for a device held by a pod.
func dcgmSeries(field, uuid, pod string, v string) string {
	return fmt.Sprintf("%s{gpu=\"0\",UUID=%q,GPU_I_ID=\"\",namespace=\"ml\",pod=%q} %s\n", field, uuid, pod, v)
}

// busy is a pod p2 on a healthy GPU beside whatever a case adds: one broken
// device must not cost another pod its values.
var busy = dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-z", "p2", "40") +
	dcgmSeries("DCGM_FI_DEV_POWER_USAGE", "GPU-z", "p2", "300")

var (
	p1 = store.Key{Namespace: "ml", Name: "p1"}
	p2 = store.Key{Namespace: "ml", Name: "p2"}
)

func TestGPURejectsValues(t *testing.T) {
	manyAtMax := func(field, v string, n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(dcgmSeries(field, fmt.Sprintf("GPU-%d", i), "p1", v))
		}
		return b.String()
	}
	tests := []struct {
		name   string
		in     string
		reason string
		// gone are p1's signals that must have no value; kept, the
		// ones that must.
		gone, kept []signal.Signal
		nodeUtil   bool   // whether the node keeps a utilization
		series     string // what some rejection names; "" for any
	}{
		{
			name: "utilization 1e300",
			in: dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p1", "1e300") + dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-b", "p1", "50") +
				dcgmSeries("DCGM_FI_DEV_POWER_USAGE", "GPU-a", "p1", "250"),
			reason: ReasonOutOfRange, gone: []signal.Signal{signal.GPUUtilization}, kept: []signal.Signal{signal.GPUPowerWatts},
		},
		{
			name:   "utilization +Inf",
			in:     dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p1", "+Inf") + dcgmSeries("DCGM_FI_DEV_POWER_USAGE", "GPU-a", "p1", "250"),
			reason: ReasonNotFinite, gone: []signal.Signal{signal.GPUUtilization}, kept: []signal.Signal{signal.GPUPowerWatts},
		},
		{
			name:   "utilization NaN",
			in:     dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p1", "NaN") + dcgmSeries("DCGM_FI_DEV_POWER_USAGE", "GPU-a", "p1", "250"),
			reason: ReasonNotFinite, gone: []signal.Signal{signal.GPUUtilization}, kept: []signal.Signal{signal.GPUPowerWatts},
		},
		{
			name: "utilization 101",
			in:   dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p1", "101"), reason: ReasonOutOfRange,
			gone: []signal.Signal{signal.GPUUtilization},
		},
		{
			name: "negative power",
			in: dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p1", "30") + dcgmSeries("DCGM_FI_DEV_POWER_USAGE", "GPU-a", "p1", "-5") +
				dcgmSeries("DCGM_FI_DEV_POWER_USAGE", "GPU-b", "p1", "100"),
			reason: ReasonOutOfRange, gone: []signal.Signal{signal.GPUPowerWatts}, kept: []signal.Signal{signal.GPUUtilization}, nodeUtil: true,
		},
		{
			name: "framebuffer of 1e16 MiB",
			in: dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p1", "30") + dcgmSeries("DCGM_FI_DEV_FB_USED", "GPU-a", "p1", "1e16") +
				dcgmSeries("DCGM_FI_DEV_FB_FREE", "GPU-a", "p1", "1000"),
			reason: ReasonOutOfRange, gone: []signal.Signal{signal.GPUMemoryUsedBytes, signal.GPUMemoryUtilization},
			kept: []signal.Signal{signal.GPUUtilization}, nodeUtil: true,
		},
		{
			// Each reading in range, the sum past what any node holds.
			name:   "power summed past the range",
			in:     manyAtMax("DCGM_FI_DEV_POWER_USAGE", "20000", signal.MaxDevices+1),
			reason: ReasonOutOfRange, gone: []signal.Signal{signal.GPUPowerWatts}, nodeUtil: true,
			series: "gpu_power_watts over pod ml/p1's 1025 devices",
		},
		{
			name:   "memory summed past the range",
			in:     manyAtMax("DCGM_FI_DEV_FB_USED", fmt.Sprint(signal.MaxDeviceMemoryBytes/mib), signal.MaxDevices+1) + manyAtMax("DCGM_FI_DEV_FB_FREE", "0", signal.MaxDevices+1),
			reason: ReasonOutOfRange, gone: []signal.Signal{signal.GPUMemoryUsedBytes}, nodeUtil: true,
		},
		{
			name: "a histogram where a gauge belongs",
			in: dcgmSeries("DCGM_FI_DEV_FB_FREE", "GPU-a", "p1", "1000") + "# TYPE DCGM_FI_DEV_FB_USED histogram\n" +
				`DCGM_FI_DEV_FB_USED_bucket{UUID="GPU-a",GPU_I_ID="",namespace="ml",pod="p1",le="+Inf"} 1` + "\n",
			reason: ReasonWrongType, gone: []signal.Signal{signal.GPUMemoryUsedBytes, signal.GPUMemoryUtilization}, nodeUtil: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods, node, rejected, err := GPU(parse(t, tt.in+busy))
			if err != nil {
				t.Fatal(err)
			}
			if len(rejected) == 0 {
				t.Fatal("nothing rejected")
			}
			named := false
			for _, r := range rejected {
				if r.Reason != tt.reason {
					t.Errorf("rejection %q: reason %q, want %q", r.Error(), r.Reason, tt.reason)
				}
				named = named || strings.Contains(r.Series, tt.series)
			}
			if !named {
				t.Errorf("no rejection of %q among %v", tt.series, rejected)
			}
			p1s, p2s := pods[p1], pods[p2]
			for _, sig := range tt.gone {
				if v, ok := p1s.Get(sig); ok {
					t.Errorf("p1's %s = %g served", sig, v)
				}
			}
			for _, sig := range tt.kept {
				if _, ok := p1s.Get(sig); !ok {
					t.Errorf("p1's %s lost with the rejected reading", sig)
				}
			}
			if v, ok := p2s.Get(signal.GPUUtilization); !ok || v != 40 {
				t.Errorf("p2's utilization = %g, %v; another pod's broken device must not cost it", v, ok)
			}
			if v, ok := node.Get(signal.GPUUtilization); ok != tt.nodeUtil {
				t.Errorf("node utilization = %g, %v; want present=%v (a rejected reading voids the node's mean)", v, ok, tt.nodeUtil)
			}
			checkServable(t, pods, node)
		})
	}
}

// checkServable asserts that every value GPU returns passes its signal's
// check: finite and in range.
func checkServable(t testing.TB, pods map[store.Key]store.Sample, node store.Sample) {
	t.Helper()
	for k, s := range pods {
		for sig := signal.Signal(0); sig < signal.NumSignals; sig++ {
			if v, ok := s.Get(sig); ok {
				if err := sig.Check(v); err != nil {
					t.Fatalf("pod %v: %v", k, err)
				}
			}
		}
	}
	for sig := signal.Signal(0); sig < signal.NumSignals; sig++ {
		if v, ok := node.Get(sig); ok {
			if err := sig.Check(v); err != nil {
				t.Fatalf("node: %v", err)
			}
		}
	}
}

func TestGPURejectsDuplicates(t *testing.T) {
	label := func(n, v string) *dto.LabelPair { return &dto.LabelPair{Name: proto.String(n), Value: proto.String(v)} }
	gauge := func(v float64, labels ...*dto.LabelPair) *dto.Metric {
		return &dto.Metric{Label: labels, Gauge: &dto.Gauge{Value: proto.Float64(v)}}
	}
	family := func(ms ...*dto.Metric) map[string]*dto.MetricFamily {
		return map[string]*dto.MetricFamily{"DCGM_FI_DEV_POWER_USAGE": {
			Name: proto.String("DCGM_FI_DEV_POWER_USAGE"), Type: dto.MetricType_GAUGE.Enum(), Metric: ms,
		}}
	}
	tests := []struct {
		name string
		in   map[string]*dto.MetricFamily
	}{
		{"one series twice in the text", parse(t, dcgmSeries("DCGM_FI_DEV_POWER_USAGE", "GPU-a", "p1", "300")+
			dcgmSeries("DCGM_FI_DEV_POWER_USAGE", "GPU-a", "p1", "300"))},
		{"one series twice, labels in another order (protobuf)", family(
			gauge(300, label("UUID", "GPU-a"), label("pod", "p1"), label("namespace", "ml")),
			gauge(300, label("namespace", "ml"), label("UUID", "GPU-a"), label("pod", "p1")))},
		{"a label twice in one series (protobuf)", family(
			gauge(300, label("UUID", "GPU-a"), label("namespace", "ml"), label("pod", "p1"), label("pod", "victim")))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods, _, _, err := GPU(tt.in)
			if !errors.Is(err, ErrDuplicateSeries) || Reason(err) != ReasonDuplicateSeries {
				t.Fatalf("err = %v, want ErrDuplicateSeries", err)
			}
			if pods != nil {
				t.Fatalf("pods %v returned with the error: a duplicate is never summed", pods)
			}
		})
	}
}

func TestInferenceRejects(t *testing.T) {
	const negativeLE = `# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="m",le="-1"} 5
vllm:time_to_first_token_seconds_bucket{model_name="m",le="1"} 9
vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 10
vllm:time_to_first_token_seconds_count{model_name="m"} 10
vllm:time_to_first_token_seconds_sum{model_name="m"} 3
`
	tests := []struct {
		name   string
		in     string
		reason string // of the error; "" for none
		// rejected: the reason of every Rejection; gone, kept: signals.
		rejected   string
		gone, kept []signal.Signal
	}{
		{
			name: "queue of 1e16",
			in:   "vllm:num_requests_waiting{model_name=\"m\"} 1e16\nvllm:num_requests_running{model_name=\"m\"} 3\n",
			gone: []signal.Signal{signal.QueueDepth}, kept: []signal.Signal{signal.RequestsRunning}, rejected: ReasonOutOfRange,
		},
		{
			name: "queue +Inf",
			in:   "vllm:num_requests_waiting{model_name=\"m\"} +Inf\nvllm:num_requests_running{model_name=\"m\"} 3\n",
			gone: []signal.Signal{signal.QueueDepth}, kept: []signal.Signal{signal.RequestsRunning}, rejected: ReasonNotFinite,
		},
		{
			name: "queue summed over engines past the range",
			in: "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 1073741824\n" +
				"vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 1073741824\n" +
				"vllm:num_requests_running{model_name=\"m\"} 3\n",
			gone: []signal.Signal{signal.QueueDepth}, kept: []signal.Signal{signal.RequestsRunning}, rejected: ReasonOutOfRange,
		},
		{
			name: "KV cache fraction 1e300",
			in:   "sglang:token_usage{model_name=\"m\"} 1e300\nsglang:num_queue_reqs{model_name=\"m\"} 2\n",
			gone: []signal.Signal{signal.KVCacheUtilization}, kept: []signal.Signal{signal.QueueDepth}, rejected: ReasonOutOfRange,
		},
		{
			name:   "duplicate series",
			in:     "vllm:num_requests_waiting{model_name=\"m\"} 4\nvllm:num_requests_waiting{model_name=\"m\"} 4\n",
			reason: ReasonDuplicateSeries,
		},
		{
			name:   "negative le",
			in:     negativeLE + "vllm:num_requests_waiting{model_name=\"m\"} 4\n",
			reason: ReasonInvalidHistogram,
		},
		{
			name: "non-monotonic bounds",
			in: `# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{model_name="m",le="1"} 4
sglang:time_to_first_token_seconds_bucket{model_name="m",le="0.5"} 5
sglang:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 5
`,
			reason: ReasonInvalidHistogram,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, rejected, err := Inference(parse(t, tt.in))
			if tt.reason != "" {
				if Reason(err) != tt.reason {
					t.Fatalf("err = %v (reason %q), want reason %q", err, Reason(err), tt.reason)
				}
				if _, ok := s.Get(signal.QueueDepth); ok || s.TTFT != nil {
					t.Fatalf("a rejected scrape returned values: %+v", s)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(rejected) == 0 {
				t.Fatal("nothing rejected")
			}
			for _, r := range rejected {
				if r.Reason != tt.rejected {
					t.Errorf("rejection %q: reason %q, want %q", r.Error(), r.Reason, tt.rejected)
				}
			}
			for _, sig := range tt.gone {
				if v, ok := s.Get(sig); ok {
					t.Errorf("%s = %g served", sig, v)
				}
			}
			for _, sig := range tt.kept {
				if _, ok := s.Get(sig); !ok {
					t.Errorf("%s lost with the rejected series", sig)
				}
			}
		})
	}
}

// A target chooses its label values, of any size: what a rejection or an
// error quotes of them is bounded.
func TestRejectionTextBounded(t *testing.T) {
	long := strings.Repeat("é", 100_000)
	_, _, rejected, err := GPU(parse(t, dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", long, "1e300")))
	if err != nil || len(rejected) != 1 {
		t.Fatalf("err %v, rejected %d", err, len(rejected))
	}
	_, _, _, dupErr := GPU(parse(t, dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", long, "1")+dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", long, "1")))
	_, _, _, histErr := Inference(parse(t, "# TYPE vllm:time_to_first_token_seconds histogram\n"+
		"vllm:time_to_first_token_seconds_bucket{engine=\""+long+"\",le=\"-1\"} 1\n"+
		"vllm:time_to_first_token_seconds_bucket{engine=\""+long+"\",le=\"+Inf\"} 1\n"))
	for name, msg := range map[string]string{"rejection": rejected[0].Error(), "duplicate": fmt.Sprint(dupErr), "histogram": fmt.Sprint(histErr)} {
		if len(msg) > 2*maxSeriesText || !utf8.ValidString(msg) || !strings.Contains(msg, "(truncated)") {
			t.Errorf("%s: %d bytes: %.80q...", name, len(msg), msg)
		}
	}
	if Reason(dupErr) != ReasonDuplicateSeries || Reason(histErr) != ReasonInvalidHistogram {
		t.Errorf("reasons %q, %q", Reason(dupErr), Reason(histErr))
	}
}

// TestHostileHistogramsAndNames: a vLLM whose TTFT histogram has 4,096
// buckets and whose model name is 2 KB, both within every per-scrape
// limit, keeps the signals they do not touch; the histogram and the
// series naming the model are rejected under their own reasons.
func TestHostileHistogramsAndNames(t *testing.T) {
	var b strings.Builder
	b.WriteString("# TYPE vllm:time_to_first_token_seconds histogram\n")
	for i := range 4095 {
		fmt.Fprintf(&b, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"%d\"} %d\n", i+1, i)
	}
	b.WriteString("vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 5000\nvllm:time_to_first_token_seconds_count{model_name=\"m\"} 5000\nvllm:time_to_first_token_seconds_sum{model_name=\"m\"} 7\n")
	fmt.Fprintf(&b, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=%q} 4\n", strings.Repeat("n", 2048))
	b.WriteString("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 2\n")
	s, _, rejected, err := Inference(parse(t, b.String()))
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, r := range rejected {
		reasons[r.Reason]++
	}
	if reasons[ReasonTooManyBuckets] != 1 || reasons[ReasonModelName] != 1 || len(rejected) != 2 {
		t.Errorf("rejections by reason %v", reasons)
	}
	if v, ok := s.Get(signal.QueueDepth); !ok || v != 2 || s.TTFT != nil || s.Model != "m" {
		t.Errorf("queue %v %v, TTFT kept %v, model %.40q", v, ok, s.TTFT != nil, s.Model)
	}
	if _, ok := s.Get(signal.RequestsRunning); ok {
		t.Error("running served from a series naming a 2 KB model")
	}
}
