package devenv

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/internal/harness/localcluster"
	"github.com/gpuscale/gpuscale/internal/harness/simworld"
)

// createExporters runs the exporter as a DaemonSet, as in a cluster: the
// real DaemonSet controller and scheduler place one pod per GPU node, and
// the world runs each on its pod IP against that node's pod-resources
// socket, so the adapter discovers exporters exactly as it would for real.
func (e *Env) createExporters(ctx context.Context) error {
	labels := map[string]string{exporterLabel: ExporterName}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: ExporterName, Namespace: Namespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"nvidia.com/gpu.present": "true"},
					Tolerations:  []corev1.Toleration{localcluster.GPUToleration()},
					Containers: []corev1.Container{{Name: "exporter", Image: simworld.ExporterImage,
						Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9400}}}},
				},
			},
		},
	}
	if _, err := e.Cluster.Client().AppsV1().DaemonSets(Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("devenv: exporter DaemonSet: %w", err)
	}
	return nil
}
