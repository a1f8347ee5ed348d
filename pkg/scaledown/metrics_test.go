package scaledown

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testutilCounter reads one series of a controller metric (0 if absent).
func testutilCounter(t *testing.T, c *Controller, name string, labels map[string]string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c.Collector()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// TestNodeMetrics: the autoscaler's view of every GPU node: utilization as
// requested over allocatable GPUs, the threshold, what blocks removal,
// and how long a node has been unneeded.
func TestNodeMetrics(t *testing.T) {
	disabled := gpuNode("blocked", 8)
	disabled.Annotations = map[string]string{ScaleDownDisabledAnnotation: "true"}
	bare := pod("other", "bare", "blocked", 1, false)
	bare.OwnerReferences = nil
	pinned := pod("other", "pinned", "blocked", 1, false)
	pinned.Annotations = map[string]string{SafeToEvictAnnotation: "false"}
	yes := true
	ds := pod("kube-system", "ds", "blocked", 0, false)
	ds.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds", Controller: &yes}}
	mirror := pod("kube-system", "mirror", "blocked", 0, false)
	mirror.OwnerReferences, mirror.Annotations = nil, map[string]string{MirrorPodAnnotation: "x"}
	done := pod("ns", "done", "half", 1, true)
	done.Status.Phase = corev1.PodSucceeded
	leaving := pod("ns", "leaving", "half", 1, true)
	now := metav1.NewTime(t0)
	leaving.DeletionTimestamp, leaving.Finalizers = &now, []string{"keep"}
	cpu := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}}

	f := newFixture(t, Config{}, gpuNode("empty", 8), gpuNode("half", 8), disabled, cpu,
		pod("ns", "h0", "half", 1, true), pod("ns", "h1", "half", 1, true), pod("ns", "h2", "half", 1, true),
		done, leaving, bare, pinned, ds, mirror)
	f.reconcile()
	f.clock.Step(5 * time.Minute)
	f.reconcile()
	f.clock.Step(5 * time.Minute)
	f.reconcile()

	want := `
# HELP gpuscale_scaledown_node_gpu_utilization GPU node utilization as the cluster autoscaler computes it: GPUs requested by the node's pods over allocatable GPUs.
# TYPE gpuscale_scaledown_node_gpu_utilization gauge
gpuscale_scaledown_node_gpu_utilization{node="blocked"} 0.25
gpuscale_scaledown_node_gpu_utilization{node="empty"} 0
gpuscale_scaledown_node_gpu_utilization{node="half"} 0.5
# HELP gpuscale_scaledown_node_gpu_pods Pods requesting GPUs on the node, not terminating: what consolidation ranks nodes by.
# TYPE gpuscale_scaledown_node_gpu_pods gauge
gpuscale_scaledown_node_gpu_pods{node="blocked"} 2
gpuscale_scaledown_node_gpu_pods{node="empty"} 0
gpuscale_scaledown_node_gpu_pods{node="half"} 3
# HELP gpuscale_scaledown_node_below_threshold 1 when the node's GPU utilization is below --scale-down-gpu-utilization-threshold.
# TYPE gpuscale_scaledown_node_below_threshold gauge
gpuscale_scaledown_node_below_threshold{node="blocked"} 1
gpuscale_scaledown_node_below_threshold{node="empty"} 1
gpuscale_scaledown_node_below_threshold{node="half"} 0
# HELP gpuscale_scaledown_node_blocked What keeps the cluster autoscaler from removing the node: pods annotated safe-to-evict=false, pods without a controller, or the node's scale-down-disabled annotation (1).
# TYPE gpuscale_scaledown_node_blocked gauge
gpuscale_scaledown_node_blocked{node="blocked",reason="pod_without_controller"} 1
gpuscale_scaledown_node_blocked{node="blocked",reason="safe_to_evict_false"} 1
gpuscale_scaledown_node_blocked{node="blocked",reason="scale_down_disabled"} 1
gpuscale_scaledown_node_blocked{node="empty",reason="pod_without_controller"} 0
gpuscale_scaledown_node_blocked{node="empty",reason="safe_to_evict_false"} 0
gpuscale_scaledown_node_blocked{node="empty",reason="scale_down_disabled"} 0
gpuscale_scaledown_node_blocked{node="half",reason="pod_without_controller"} 0
gpuscale_scaledown_node_blocked{node="half",reason="safe_to_evict_false"} 0
gpuscale_scaledown_node_blocked{node="half",reason="scale_down_disabled"} 0
# HELP gpuscale_scaledown_node_unneeded_seconds How long the node has been below the threshold with nothing blocking its removal; 0 otherwise.
# TYPE gpuscale_scaledown_node_unneeded_seconds gauge
gpuscale_scaledown_node_unneeded_seconds{node="blocked"} 0
gpuscale_scaledown_node_unneeded_seconds{node="empty"} 600
gpuscale_scaledown_node_unneeded_seconds{node="half"} 0
# HELP gpuscale_scaledown_node_removal_candidate 1 when the node has been unneeded for at least --scale-down-unneeded-time: the cluster autoscaler removes it if its pods fit elsewhere.
# TYPE gpuscale_scaledown_node_removal_candidate gauge
gpuscale_scaledown_node_removal_candidate{node="blocked"} 0
gpuscale_scaledown_node_removal_candidate{node="empty"} 1
gpuscale_scaledown_node_removal_candidate{node="half"} 0
# HELP gpuscale_scaledown_managed_pods Managed pods on nodes (label gpuscale.io/scale-down=managed).
# TYPE gpuscale_scaledown_managed_pods gauge
gpuscale_scaledown_managed_pods 3
# HELP gpuscale_scaledown_leader 1 in the adapter replica that runs the scale-down controller; only it reports node metrics.
# TYPE gpuscale_scaledown_leader gauge
gpuscale_scaledown_leader 0
`
	names := []string{"gpuscale_scaledown_node_gpu_utilization", "gpuscale_scaledown_node_gpu_pods", "gpuscale_scaledown_node_below_threshold",
		"gpuscale_scaledown_node_blocked", "gpuscale_scaledown_node_unneeded_seconds", "gpuscale_scaledown_node_removal_candidate",
		"gpuscale_scaledown_managed_pods", "gpuscale_scaledown_leader"}
	if err := testutil.CollectAndCompare(f.ctrl.Collector(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(f.ctrl.Collector()); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}

	f.ctrl.stopLeading()
	if n := testutil.CollectAndCount(f.ctrl.Collector(), "gpuscale_scaledown_node_gpu_utilization"); n != 0 {
		t.Errorf("after losing leadership %d node series, want none", n)
	}
}
