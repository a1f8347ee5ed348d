package provider_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"

	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// BenchmarkListEncode10k is a Pods list of 10,000 pods as the API server
// answers the HPA: the provider's list, its conversion to v1beta2 and its
// protobuf encoding (without the response's gzip). Queue depths repeat
// (0-8, as a fleet's do); the TTFT p90s of the benchmark's pods too.
func BenchmarkListEncode10k(b *testing.B) {
	for _, metric := range []string{provider.QueueDepth, provider.GPUUtilization} {
		b.Run(metric, func(b *testing.B) {
			f := newFixture()
			sel := map[string]string{"app": "llm"}
			for i := range 10000 {
				name := fmt.Sprintf("llm-%05d", i)
				f.addPod("ml", name, true, sel)
				f.put("ml", name, signal.SourceInference, t0.Add(-5*time.Second), "m",
					map[signal.Signal]float64{signal.QueueDepth: float64(i % 9), signal.RequestsRunning: 3}, nil)
				f.put("ml", name, signal.SourceGPU, t0.Add(-5*time.Second), "",
					map[signal.Signal]float64{signal.GPUUtilization: float64(i%100) + 0.5}, nil)
			}
			selector := labels.SelectorFromSet(sel)
			b.ReportAllocs()
			size := 0
			for b.Loop() {
				list, err := f.p.GetMetricBySelector(context.Background(), "ml", selector, podsInfo(metric), labels.Everything())
				if err != nil || len(list.Items) != 10000 {
					b.Fatalf("items %d, err %v", len(list.Items), err)
				}
				var out v1beta2.MetricValueList
				if err := v1beta2.Convert_custom_metrics_MetricValueList_To_v1beta2_MetricValueList(list, &out, nil); err != nil {
					b.Fatal(err)
				}
				data, err := out.Marshal()
				if err != nil {
					b.Fatal(err)
				}
				size = len(data)
			}
			b.ReportMetric(float64(size), "bytes")
		})
	}
}
