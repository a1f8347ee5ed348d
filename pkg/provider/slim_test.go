package provider_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuscale/gpuscale/pkg/kube/podslim"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// putObject adds or replaces a pod as an informer would.
func (f *fixture) putObject(pod *corev1.Pod) {
	old, exists, _ := f.pods.Get(pod)
	_ = f.pods.Add(pod)
	for _, h := range f.events.handlers {
		if exists {
			h.OnUpdate(old, pod)
		} else {
			h.OnAdd(pod, false)
		}
	}
}

// TestAnswersOnSlimPods: the provider answers the same for pods slimmed by
// KeepPodFields as for the full pods, through readiness changes and
// resyncs.
func TestAnswersOnSlimPods(t *testing.T) {
	now := metav1.NewTime(t0)
	mk := func(name string, ready corev1.ConditionStatus, app string, mutate ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, Labels: map[string]string{"app": app}, UID: types.UID("uid-" + name),
				ResourceVersion: "1", Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
			Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c", Image: "vllm"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: ready},
				{Type: corev1.PodReady, Status: ready, Reason: "r"}}},
		}
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	pods := []*corev1.Pod{
		mk("ready", corev1.ConditionTrue, "llm"),
		mk("not-ready", corev1.ConditionFalse, "llm"),
		mk("other-app", corev1.ConditionTrue, "web"),
		mk("terminating", corev1.ConditionTrue, "llm", func(p *corev1.Pod) { p.DeletionTimestamp = &now }),
		mk("pending", corev1.ConditionTrue, "llm", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }),
		mk("no-condition", corev1.ConditionTrue, "llm", func(p *corev1.Pod) { p.Status.Conditions = nil }),
	}
	full, slim := newFixture(), newFixture()
	for _, f := range []*fixture{full, slim} {
		for i, p := range pods {
			f.put("ml", p.Name, signal.SourceInference, t0, "m", map[signal.Signal]float64{signal.QueueDepth: float64(i + 1)}, nil)
		}
	}
	apply := func(p *corev1.Pod) {
		full.putObject(p)
		slim.putObject(podslim.Slim(p, provider.KeepPodFields))
	}
	answers := func(f *fixture) string {
		var out string
		for _, sel := range []labels.Selector{labels.Everything(), labels.SelectorFromSet(map[string]string{"app": "llm"})} {
			l, err := f.p.GetMetricBySelector(context.Background(), "ml", sel, podsInfo(provider.QueueDepth), labels.Everything())
			if apierrors.IsNotFound(err) {
				out += sel.String() + ": not found\n"
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range l.Items {
				out += fmt.Sprintf("%s: %s=%s\n", sel, it.DescribedObject.Name, it.Value.String())
			}
		}
		for _, p := range pods {
			v, err := f.p.GetMetricByName(context.Background(), types.NamespacedName{Namespace: "ml", Name: p.Name}, podsInfo(provider.QueueDepth), labels.Everything())
			if err != nil {
				out += fmt.Sprintf("%s: %v\n", p.Name, apierrors.ReasonForError(err))
			} else {
				out += fmt.Sprintf("%s: %s\n", p.Name, v.Value.String())
			}
		}
		return out
	}
	for _, p := range pods {
		apply(p)
	}
	steps := []struct {
		name string
		do   func()
	}{
		{"added", func() {}},
		{"becomes ready", func() {
			p := mk("not-ready", corev1.ConditionTrue, "llm")
			p.ResourceVersion = "2"
			apply(p)
		}},
		{"resync", func() {
			p := mk("not-ready", corev1.ConditionTrue, "llm")
			p.ResourceVersion = "2"
			apply(p)
		}},
		{"relabelled", func() {
			p := mk("other-app", corev1.ConditionTrue, "llm")
			p.ResourceVersion = "2"
			apply(p)
		}},
	}
	for _, st := range steps {
		st.do()
		want, got := answers(full), answers(slim)
		if got != want {
			t.Errorf("%s: slim pods answer\n%s\nfull pods\n%s", st.name, got, want)
		}
		if !strings.Contains(want, "\nready: 1\n") {
			t.Fatalf("%s: the full pods' answers lack the ready pod's value:\n%s", st.name, want)
		}
	}
}
