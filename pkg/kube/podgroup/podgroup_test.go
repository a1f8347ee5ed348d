package podgroup

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func pod(ns string, l map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Labels: l}}
}

func TestOf(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   Group
		ok     bool
		leader bool
	}{
		{"leader", map[string]string{SetLabel: "llm", GroupIndexLabel: "2", WorkerIndexLabel: "0"}, Group{"ml", "llm", 2}, true, true},
		{"worker", map[string]string{SetLabel: "llm", GroupIndexLabel: "2", WorkerIndexLabel: "3"}, Group{"ml", "llm", 2}, true, false},
		{"no group", map[string]string{"app": "llm"}, Group{}, false, false},
		{"no index", map[string]string{SetLabel: "llm", WorkerIndexLabel: "0"}, Group{}, false, false},
		{"bad index", map[string]string{SetLabel: "llm", GroupIndexLabel: "-1", WorkerIndexLabel: "0"}, Group{}, false, false},
		{"not a number", map[string]string{SetLabel: "llm", GroupIndexLabel: "x", WorkerIndexLabel: "0"}, Group{}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pod("ml", tt.labels)
			g, ok := Of(p)
			if g != tt.want || ok != tt.ok || IsLeader(p) != tt.leader {
				t.Errorf("Of = %v, %v, leader %v; want %v, %v, %v", g, ok, IsLeader(p), tt.want, tt.ok, tt.leader)
			}
			if ok && !g.Selector().Matches(labels.Set(p.Labels)) {
				t.Errorf("the group's selector %v does not select its own pod", g.Selector())
			}
		})
	}
	other := Group{"ml", "llm", 3}
	if other.Selector().Matches(labels.Set{SetLabel: "llm", GroupIndexLabel: "2"}) || Compare(Group{"ml", "llm", 2}, other) >= 0 {
		t.Error("groups 2 and 3 of one set are not told apart")
	}
}

// BenchmarkIsLeader asks of a pod of no group, as a list of a Deployment's
// pods asks of each.
func BenchmarkIsLeader(b *testing.B) {
	p := pod("ml", map[string]string{"app": "llm", "pod-template-hash": "5f7c9d"})
	b.ReportAllocs()
	for b.Loop() {
		if IsLeader(p) {
			b.Fatal("a pod of no group is a leader")
		}
	}
}
