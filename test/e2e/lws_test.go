package e2e

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/leaderworkerset"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
	"github.com/gpuscale/gpuscale/pkg/kube/podgroup"
	"github.com/gpuscale/gpuscale/pkg/scaledown"
)

// TestLeaderWorkerSetHPA: an HPA targets a LeaderWorkerSet-shaped
// resource through its scale subresource and scales it 1 -> 3 -> 1
// groups of a leader and a worker on inference_queue_depth, read from
// the leaders the scale subresource's selector picks (the group's
// endpoint). A leader's GPU memory in use is its group's. While three
// groups run, the scale-down controller gives every pod of a group its
// group's one deletion cost.
func TestLeaderWorkerSetHPA(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "e2e-lws")
	lws := startLWSController(t, ns, leaderworkerset.HighestIndex)
	createLWS(t, lws, "llm", 1, 1)
	waitGroups(t, lws, "llm", 1, 2)

	avg := resource.MustParse("5")
	zero := int32(0)
	minR := int32(1)
	h := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: leaderworkerset.APIVersion, Kind: leaderworkerset.Kind, Name: "llm"},
			MinReplicas:    &minR, MaxReplicas: 3,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "inference_queue_depth"},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &avg},
			}}},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &zero},
				ScaleUp:   &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: &zero},
			},
		},
	}
	if _, err := env.Cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(ns).Create(context.Background(), h, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leaders, err := labels.Parse(leaderworkerset.HPAPodSelector("llm"))
	if err != nil {
		t.Fatal(err)
	}
	path := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/pods/*/inference_queue_depth?labelSelector=" + url.QueryEscape(leaders.String())
	// The HPA lists a zero MetricStatus for a metric it failed to read,
	// so only a Pods status with a value shows that it read the signal.
	testenv.WaitFor(t, 60*time.Second, "the HPA to read the group's signal through /scale", func(ctx context.Context) (bool, error) {
		got := getHPA(t, ns, "llm")
		return got.Status.CurrentReplicas == 1 && len(got.Status.CurrentMetrics) > 0 && got.Status.CurrentMetrics[0].Pods != nil, nil
	})
	var items []string
	testenv.WaitFor(t, 30*time.Second, "the leaders' queue depth: one item, the leader llm-0's", func(ctx context.Context) (bool, error) {
		l, err := customList(ctx, path)
		if err != nil {
			return false, nil
		}
		items = items[:0]
		for _, it := range l.Items {
			items = append(items, it.DescribedObject.Name)
		}
		return len(items) == 1 && items[0] == "llm-0", nil
	})

	// A leader's GPU signals are its group's: its memory in use is the
	// sum over the leader's and the worker's GPUs, which hold the same
	// model instance (the worker's own value is its GPU's alone).
	memPath := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/pods/*/gpu_memory_used_bytes"
	var leaderMem, workerMem float64
	testenv.WaitFor(t, 30*time.Second, "the leader's GPU memory to be its group's", func(ctx context.Context) (bool, error) {
		l, err := customList(ctx, memPath)
		if err != nil {
			return false, nil
		}
		for _, it := range l.Items {
			switch it.DescribedObject.Name {
			case "llm-0":
				leaderMem = it.Value.AsApproximateFloat64()
			case "llm-0-1":
				workerMem = it.Value.AsApproximateFloat64()
			}
		}
		return workerMem > 0 && math.Abs(leaderMem-2*workerMem) <= 0.01*leaderMem, nil
	})
	t.Logf("GPU memory in use: leader llm-0 (its group's) %.0f MiB, worker llm-0-1 %.0f MiB", leaderMem/(1<<20), workerMem/(1<<20))

	env.World.SetRate(ns, leaders, 45) // about three groups' capacity
	toThree := testenv.WaitFor(t, 120*time.Second, "3 groups on the load step", func(ctx context.Context) (bool, error) {
		_, c := replicas(ctx, ns, "llm")
		return c == 3, nil
	})
	waitGroups(t, lws, "llm", 3, 6)
	l, err := customList(context.Background(), path)
	if err != nil || len(l.Items) != 3 {
		t.Fatalf("the leaders' queue depth with 3 groups: %v, %d items; want 3 (leaders only)", err, len(l.Items))
	}
	costs := waitGroupCosts(t, ns, 6)
	t.Logf("group costs with 3 groups: %v", costs)

	env.World.SetRate(ns, leaders, 0)
	toOne := testenv.WaitFor(t, 180*time.Second, "scale back to 1 group after the load stops", func(ctx context.Context) (bool, error) {
		_, c := replicas(ctx, ns, "llm")
		return c == 1, nil
	})
	waitGroups(t, lws, "llm", 1, 2)
	t.Logf("FIGURE LeaderWorkerSet (2 pods a group) via /scale: load step -> 3 groups in %v; load stops -> 1 group in %v (scrape %v, HPA sync %v)",
		toThree.Round(10*time.Millisecond), toOne.Round(10*time.Millisecond), scrapeInterval, hpaSync)
}

// TestLeaderWorkerSetConsolidation: six groups of two 2-GPU pods fill the
// three 8-GPU nodes, placed by the scheduler, then spread as multi-node
// groups are (pinned: some groups span two nodes); scaled to three groups
// by a controller that removes the groups of lowest deletion cost first,
// the scale-down controller's costs free as many nodes as the best choice
// of three groups does (checked against every choice). What
// LeaderWorkerSet's own order (the highest indexes first) frees on the
// same placement is reported beside it.
func TestLeaderWorkerSetConsolidation(t *testing.T) {
	needEnv(t)
	spread := [][2]int{{1, 2}, {1, 3}, {2, 3}, {1, 1}, {2, 2}, {3, 3}} // each group's two nodes
	for _, tc := range []struct {
		name   string
		nodeOf func(g, w int) string
	}{
		{"scheduler", nil},
		{"spread", func(g, w int) string { return fmt.Sprintf("gpu-node-%d", spread[g][w]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t, "e2e-lws-consolidation-"+tc.name)
			waitNoOtherGPUPods(t, ns)
			lws := startLWSController(t, ns, leaderworkerset.DeletionCost)
			lws.NodeOf = tc.nodeOf
			createLWS(t, lws, "llm", 6, 2)
			waitGroups(t, lws, "llm", 6, 12)
			before := groupPlacement(t, ns)
			costs := waitGroupCosts(t, ns, 12)

			patch := []byte(`{"spec":{"replicas":3}}`)
			if err := env.Cluster.Client().Discovery().RESTClient().Patch(types.MergePatchType).
				AbsPath("/apis/"+leaderworkerset.APIVersion+"/namespaces/"+ns+"/"+leaderworkerset.Resource, "llm").
				Body(patch).Do(context.Background()).Error(); err != nil {
				t.Fatal(err)
			}
			waitGroups(t, lws, "llm", 3, 6)
			after := groupPlacement(t, ns)
			var removed []int
			for g := range before {
				if _, ok := after[g]; !ok {
					removed = append(removed, g)
				}
			}
			slices.Sort(removed)
			got, best := freedNodes(before, removed), 0
			for _, c := range choose(slices.Sorted(maps.Keys(before)), 3) {
				best = max(best, freedNodes(before, c))
			}
			lwsOrder := freedNodes(before, []int{3, 4, 5})
			t.Logf("FIGURE LeaderWorkerSet 6 -> 3 groups (%s placement %v, group costs %v): removed %v, freeing %d GPU nodes (best possible %d; LeaderWorkerSet's highest-index order frees %d)",
				tc.name, before, costs, removed, got, best, lwsOrder)
			if got < best {
				t.Errorf("removing groups %v frees %d nodes; the best choice of 3 frees %d (placement %v)", removed, got, best, before)
			}
			if got < 1 {
				t.Errorf("no GPU node freed: groups %v", after)
			}
		})
	}
}

// startLWSController installs the LeaderWorkerSet-shaped CRD (once per
// cluster; apply is idempotent) and runs the test controller on ns until
// the test ends.
func startLWSController(t *testing.T, ns string, order leaderworkerset.ScaleDownOrder) *leaderworkerset.Controller {
	t.Helper()
	ctx := context.Background()
	crd := filepath.Join(t.TempDir(), "crd.yaml")
	if err := os.WriteFile(crd, leaderworkerset.CRD, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Cluster.Kubectl(ctx, "apply", "-f", crd); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.WaitCRDsEstablished(ctx, time.Minute, leaderworkerset.CRDName); err != nil {
		t.Fatal(err)
	}
	c := &leaderworkerset.Controller{Client: env.Cluster.Client(), Namespace: ns, Order: order}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		// Gone at once, not at the namespace's deletion: the next test
		// waits for other tests' GPU pods to go.
		zero := int64(0)
		_ = env.Cluster.Client().CoreV1().Pods(ns).DeleteCollection(context.Background(),
			metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	})
	return c
}

// createLWS creates a LeaderWorkerSet of groups of a simulated vLLM leader
// (the group's endpoint, scraped) and one worker, each with gpus GPUs,
// both opted in to the scale-down controller.
func createLWS(t *testing.T, c *leaderworkerset.Controller, name string, groups, gpus int32) {
	t.Helper()
	leader := devenv.InferenceDeployment(c.Namespace, name, 1, map[string]string{scaledown.ManagedLabel: scaledown.ManagedValue}).Spec.Template
	leader.Spec.Containers[0].Resources.Limits[scaledown.DefaultGPUResource] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
	worker := *leader.DeepCopy()
	worker.Annotations = nil // the leader's endpoint serves the group
	worker.Spec.Containers[0].Image = "gpuscale.io/lws-worker"
	worker.Spec.Containers[0].Ports = nil
	size := int32(2)
	lws := &leaderworkerset.LeaderWorkerSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: leaderworkerset.Spec{Replicas: &groups, LeaderWorkerTemplate: leaderworkerset.LeaderWorkerTemplate{
			Size: &size, LeaderTemplate: &leader, WorkerTemplate: worker}},
	}
	if err := c.Create(context.Background(), lws); err != nil {
		t.Fatal(err)
	}
}

// waitGroups waits until the set's status and its pods show groups Ready
// groups and pods pods, none terminating.
func waitGroups(t *testing.T, c *leaderworkerset.Controller, name string, groups int32, pods int) {
	t.Helper()
	testenv.WaitFor(t, 120*time.Second, fmt.Sprintf("%d Ready groups (%d pods) of %s/%s", groups, pods, c.Namespace, name), func(ctx context.Context) (bool, error) {
		lws, err := c.Get(ctx, name)
		if err != nil || lws.Status.Replicas != groups || lws.Status.ReadyReplicas != groups {
			return false, nil
		}
		l, err := env.Cluster.Client().CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != pods {
			return false, nil
		}
		for i := range l.Items {
			if !podReady(&l.Items[i]) || l.Items[i].DeletionTimestamp != nil {
				return false, nil
			}
		}
		return true, nil
	})
}

// waitGroupCosts waits until all n pods of ns carry deletion costs, every
// pod of a group its group's one cost and no two groups the same, and
// returns the cost of each group.
func waitGroupCosts(t *testing.T, ns string, n int) map[int]int {
	t.Helper()
	var costs map[int]int
	testenv.WaitFor(t, 60*time.Second, fmt.Sprintf("one deletion cost per group on %d pods", n), func(ctx context.Context) (bool, error) {
		l, err := env.Cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != n {
			return false, nil
		}
		costs = map[int]int{}
		seen := map[int]int{}
		for i := range l.Items {
			g, ok := podgroup.Of(&l.Items[i])
			c := cost(&l.Items[i])
			if !ok || c < 0 {
				return false, nil
			}
			if prev, ok := costs[g.Index]; ok && prev != c {
				return false, nil
			}
			if other, ok := seen[c]; ok && other != g.Index {
				return false, nil
			}
			costs[g.Index], seen[c] = c, g.Index
		}
		return true, nil
	})
	return costs
}

// groupPlacement maps each group of ns to the nodes of its pods (a node
// once per pod).
func groupPlacement(t *testing.T, ns string) map[int][]string {
	t.Helper()
	out := map[int][]string{}
	for _, p := range activePods(t, ns) {
		if g, ok := podgroup.Of(&p); ok {
			out[g.Index] = append(out[g.Index], p.Spec.NodeName)
		}
	}
	for g := range out {
		slices.Sort(out[g])
	}
	return out
}

// freedNodes counts the nodes of placement left with no pod once the
// removed groups go.
func freedNodes(placement map[int][]string, removed []int) int {
	left := map[string]int{}
	for g, nodes := range placement {
		for _, n := range nodes {
			left[n] += 0
			if !slices.Contains(removed, g) {
				left[n]++
			}
		}
	}
	freed := 0
	for _, c := range left {
		if c == 0 {
			freed++
		}
	}
	return freed
}

// choose lists every k-subset of items.
func choose(items []int, k int) [][]int {
	if k == 0 {
		return [][]int{nil}
	}
	var out [][]int
	for i := range items {
		for _, rest := range choose(items[i+1:], k-1) {
			out = append(out, append([]int{items[i]}, rest...))
		}
	}
	return out
}

// TestLeaderWorkerSetExamplesServerDryRun: the LeaderWorkerSet example and
// its HPA in deploy/examples/leaderworkerset are valid against the real
// API with the LeaderWorkerSet-shaped CRD installed.
func TestLeaderWorkerSetExamplesServerDryRun(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "e2e-lws-examples")
	startLWSController(t, ns, leaderworkerset.HighestIndex)
	files, err := filepath.Glob(filepath.Join(rootDir(t), "deploy/examples/leaderworkerset/*.yaml"))
	if err != nil || len(files) != 2 {
		t.Fatalf("examples %v: %v; want the LeaderWorkerSet and its HPA", files, err)
	}
	args := []string{"apply", "--dry-run=server", "-n", ns}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	if out, err := env.Cluster.Kubectl(context.Background(), args...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
