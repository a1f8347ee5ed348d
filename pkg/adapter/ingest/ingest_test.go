package ingest

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuscale/gpuscale/pkg/adapter/inference"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

const exposition = `
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",GPU_I_ID="",namespace="ml",pod="p1",container="c"} 90
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",GPU_I_ID="",namespace="ml",pod="p1",container="c"} 50
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-c",GPU_I_ID="",namespace="",pod="",container=""} 10
DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-d",GPU_I_ID="",namespace="ml",pod="p2",container="c"} 40
DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-d",GPU_I_ID="",namespace="ml",pod="p3",container="c"} 40
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",GPU_I_ID="",namespace="ml",pod="p1",container="c"} 1000
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-b",GPU_I_ID="",namespace="ml",pod="p1",container="c"} 3000
DCGM_FI_DEV_FB_USED{gpu="5",UUID="GPU-f",GPU_I_ID="1",GPU_I_PROFILE="1g.10gb",namespace="ml",pod="mig",container="c"} 2000
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-a",GPU_I_ID="",namespace="ml",pod="p1",container="c"} 8500
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-b",GPU_I_ID="",namespace="ml",pod="p1",container="c"} 6500
DCGM_FI_DEV_FB_FREE{gpu="5",UUID="GPU-f",GPU_I_ID="1",GPU_I_PROFILE="1g.10gb",namespace="ml",pod="mig",container="c"} 8000
# TYPE DCGM_FI_DEV_FB_RESERVED gauge
DCGM_FI_DEV_FB_RESERVED{gpu="0",UUID="GPU-a",GPU_I_ID="",namespace="ml",pod="p1",container="c"} 500
DCGM_FI_DEV_FB_RESERVED{gpu="1",UUID="GPU-b",GPU_I_ID="",namespace="ml",pod="p1",container="c"} 500
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",GPU_I_ID="",namespace="ml",pod="p1",container="c"} 300
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b",GPU_I_ID="",namespace="ml",pod="p1",container="c"} 200
`

func TestGPU(t *testing.T) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	pods, node, rejected, err := GPU(families)
	if err != nil || len(rejected) > 0 {
		t.Fatalf("err %v, rejected %v", err, rejected)
	}
	get := func(k store.Key, sig signal.Signal) (float64, bool) {
		s, found := pods[k]
		if !found {
			return 0, false
		}
		return s.Get(sig)
	}
	p1 := store.Key{Namespace: "ml", Name: "p1"}
	cases := []struct {
		name string
		key  store.Key
		sig  signal.Signal
		want float64 // NaN: absent
	}{
		{"mean utilization over a pod's GPUs", p1, signal.GPUUtilization, 70},
		{"memory used summed, in bytes", p1, signal.GPUMemoryUsedBytes, 4000 * mib},
		{"memory utilization over used+free+reserved", p1, signal.GPUMemoryUtilization, 100 * 4000.0 / 20000},
		{"power summed", p1, signal.GPUPowerWatts, 500},
		{"time-sliced GPU counts for each pod", store.Key{Namespace: "ml", Name: "p2"}, signal.GPUUtilization, 40},
		{"second pod on the shared GPU", store.Key{Namespace: "ml", Name: "p3"}, signal.GPUUtilization, 40},
		{"MIG instance: memory but no utilization", store.Key{Namespace: "ml", Name: "mig"}, signal.GPUUtilization, math.NaN()},
		{"MIG memory", store.Key{Namespace: "ml", Name: "mig"}, signal.GPUMemoryUsedBytes, 2000 * mib},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := get(tc.key, tc.sig)
			if math.IsNaN(tc.want) {
				if ok {
					t.Fatalf("got %v, want no value", v)
				}
				return
			}
			if !ok || math.Abs(v-tc.want) > 1e-9 {
				t.Fatalf("got %v (ok=%v), want %v", v, ok, tc.want)
			}
		})
	}
	// The node: whole GPUs only (the MIG instance is not double counted),
	// unattributed GPUs included.
	if v, _ := node.Get(signal.GPUUtilization); math.Abs(v-(90+50+10+40)/4.0) > 1e-9 {
		t.Errorf("node utilization = %v, want the mean of the four readable whole GPUs", v)
	}
	if _, _, _, err := GPU(nil); !errors.Is(err, ErrNoGPUSeries) || Reason(err) != ReasonNoGPUSeries {
		t.Errorf("an empty scrape: err = %v, want ErrNoGPUSeries", err)
	}
}

func TestInference(t *testing.T) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(`# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 4
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 9
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.25
`))
	if err != nil {
		t.Fatal(err)
	}
	s, d, rejected, err := Inference(families)
	if err != nil || d != inference.VLLM || s.Model != "m" || len(rejected) > 0 {
		t.Fatalf("dialect %v model %q err %v", d, s.Model, err)
	}
	for sig, want := range map[signal.Signal]float64{signal.QueueDepth: 4, signal.RequestsRunning: 9, signal.KVCacheUtilization: 25} {
		if v, ok := s.Get(sig); !ok || v != want {
			t.Errorf("signal %d = %v (ok=%v), want %v", sig, v, ok, want)
		}
	}
	unknown, _ := p.TextToMetricFamilies(strings.NewReader("# TYPE http_requests_total counter\nhttp_requests_total 3\n"))
	if _, _, _, err := Inference(unknown); !errors.Is(err, inference.ErrUnknownDialect) || Reason(err) != ReasonUnknownDialect {
		t.Errorf("unknown server: err = %v, want ErrUnknownDialect", err)
	}
}
