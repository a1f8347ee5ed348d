package main

import (
	"encoding/json"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"

	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

// readmeHPA is the HPA the README recommends, without its behavior (the
// demo asks `adapter recommend`'s code for that), scaling the demo's
// Deployment.
func readmeHPA() *autoscalingv2.HorizontalPodAutoscaler {
	one, eight := int32(1), int32(8)
	value := recommend.CapacityTargetValue()
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: workload + "-capacity", Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: workload},
			MinReplicas:    &one, MaxReplicas: eight,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
				DescribedObject: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: workload},
				Metric:          autoscalingv2.MetricIdentifier{Name: "inference_capacity_utilization"},
				Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: value},
			}}},
		},
	}
}

// parseMetricValue reads the one value of a custom metrics API answer.
func parseMetricValue(b []byte) (float64, error) {
	var l cmv1beta2.MetricValueList
	if err := json.Unmarshal(b, &l); err != nil {
		return 0, err
	}
	if len(l.Items) != 1 {
		return 0, errNoValue
	}
	return l.Items[0].Value.AsApproximateFloat64(), nil
}
