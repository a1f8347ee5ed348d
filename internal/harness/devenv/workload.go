package devenv

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/internal/harness/localcluster"
	"github.com/gpuscale/gpuscale/internal/harness/simworld"
)

// InferenceDeployment is a Deployment of simulated vLLM servers, one GPU
// each, annotated for the adapter to scrape, selected by app=name and
// serving the model "model-<name>". extraPodLabels are added to the pod
// template (the scale-down opt-in label, say).
func InferenceDeployment(namespace, name string, replicas int32, extraPodLabels map[string]string) *appsv1.Deployment {
	selector := map[string]string{"app": name}
	podLabels := map[string]string{"app": name}
	for k, v := range extraPodLabels {
		podLabels[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: map[string]string{"gpuscale.io/scrape": "true"}},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{localcluster.GPUToleration()},
					Containers: []corev1.Container{{
						Name: "vllm", Image: simworld.InferenceImage,
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}},
						Env:   []corev1.EnvVar{{Name: "SIM_MODEL", Value: "model-" + name}},
						Resources: corev1.ResourceRequirements{
							Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
						},
					}},
				},
			},
		},
	}
}

// RouterPort is the port simulated routers serve their metrics on, the
// endpoint picker's.
const RouterPort = 9090

// RouterPod is a simulated endpoint picker (simworld.RouterImage) in front
// of the pods backends selects, for model, annotated for the adapter to
// scrape: it holds the model's requests while none of them is ready.
func RouterPod(namespace, name string, backends map[string]string, model string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app": name},
			Annotations: map[string]string{"gpuscale.io/scrape": "true"}},
		Spec: corev1.PodSpec{
			Tolerations: []corev1.Toleration{localcluster.GPUToleration()},
			Containers: []corev1.Container{{
				Name: "epp", Image: simworld.RouterImage,
				Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: RouterPort}},
				Env: []corev1.EnvVar{
					{Name: "SIM_ROUTE_SELECTOR", Value: labels.SelectorFromSet(backends).String()},
					{Name: "SIM_MODEL", Value: model},
				},
			}},
		},
	}
}
