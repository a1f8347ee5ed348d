// Package podslim trims pods for the adapter's informer cache. With
// 10,000 pods the full objects (managed fields, specs, env) are most of
// the adapter's memory, so the cache keeps of each pod only what its
// readers read. Each package that reads pods from the cache exports a
// Keep naming the fields it needs, next to the code that reads them; the
// adapter composes them with Transform. A package that starts reading a
// field adds it to its own Keep, and its slim-versus-full test fails until
// it does.
package podslim

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Keep copies from full into slim the fields one reader needs. slim starts
// with the pod's identity (Identity); a Keep adds to it and never removes.
type Keep func(full, slim *corev1.Pod)

// Identity is what every slim pod has: what the informer keys it by.
func Identity(p *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
}

// Slim returns p's identity plus what keeps copy, its parts equal to a
// recent pod's shared with that pod (intern.go).
func Slim(p *corev1.Pod, keeps ...Keep) *corev1.Pod {
	out := Identity(p)
	for _, keep := range keeps {
		keep(p, out)
	}
	share(out)
	return out
}

// Transform is the pod informer's transform: Slim with keeps. Anything
// but a pod (a tombstone) passes through.
func Transform(keeps ...Keep) cache.TransformFunc {
	return func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		return Slim(p, keeps...), nil
	}
}

// Annotations copies the annotations whose key match accepts.
func Annotations(full, slim *corev1.Pod, match func(key string) bool) {
	for k, v := range full.Annotations {
		if match(k) {
			if slim.Annotations == nil {
				slim.Annotations = map[string]string{}
			}
			slim.Annotations[k] = v
		}
	}
}

// Container returns slim's container of that name, adding an empty one
// when it has none, so that several Keeps can fill one container.
func Container(slim *corev1.Pod, name string) *corev1.Container {
	return container(&slim.Spec.Containers, name)
}

// InitContainer is Container for init containers.
func InitContainer(slim *corev1.Pod, name string) *corev1.Container {
	return container(&slim.Spec.InitContainers, name)
}

func container(cs *[]corev1.Container, name string) *corev1.Container {
	for i := range *cs {
		if (*cs)[i].Name == name {
			return &(*cs)[i]
		}
	}
	*cs = append(*cs, corev1.Container{Name: name})
	return &(*cs)[len(*cs)-1]
}

// Condition copies the type, status and transition time of full's
// condition of type t.
func Condition(full, slim *corev1.Pod, t corev1.PodConditionType) {
	for _, c := range slim.Status.Conditions {
		if c.Type == t {
			return
		}
	}
	for _, c := range full.Status.Conditions {
		if c.Type == t {
			// The transition time is what start-up times are measured
			// from (recommend.StartupTime); it costs a few bytes.
			slim.Status.Conditions = append(slim.Status.Conditions, corev1.PodCondition{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime})
			return
		}
	}
}
