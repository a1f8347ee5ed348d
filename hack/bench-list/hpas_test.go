package main

import (
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestReadsBoth(t *testing.T) {
	v := resource.MustParse("3")
	object := autoscalingv2.MetricStatus{Type: autoscalingv2.ObjectMetricSourceType,
		Object: &autoscalingv2.ObjectMetricStatus{Current: autoscalingv2.MetricValueStatus{Value: &v}}}
	pods := autoscalingv2.MetricStatus{Type: autoscalingv2.PodsMetricSourceType,
		Pods: &autoscalingv2.PodsMetricStatus{Current: autoscalingv2.MetricValueStatus{AverageValue: &v}}}
	for _, tc := range []struct {
		name    string
		current []autoscalingv2.MetricStatus
		want    bool
	}{
		{"both read", []autoscalingv2.MetricStatus{object, pods}, true},
		// The HPA controller keeps an entry for a metric it could not
		// read, empty.
		{"the Object metric not read", []autoscalingv2.MetricStatus{{}, pods}, false},
		{"the Pods metric not read", []autoscalingv2.MetricStatus{object, {}}, false},
		{"none yet", nil, false},
	} {
		if got := readsBoth(tc.current); got != tc.want {
			t.Errorf("%s: readsBoth = %v, want %v", tc.name, got, tc.want)
		}
	}
}
