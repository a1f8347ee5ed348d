package devenv

import "testing"

func TestCounterSum(t *testing.T) {
	const body = `# TYPE gpuscale_adapter_metric_requests_total counter
gpuscale_adapter_metric_requests_total{api="external",metric="inference_queue_depth",resource="namespaces",result="ok"} 7
gpuscale_adapter_metric_requests_total{api="external",metric="inference_queue_depth",resource="namespaces",result="not_found"} 2
gpuscale_adapter_metric_requests_total{api="custom",metric="inference_queue_depth",resource="deployments.apps",result="ok"} 5
# TYPE gpuscale_adapter_keda_scaler_requests_total counter
gpuscale_adapter_keda_scaler_requests_total{method="IsActive",code="OK"} 11
`
	tests := []struct {
		name   string
		family string
		labels map[string]string
		want   float64
	}{
		{"one series", "gpuscale_adapter_metric_requests_total", map[string]string{"api": "external", "result": "ok"}, 7},
		{"summed over the rest", "gpuscale_adapter_metric_requests_total", map[string]string{"metric": "inference_queue_depth"}, 14},
		{"no labels: all", "gpuscale_adapter_metric_requests_total", nil, 14},
		{"a label no series has", "gpuscale_adapter_metric_requests_total", map[string]string{"api": "external", "zone": "a"}, 0},
		{"no match", "gpuscale_adapter_metric_requests_total", map[string]string{"api": "other"}, 0},
		{"another family", "gpuscale_adapter_keda_scaler_requests_total", map[string]string{"method": "IsActive"}, 11},
		{"absent family", "gpuscale_adapter_nothing_total", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := counterSum([]byte(body), tt.family, tt.labels)
			if err != nil || got != tt.want {
				t.Errorf("counterSum(%s, %v) = %v, %v; want %v", tt.family, tt.labels, got, err, tt.want)
			}
		})
	}
	if _, err := counterSum([]byte("not { an exposition\n"), "x", nil); err == nil {
		t.Error("a broken exposition read without error")
	}
}
