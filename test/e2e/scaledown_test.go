package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
	"github.com/gpuscale/gpuscale/pkg/scaledown"
)

// TestScaleDownConsolidation: 12 one-GPU replicas spread by the real
// scheduler over three 8-GPU nodes are scaled to 4 (what an HPA does when
// load drops). With the scale-down controller's deletion costs the 4 left
// sit on the fewest nodes their placement allows and at least one node is
// empty; the control run (pods not labelled managed, so the controller
// ignores them) gets the ReplicaSet's own ranking, which spreads the pods
// left, and consolidation must leave them on fewer nodes than it does.
func TestScaleDownConsolidation(t *testing.T) {
	needEnv(t)
	const from, to = 12, 4
	consolidated, control := -1, -1
	t.Run("consolidation", func(t *testing.T) {
		before, after, took := scaleDownRun(t, "e2e-scaledown", true, from, to)
		perfect := fewestNodes(before, to)
		consolidated = len(after)
		t.Logf("FIGURE scale-down %d -> %d with consolidation: before %s; after %s; GPU nodes in use %d -> %d (fewest possible %d); %d Ready after %v",
			from, to, placement(before), placement(after), len(before), consolidated, perfect, to, took.Round(10*time.Millisecond))
		if empty := gpuNodes(t) - consolidated; empty < 1 {
			t.Errorf("no GPU node emptied: pods on %s", placement(after))
		}
		if consolidated > perfect {
			t.Errorf("the %d pods left use %d nodes (%s); from %s, %d would do", to, consolidated, placement(after), placement(before), perfect)
		}
	})
	t.Run("control", func(t *testing.T) {
		before, after, took := scaleDownRun(t, "e2e-scaledown-control", false, from, to)
		control = len(after)
		t.Logf("FIGURE scale-down %d -> %d without consolidation (control): before %s; after %s; GPU nodes in use %d -> %d (fewest possible %d); %d Ready after %v",
			from, to, placement(before), placement(after), len(before), control, fewestNodes(before, to), to, took.Round(10*time.Millisecond))
	})
	if consolidated < 0 || control < 0 {
		t.Fatal("a run did not finish; nothing to compare")
	}
	if consolidated >= control {
		t.Errorf("consolidation left the pods on %d GPU nodes, the control on %d: consolidation must use fewer", consolidated, control)
	}
}

// TestScaleDownProtection: a serving replica gets safe-to-evict=false, an
// idle one does not, and the serving one loses it once idle for
// --scale-down-idle-time.
func TestScaleDownProtection(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "e2e-protect")
	waitNoOtherGPUPods(t, ns)
	protectionScenario(t, ns)
}

// protectionScenario runs TestScaleDownProtection's scenario in ns with
// whichever adapter runs.
func protectionScenario(t *testing.T, ns string) {
	t.Helper()
	gpuDeployment(t, ns, "llm", 2, true)
	// Other tests' GPU pods may share the nodes here (the PromQL test's own
	// Deployment runs beside this scenario), and the controller ranks nodes
	// by all their GPU pods: only that every pod has a cost is checked. The
	// ranking is TestScaleDownConsolidation's, on nodes of its own.
	pods := waitCosts(t, ns, 2, false)
	serving, idle := pods[0].Name, pods[1].Name
	patch := []byte(`{"metadata":{"labels":{"serve":"yes"}}}`)
	if _, err := env.Cluster.Client().CoreV1().Pods(ns).Patch(context.Background(), serving, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	env.World.SetRate(ns, labels.SelectorFromSet(labels.Set{"serve": "yes"}), 10)
	toProtect := testenv.WaitFor(t, 30*time.Second, "safe-to-evict=false on the serving pod", func(ctx context.Context) (bool, error) {
		return podAnnotation(ctx, ns, serving, scaledown.SafeToEvictAnnotation) == "false", nil
	})
	if v := podAnnotation(context.Background(), ns, idle, scaledown.SafeToEvictAnnotation); v != "" {
		t.Errorf("idle pod %s has safe-to-evict=%q", idle, v)
	}
	n, _ := env.Cluster.Client().CoreV1().Pods(ns).Get(context.Background(), serving, metav1.GetOptions{})
	t.Logf("serving pod %s on %s protected %v after the load started", serving, n.Spec.NodeName, time.Since(start).Round(10*time.Millisecond))

	env.World.SetRate(ns, labels.SelectorFromSet(labels.Set{"serve": "yes"}), 0)
	toClear := testenv.WaitFor(t, scaleDownIdle+30*time.Second, "safe-to-evict cleared once idle", func(ctx context.Context) (bool, error) {
		return podAnnotation(ctx, ns, serving, scaledown.SafeToEvictAnnotation) == "", nil
	})
	t.Logf("FIGURE protection (%s): load -> safe-to-evict=false in %v; load stops -> cleared in %v (--scale-down-idle-time %v)",
		ns, toProtect.Round(10*time.Millisecond), toClear.Round(10*time.Millisecond), scaleDownIdle)
}

// scaleDownRun creates a Deployment of from one-GPU replicas in a fresh
// namespace, waits for them (and, when managed, for deletion costs that
// match their placement), scales it to `to` and waits for that. It returns
// the GPU pods per node before and after, and how long the scale-down took.
func scaleDownRun(t *testing.T, name string, managed bool, from, to int32) (before, after map[string]int, took time.Duration) {
	t.Helper()
	ns := namespace(t, name)
	waitNoOtherGPUPods(t, ns)
	gpuDeployment(t, ns, "llm", from, managed)
	before = podsPerNode(activePods(t, ns))
	t.Logf("the scheduler placed %d replicas: %s", from, placement(before))
	if managed {
		waitCosts(t, ns, int(from), true)
		// The ReplicaSet controller reads costs from its own informer.
		awaitReplicaSetController(t, ns)
	}
	start := time.Now()
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, to))
	if _, err := env.Cluster.Client().AppsV1().Deployments(ns).Patch(context.Background(), "llm", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, fmt.Sprintf("%d replicas left, all Ready", to), func(ctx context.Context) (bool, error) {
		l, err := env.Cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != int(to) {
			return false, nil
		}
		for i := range l.Items {
			if !podReady(&l.Items[i]) || l.Items[i].DeletionTimestamp != nil {
				return false, nil
			}
		}
		return true, nil
	})
	return before, podsPerNode(activePods(t, ns)), time.Since(start)
}

// awaitReplicaSetController waits until the ReplicaSet controller's pod
// informer holds every pod change made before the call. Its watch
// delivers pod events in order, so once the controller acts on a pod
// created now, it has the earlier changes too: a pod that matches a
// ReplicaSet of zero replicas, which the controller adopts and deletes.
// The pod cannot be scheduled, so it goes at once and never takes a node.
func awaitReplicaSetController(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	sel := map[string]string{"e2e.gpuscale.io/sentinel": "replicaset-controller"}
	spec := corev1.PodSpec{
		Containers:   []corev1.Container{{Name: "sentinel", Image: "gpuscale.io/sentinel:none"}},
		NodeSelector: map[string]string{"e2e.gpuscale.io/no-such-node": "true"},
	}
	zero := int32(0)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "sentinel", Namespace: ns},
		Spec: appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: spec}},
	}
	if _, err := env.Cluster.Client().AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "sentinel-", Namespace: ns, Labels: sel}, Spec: spec}
	pod, err := env.Cluster.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "the ReplicaSet controller to delete the sentinel pod "+pod.Name, func(ctx context.Context) (bool, error) {
		_, err := env.Cluster.Client().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// gpuDeployment creates the inference Deployment with, when managed, the
// scale-down label in the pod template, and waits for its replicas.
func gpuDeployment(t *testing.T, ns, name string, replicas int32, managed bool) {
	t.Helper()
	var extra map[string]string
	if managed {
		extra = map[string]string{scaledown.ManagedLabel: scaledown.ManagedValue}
	}
	d := devenv.InferenceDeployment(ns, name, replicas, extra)
	if _, err := env.Cluster.Client().AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 90*time.Second, fmt.Sprintf("%d ready replicas of %s/%s", replicas, ns, name), func(ctx context.Context) (bool, error) {
		got, err := env.Cluster.Client().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.ReadyReplicas == replicas, nil
	})
}

// waitCosts waits until the n pods of ns carry deletion costs, which rank
// whole nodes (fewest pods first) when rankNodes is set, and returns the
// pods by cost.
func waitCosts(t *testing.T, ns string, n int, rankNodes bool) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	ok, what := everyPodCosted, "deletion costs on all %d pods"
	if rankNodes {
		ok, what = costsRankNodes, "deletion costs on %d pods matching their placement"
	}
	testenv.WaitFor(t, 60*time.Second, fmt.Sprintf(what, n), func(ctx context.Context) (bool, error) {
		l, err := env.Cluster.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != n {
			return false, nil
		}
		pods = l.Items
		return ok(pods), nil
	})
	sort.SliceStable(pods, func(i, j int) bool { return cost(&pods[i]) < cost(&pods[j]) })
	for _, p := range pods {
		t.Logf("  %s on %s: deletion cost %d", p.Name, p.Spec.NodeName, cost(&p))
	}
	return pods
}

// everyPodCosted: every pod has a deletion cost.
func everyPodCosted(pods []corev1.Pod) bool {
	return !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return cost(&p) < 0 })
}

// costsRankNodes: every pod has a cost, and all pods of a node with fewer
// pods (equal: the lower name) rank below every pod of the next node.
func costsRankNodes(pods []corev1.Pod) bool {
	perNode := podsPerNode(pods)
	lo, hi := map[string]int{}, map[string]int{}
	for i := range pods {
		c, node := cost(&pods[i]), pods[i].Spec.NodeName
		if c < 0 {
			return false
		}
		if v, ok := lo[node]; !ok || c < v {
			lo[node] = c
		}
		hi[node] = max(hi[node], c)
	}
	nodes := make([]string, 0, len(perNode))
	for n := range perNode {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool {
		if perNode[nodes[i]] != perNode[nodes[j]] {
			return perNode[nodes[i]] < perNode[nodes[j]]
		}
		return nodes[i] < nodes[j]
	})
	for i := 1; i < len(nodes); i++ {
		if lo[nodes[i]] <= hi[nodes[i-1]] {
			return false
		}
	}
	return true
}

func cost(p *corev1.Pod) int {
	c, err := strconv.Atoi(p.Annotations[scaledown.DeletionCostAnnotation])
	if err != nil {
		return -1
	}
	return c
}

// waitNoOtherGPUPods waits until no GPU pod of another test is left (their
// namespaces are deleted at their end), so the placement is this test's.
func waitNoOtherGPUPods(t *testing.T, ns string) {
	t.Helper()
	testenv.WaitFor(t, 120*time.Second, "GPU pods of other tests to go", func(ctx context.Context) (bool, error) {
		l, err := env.Cluster.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i := range l.Items {
			p := &l.Items[i]
			if p.Namespace != ns && scaledown.PodGPUs(p, scaledown.DefaultGPUResource) > 0 &&
				p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				return false, nil
			}
		}
		return true, nil
	})
}

func activePods(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	for _, p := range podsOf(t, ns, labels.Everything()) {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			out = append(out, p)
		}
	}
	return out
}

func podsPerNode(pods []corev1.Pod) map[string]int {
	out := map[string]int{}
	for i := range pods {
		out[pods[i].Spec.NodeName]++
	}
	return out
}

// fewestNodes is how many nodes a perfect choice of which pods to delete
// leaves in use: pods are only removed, so keep the fullest nodes' pods.
func fewestNodes(perNode map[string]int, keep int) int {
	counts := make([]int, 0, len(perNode))
	for _, c := range perNode {
		counts = append(counts, c)
	}
	slices.SortFunc(counts, func(a, b int) int { return b - a })
	n := 0
	for _, c := range counts {
		if keep <= 0 {
			break
		}
		keep -= c
		n++
	}
	return n
}

func gpuNodes(t *testing.T) int {
	t.Helper()
	l, err := env.Cluster.Client().CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, node := range l.Items {
		if q := node.Status.Allocatable[scaledown.DefaultGPUResource]; q.Value() > 0 {
			n++
		}
	}
	return n
}

func placement(perNode map[string]int) string {
	nodes := make([]string, 0, len(perNode))
	for n := range perNode {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = fmt.Sprintf("%s=%d", n, perNode[n])
	}
	return strings.Join(parts, ",")
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podAnnotation(ctx context.Context, ns, name, key string) string {
	p, err := env.Cluster.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return p.Annotations[key]
}
