package leaderworkerset

import (
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/gpuscale/gpuscale/pkg/kube/podgroup"
)

// TestVictims: LeaderWorkerSet's order removes the highest indexes; the
// deletion-cost order the groups whose leaders cost least, ties by the
// highest index, and a missing or invalid cost reads as 0.
func TestVictims(t *testing.T) {
	costs := map[int]string{0: "300", 1: "-5", 2: "100", 3: "", 4: "junk"} // group -> leader's cost
	groups := map[int][]*corev1.Pod{}
	for g, c := range costs {
		for w := range 2 {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "llm-" + strconv.Itoa(g) + "-" + strconv.Itoa(w), Labels: map[string]string{
				podgroup.SetLabel: "llm", podgroup.GroupIndexLabel: strconv.Itoa(g), podgroup.WorkerIndexLabel: strconv.Itoa(w)}}}
			if w == 0 {
				p.Annotations = map[string]string{"controller.kubernetes.io/pod-deletion-cost": c}
			} else {
				p.Annotations = map[string]string{"controller.kubernetes.io/pod-deletion-cost": "-1000"} // workers' costs are not read
			}
			groups[g] = append(groups[g], p)
		}
	}
	for _, tt := range []struct {
		order ScaleDownOrder
		n     int
		want  []int
	}{
		{HighestIndex, 2, []int{4, 3}},
		{DeletionCost, 1, []int{1}},
		{DeletionCost, 3, []int{1, 4, 3}},
		{DeletionCost, 5, []int{1, 4, 3, 2, 0}},
	} {
		c := &Controller{Order: tt.order}
		if got := c.victims(groups, tt.n); !slices.Equal(got, tt.want) {
			t.Errorf("order %d, %d victims: %v, want %v", tt.order, tt.n, got, tt.want)
		}
	}
}

// TestHPAPodSelector: the scale subresource's selector picks a set's
// leaders and nothing else.
func TestHPAPodSelector(t *testing.T) {
	sel, err := labels.Parse(HPAPodSelector("llm"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		set, worker string
		want        bool
	}{{"llm", "0", true}, {"llm", "1", false}, {"other", "0", false}} {
		if got := sel.Matches(labels.Set{podgroup.SetLabel: tt.set, podgroup.WorkerIndexLabel: tt.worker}); got != tt.want {
			t.Errorf("set %s worker %s: matches %v, want %v", tt.set, tt.worker, got, tt.want)
		}
	}
}

// TestCRDShape: the embedded CRD names what the controller addresses and
// has the scale subresource an HPA reads.
func TestCRDShape(t *testing.T) {
	var crd struct {
		Metadata struct{ Name string }
		Spec     struct {
			Group    string
			Names    struct{ Kind, Plural string }
			Versions []struct {
				Name         string
				Subresources struct {
					Scale *struct{ SpecReplicasPath, StatusReplicasPath, LabelSelectorPath string }
				}
			}
		}
	}
	if err := yaml.Unmarshal(CRD, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Metadata.Name != CRDName || crd.Spec.Group != Group || crd.Spec.Names.Kind != Kind || crd.Spec.Names.Plural != Resource {
		t.Errorf("CRD %s (%s, %s/%s) does not match the controller's %s", crd.Metadata.Name, crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Names.Plural, CRDName)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != Version || crd.Spec.Versions[0].Subresources.Scale == nil {
		t.Fatalf("CRD versions %+v: want %s with a scale subresource", crd.Spec.Versions, Version)
	}
	s := crd.Spec.Versions[0].Subresources.Scale
	if s.SpecReplicasPath != ".spec.replicas" || s.StatusReplicasPath != ".status.replicas" || s.LabelSelectorPath != ".status.hpaPodSelector" {
		t.Errorf("scale subresource %+v", *s)
	}
}
